"""ROLL bindings for the CONTRACT area `mask` (``roll.utils.functionals``)."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from rlconform.adapters.base import Inexpressible
from rlconform.adapters.roll.common import RollCommon


class MaskBindings(RollCommon):
    """`mask` operations ROLL has a function for."""

    def response_mask_from_eos(
        self, response_ids: torch.Tensor, eos_token: int | Sequence[int]
    ) -> torch.Tensor:
        """mask.response_from_eos -> ``get_eos_mask(response_id, eos_token)`` (one EOS id)."""
        if not isinstance(eos_token, int):
            ids = list(eos_token)
            if len(ids) != 1:
                raise Inexpressible("ROLL's get_eos_mask takes a single EOS id")
            eos_token = ids[0]
        return self.F.get_eos_mask(response_ids, eos_token=eos_token, dtype=torch.int64)

    def valid_token_mask(
        self, response_mask: torch.Tensor, loss_mask: torch.Tensor, keep_mask: torch.Tensor
    ) -> torch.Tensor:
        """mask.loss (valid tokens) -> ``get_sample_level_mask(data, pipeline_config)`` of the
        rlvr pipeline: ``final_response_mask = response_mask[:, 1:] * sample_mask``.

        ROLL's (B, L) ``response_mask`` carries response and per-token loss mask in one field
        (the agentic environments write 0 on observation tokens). ROLL has no keep-mask
        input: its sample mask is the product of its filters, so the keep flag is expressed
        as the outcome of its ``error_max_len_clip`` filter (``scores`` 1 keeps a sample, 0
        with ``error_max_len_threshold`` 0 drops it), the other filters off."""
        layout = self._layout(response_mask)
        # ROLL's one field: 1 on response tokens the policy chose (layout, not arithmetic:
        # the canonical pair of masks is what ROLL stores as one).
        action = (response_mask.bool() & loss_mask.bool()).to(torch.int64)
        fields = self._sequence_fields(layout, action)
        data = self._proto(
            {
                **fields,
                "responses": torch.zeros(
                    (response_mask.shape[0], response_mask.shape[-1]), dtype=torch.int64
                ),
                "scores": keep_mask.to(torch.float32),
            }
        )
        config = self._config(
            max_len_mask=False,
            difficulty_mask=False,
            error_max_len_clip=True,
            error_max_len_threshold=0,
        )
        data, _ = self.F.get_sample_level_mask(data, config)
        return layout.tokens_from_roll(data.batch["final_response_mask"]).to(torch.int64)

    def masked_mean(self, values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """mask.loss (mean part) -> ``masked_mean(tensor, mask)``."""
        return self.F.masked_mean(values, mask)

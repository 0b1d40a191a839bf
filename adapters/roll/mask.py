"""ROLL bindings for the CONTRACT area `mask` (``roll.utils.functionals``)."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from rlconform.adapters.roll.common import RollCommon


class MaskBindings(RollCommon):
    """`mask` operations ROLL has a function for (``valid_token_mask`` has none: ROLL's
    ``get_sample_level_mask`` derives the keep flag from its own filters)."""

    def response_mask_from_eos(
        self, response_ids: torch.Tensor, eos_token: int | Sequence[int]
    ) -> torch.Tensor:
        """mask.response_from_eos -> ``get_eos_mask(response_id, eos_token)`` (one EOS id)."""
        if not isinstance(eos_token, int):
            ids = list(eos_token)
            if len(ids) != 1:
                raise NotImplementedError("ROLL's get_eos_mask takes a single EOS id")
            eos_token = ids[0]
        return self.F.get_eos_mask(response_ids, eos_token=eos_token, dtype=torch.int64)

    def masked_mean(self, values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """mask.loss (mean part) -> ``masked_mean(tensor, mask)``."""
        return self.F.masked_mean(values, mask)

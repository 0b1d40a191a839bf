"""ROLL bindings for the CONTRACT area `agg` (``roll.utils.functionals.agg_loss``)."""

from __future__ import annotations

import torch

from rlconform.adapters.base import Unsupported
from rlconform.adapters.roll.common import RollCommon

#: The verl mode names the contract uses, which ROLL shares; ROLL has no token-sum.
ROLL_AGG_MODES = (
    "token-mean",
    "seq-mean-token-sum",
    "seq-mean-token-mean",
    "seq-mean-token-sum-norm",
)


class AggregateBindings(RollCommon):
    """`agg` operations: ``agg_loss`` on ROLL's (B, L - 1) grid."""

    def agg_loss(
        self,
        loss_mat: torch.Tensor,
        loss_mask: torch.Tensor,
        mode: str,
        dp_size: int = 1,
        batch_num_tokens: int | torch.Tensor | None = None,
        global_batch_size: int | torch.Tensor | None = None,
        loss_scale_factor: float | None = None,
    ) -> torch.Tensor:
        """agg.* -> ``agg_loss(loss_mat, loss_mask, loss_agg_mode, batch_num_tokens,
        global_valid_samples)``.

        seq-mean-token-sum-norm divides by ``loss_mask.shape[-1]``, the width L - 1 of the
        padded prompt+response grid (constant in training because ROLL pads every batch to
        ``sequence_length``): the grid is built L - 1 = ``loss_scale_factor`` wide (or the
        profile's ``agg_norm_length``); a constant narrower than prompt + response cannot be
        expressed. ``dp_size``: ROLL's strategies multiply the loss by the data-parallel
        size (``loss_scale = num_microbatches * dp_size`` under ``apply_loss_scale``) to undo
        DDP's averaging; that factor is applied here, outside ``agg_loss``.
        """
        if mode not in ROLL_AGG_MODES:
            raise Unsupported(f"ROLL's agg_loss has no mode {mode!r}")
        width = None
        if mode == "seq-mean-token-sum-norm":
            constant = loss_scale_factor
            if constant is None:
                constant = self.profile.get("agg_norm_length")
            if float(constant) != int(constant):
                raise NotImplementedError("ROLL's constant is an integer width (L - 1)")
            width = int(constant) + 1
        if width is not None:
            # A fixed grid width: drop the canonical columns that are padding in every row
            # and use one-token prompts, the most room ROLL's layout leaves for responses.
            from rlconform.adapters.roll.layout import RollLayout, response_lengths

            lengths = response_lengths(loss_mask)
            keep = int(lengths.max()) if lengths.numel() else 0
            loss_mat, loss_mask = loss_mat[:, :keep], loss_mask[:, :keep]
            ones = torch.ones_like(lengths)
            try:
                layout = RollLayout.build(lengths, keep, ones, width)
            except ValueError as exc:
                raise NotImplementedError(
                    f"ROLL's seq-mean-token-sum-norm divides by the grid width L - 1 = "
                    f"{width - 1}, too narrow for these sequences: {exc}"
                ) from exc
        else:
            layout = self._layout(loss_mask)
        value = self.F.agg_loss(
            loss_mat=layout.tokens_to_roll(loss_mat, fill=0.0),
            loss_mask=layout.tokens_to_roll(loss_mask, fill=0),
            loss_agg_mode=mode,
            batch_num_tokens=batch_num_tokens,
            global_valid_samples=global_batch_size,
        )
        return value * dp_size if dp_size != 1 else value

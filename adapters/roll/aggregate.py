"""ROLL bindings for the CONTRACT area `agg`: ``roll.utils.functionals.agg_loss`` with the
denominators ROLL's training strategies really pass.

ROLL's strategies (``FSDP2TrainStrategy.train_step``, ``MegatronTrainStrategy.train_step``)
count the mini-batch once before its micro-batches run: ``_get_batch_num_tokens`` (the
loss-mask sum) and ``_get_global_valid_samples`` (rows with at least one loss-mask token),
each all-reduced over the data-parallel group and raised to 1 when the total is 0, then
stored in ``meta_info`` for every ``loss_func`` call. The actor's loss passes the counts of
``final_response_mask`` to ``agg_loss`` (``roll/pipeline/rlvr/actor_worker.py``). Both
counters are compiled from ROLL's source (``source.py``) and run on the case's mask:

- single call (no global counts given): one rank holding the whole mini-batch, so the
  all-reduce is the identity;
- global counts given (micro-batches / ranks of the harness): the all-reduce writes the
  harness's mini-batch totals, and ROLL's own raise-to-1 applies;
- ``agg_batch_info``: the local counts each shard hands to ROLL's all-reduce.

``dp_size``: under ``apply_loss_scale`` (default True) the strategy multiplies each
micro-batch loss by ``mini_steps * dp_size`` and divides it by the gradient-accumulation
steps (``mini_steps``), i.e. by ``dp_size``, to undo DDP's gradient averaging; that factor
is applied here, outside ``agg_loss``, as the strategy applies it.
"""

from __future__ import annotations

import torch

from rlconform.adapters.base import Inexpressible, Unsupported
from rlconform.adapters.roll.common import RollCommon
from rlconform.adapters.roll.layout import RollLayout, response_lengths

#: The verl mode names the contract uses, which ROLL shares; ROLL has no token-sum.
ROLL_AGG_MODES = (
    "token-mean",
    "seq-mean-token-sum",
    "seq-mean-token-mean",
    "seq-mean-token-sum-norm",
)


class AggregateBindings(RollCommon):
    """`agg` operations: ``agg_loss`` on ROLL's (B, L - 1) grid with the strategy's counts."""

    def _agg_layout(
        self,
        loss_mat: torch.Tensor,
        loss_mask: torch.Tensor,
        mode: str,
        loss_scale_factor: float | None,
    ) -> tuple[RollLayout, torch.Tensor, torch.Tensor]:
        """seq-mean-token-sum-norm divides by ``loss_mask.shape[-1]``, the width L - 1 of the
        padded prompt+response grid (constant in training because ROLL pads every batch to
        ``sequence_length``): the grid is built L - 1 = ``loss_scale_factor`` wide (or the
        profile's ``agg_norm_length``) with one-token prompts, the most room ROLL's layout
        leaves for responses; a constant narrower than that cannot be expressed."""
        if mode != "seq-mean-token-sum-norm":
            return self._layout(loss_mask), loss_mat, loss_mask
        constant = loss_scale_factor
        if constant is None:
            constant = self.profile.get("agg_norm_length")
        if float(constant) != int(constant):
            raise Inexpressible(f"ROLL's constant is the integer grid width L - 1, not {constant}")
        width = int(constant) + 1
        lengths = response_lengths(loss_mask)
        keep = int(lengths.max()) if lengths.numel() else 0
        loss_mat, loss_mask = loss_mat[:, :keep], loss_mask[:, :keep]
        try:
            layout = RollLayout.build(lengths, keep, torch.ones_like(lengths), width)
        except ValueError as exc:
            raise Inexpressible(
                f"ROLL's seq-mean-token-sum-norm divides by the grid width L - 1 = "
                f"{width - 1}, too narrow for these sequences: {exc}"
            ) from exc
        return layout, loss_mat, loss_mask

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
        global_valid_samples)`` with the strategy's counts (module docstring)."""
        if mode not in ROLL_AGG_MODES:
            raise Unsupported(f"ROLL's agg_loss has no mode {mode!r}")
        layout, loss_mat, loss_mask = self._agg_layout(loss_mat, loss_mask, mode, loss_scale_factor)
        grid_mask = layout.tokens_to_roll(loss_mask, fill=0)
        totals = None
        if batch_num_tokens is not None or global_batch_size is not None:
            if batch_num_tokens is None or global_batch_size is None:
                raise ValueError("ROLL's strategy passes both global counts or neither")
            totals = (int(batch_num_tokens), int(global_batch_size))
        tokens, samples, _ = self.counted(grid_mask, totals)
        value = self.F.agg_loss(
            loss_mat=layout.tokens_to_roll(loss_mat, fill=0.0),
            loss_mask=grid_mask,
            loss_agg_mode=mode,
            batch_num_tokens=tokens,
            global_valid_samples=samples,
        )
        return value * dp_size if dp_size != 1 else value

    def agg_batch_info(self, loss_mask: torch.Tensor) -> dict[str, int]:
        """agg.shard_invariance -> this shard's share of ROLL's all-reduced counts: what
        ``_get_batch_num_tokens`` / ``_get_global_valid_samples`` hand to ``all_reduce``."""
        grid_mask = self._layout(loss_mask).tokens_to_roll(loss_mask, fill=0)
        _, _, (tokens, samples) = self.counted(grid_mask, None)
        return {"batch_num_tokens": tokens, "global_batch_size": samples}

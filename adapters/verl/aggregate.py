"""verl bindings for the CONTRACT area `agg`: ``core_algos.agg_loss`` and the engine's global
denominators."""

from __future__ import annotations

import torch

from rlconform.adapters.base import Unsupported


class AggregateOps:
    """`agg` operations through verl's ``agg_loss``."""

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
        """agg.*: ``verl.trainer.ppo.core_algos.agg_loss`` with verl's own keywords; a mode
        the release lacks (``Release.agg_modes``) is unsupported."""
        from verl.trainer.ppo.core_algos import agg_loss

        if mode not in self.release.agg_modes:
            raise Unsupported(f"verl {self.release.line}.x has no loss_agg_mode {mode!r}")

        return agg_loss(
            loss_mat=loss_mat,
            loss_mask=loss_mask,
            loss_agg_mode=mode,
            dp_size=dp_size,
            batch_num_tokens=batch_num_tokens,
            global_batch_size=global_batch_size,
            loss_scale_factor=loss_scale_factor,
        )

    def agg_batch_info(self, loss_mask: torch.Tensor) -> dict[str, int]:
        """agg.shard_invariance: one shard's share of verl's global denominators.

        verl has no function for these; they are its engine's bookkeeping, transcribed:
        ``batch_num_tokens`` is ``loss_mask.sum()`` all-reduced over the data-parallel group
        (``FSDPEngine.forward_backward_batch``), ``global_batch_size`` is
        ``ppo_mini_batch_size * rollout.n`` (``trainer_base._update_actor``), i.e. every
        sequence of the mini-batch, fully masked ones included.
        """
        return {
            "batch_num_tokens": int(loss_mask.sum()),
            "global_batch_size": int(loss_mask.shape[0]),
        }

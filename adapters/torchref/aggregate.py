"""torchref operations for the CONTRACT area `agg` (vectorized torch, any device)."""

from __future__ import annotations

import torch

# Contract default of the profile key ``agg_norm_length``: the constant length C of
# seq-mean-token-sum-norm when the caller passes no ``loss_scale_factor``.
DEFAULT_NORM_LENGTH = 10

AGG_MODES = (
    "token-mean",
    "token-sum",
    "seq-mean-token-sum",
    "seq-mean-token-mean",
    "seq-mean-token-sum-norm",
)


class AggregateOps:
    """Vectorized `agg` operations in the canonical padded layout."""

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
        """agg.*: (B, T) per-token losses -> scalar, in the verl mode named by ``mode``.

        ``batch_num_tokens`` / ``global_batch_size``: action tokens / sequences with an
        action token over the whole mini-batch (every rank and micro-batch); by default
        this call's own counts, which needs ``dp_size == 1``. The value is multiplied by
        ``dp_size`` to undo DDP's gradient averaging. Values at mask-0 positions are never
        read (NaN there cannot leak); no action token at all gives 0.
        """
        if mode not in AGG_MODES:
            raise ValueError(f"unknown loss aggregation mode {mode!r}; expected one of {AGG_MODES}")
        action = loss_mask.to(torch.bool)
        zero = torch.zeros((), dtype=loss_mat.dtype, device=loss_mat.device)
        masked = torch.where(action, loss_mat, zero)
        if mode == "token-sum":
            return masked.sum() * dp_size
        if mode == "token-mean":
            count = (
                batch_num_tokens if batch_num_tokens is not None else _local(action.sum(), dp_size)
            )
            return masked.sum() / _at_least_one(count, loss_mat) * dp_size
        row_tokens = action.sum(dim=-1)
        row_sums = masked.sum(dim=-1)
        if mode == "seq-mean-token-mean":
            row_sums = row_sums / row_tokens.clamp(min=1).to(loss_mat.dtype)
        sequences = global_batch_size
        if sequences is None:
            sequences = _local((row_tokens > 0).sum(), dp_size)
        value = row_sums.sum() / _at_least_one(sequences, loss_mat) * dp_size
        if mode == "seq-mean-token-sum-norm":
            if loss_scale_factor is None:
                loss_scale_factor = self.profile.get("agg_norm_length", DEFAULT_NORM_LENGTH)
            value = value / loss_scale_factor
        return value

    def agg_batch_info(self, loss_mask: torch.Tensor) -> dict[str, int]:
        """agg.shard_invariance: this shard's share of the global denominators (summed over shards).

        ``batch_num_tokens`` = action tokens; ``global_batch_size`` = sequences with at
        least one action token, the same convention as the single-call default.
        """
        action = loss_mask.to(torch.bool)
        return {
            "batch_num_tokens": int(action.sum()),
            "global_batch_size": int(action.any(dim=-1).sum()),
        }


def _local(count: torch.Tensor, dp_size: int) -> torch.Tensor:
    if dp_size != 1:
        raise ValueError(f"dp_size {dp_size} > 1 needs the global denominators of the mini-batch")
    return count


def _at_least_one(count: int | torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """The denominator as a tensor of ``like``'s dtype; 0 becomes 1 (the numerator is 0 then)."""
    return torch.as_tensor(count, device=like.device).to(like.dtype).clamp(min=1)

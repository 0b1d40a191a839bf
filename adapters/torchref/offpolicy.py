"""torchref operations for the CONTRACT area `offpolicy` (vectorized torch, any device)."""

from __future__ import annotations

import torch

from rlconform.adapters.is_correction_mode import split_mode


def _action_log_ratio(
    numerator: torch.Tensor, denominator: torch.Tensor, actions: torch.Tensor
) -> torch.Tensor:
    """numerator - denominator on action tokens, 0 elsewhere (NaN padding cannot leak)."""
    diff = numerator.detach() - denominator.detach()
    return torch.where(actions, diff, torch.zeros_like(diff))


def _inside(ratio: torch.Tensor, low: float | None, high: float | None) -> torch.Tensor:
    keep = torch.ones_like(ratio, dtype=torch.bool)
    if low is not None:
        keep &= ratio >= low
    if high is not None:
        keep &= ratio <= high
    return keep


def _clamp(ratio: torch.Tensor, low: float | None, high: float | None) -> torch.Tensor:
    if low is None and high is None:
        return ratio
    return ratio.clamp(min=low, max=high)


class OffpolicyOps:
    """Vectorized `offpolicy` operations in the canonical padded layout.

    Every output is a (B, T) tensor that is 0 wherever ``response_mask`` (the action-token
    mask) is 0. Profile ``is_log_ratio_clamp`` (default none) clamps log-ratios before exp.
    """

    def _exp(self, log_ratio: torch.Tensor) -> torch.Tensor:
        clamp = self.profile.get("is_log_ratio_clamp")
        if clamp is not None:
            log_ratio = log_ratio.clamp(-clamp, clamp)
        return torch.exp(log_ratio)

    def tis_weights(
        self,
        old_logprob: torch.Tensor,
        rollout_logprob: torch.Tensor,
        response_mask: torch.Tensor,
        clip_low: float | None = 0.0,
        clip_high: float | None = 2.0,
    ) -> torch.Tensor:
        """offpolicy.tis: clamp(exp(old - rollout), clip_low, clip_high)."""
        actions = response_mask.bool()
        ratio = self._exp(_action_log_ratio(old_logprob, rollout_logprob, actions))
        weights = _clamp(ratio, clip_low, clip_high)
        return torch.where(actions, weights, torch.zeros_like(weights))

    def icepop_weights(
        self,
        old_logprob: torch.Tensor,
        rollout_logprob: torch.Tensor,
        response_mask: torch.Tensor,
        clip_low: float | None = 0.5,
        clip_high: float | None = 2.0,
    ) -> torch.Tensor:
        """offpolicy.icepop: exp(old - rollout) inside [clip_low, clip_high], else 0."""
        actions = response_mask.bool()
        ratio = self._exp(_action_log_ratio(old_logprob, rollout_logprob, actions))
        keep = actions & _inside(ratio, clip_low, clip_high)
        return torch.where(keep, ratio, torch.zeros_like(ratio))

    def opsm_mask(
        self,
        logprob: torch.Tensor,
        old_logprob: torch.Tensor,
        advantages: torch.Tensor,
        response_mask: torch.Tensor,
        delta: float = 1e-4,
    ) -> torch.Tensor:
        """offpolicy.opsm: 0 for every token of a sequence with A < 0 and seq_kl > delta."""
        actions = response_mask.bool()
        diff = _action_log_ratio(old_logprob, logprob, actions)
        counts = actions.sum(-1).clamp(min=1).to(diff.dtype)
        seq_kl = diff.sum(-1) / counts
        negative = torch.where(actions, advantages.detach(), torch.zeros_like(diff)) < 0
        drop = negative & (seq_kl > delta).unsqueeze(-1)
        return (actions & ~drop).to(logprob.dtype)

    def is_correction_weights(
        self,
        old_logprob: torch.Tensor,
        rollout_logprob: torch.Tensor,
        response_mask: torch.Tensor,
        mode: str = "sequence_mask",
        clip_min: float | None = None,
        clip_max: float | None = 3.0,
    ) -> torch.Tensor:
        """offpolicy.is_correction: token_/sequence_ x truncate/mask importance weights."""
        level, action = split_mode(mode)
        actions = response_mask.bool()
        log_ratio = _action_log_ratio(old_logprob, rollout_logprob, actions)
        if level == "sequence":
            total = log_ratio.sum(-1, keepdim=True)
            if self.profile.get("is_sequence_log_ratio", "sum") == "mean":
                total = total / actions.sum(-1, keepdim=True).clamp(min=1).to(total.dtype)
            log_ratio = total.expand_as(log_ratio)
        ratio = self._exp(log_ratio)
        if action == "truncate":
            weights = _clamp(ratio, clip_min, clip_max)
        else:
            weights = torch.where(
                _inside(ratio, clip_min, clip_max), ratio, torch.zeros_like(ratio)
            )
        return torch.where(actions, weights, torch.zeros_like(weights))

    def logprob_gap(
        self,
        old_logprob: torch.Tensor,
        rollout_logprob: torch.Tensor,
        response_mask: torch.Tensor,
    ) -> torch.Tensor:
        """offpolicy.logprob_gap: mean |old - rollout| over action tokens (0-dim tensor)."""
        actions = response_mask.bool()
        gap = _action_log_ratio(old_logprob, rollout_logprob, actions).abs()
        counts = actions.sum(-1).to(gap.dtype)
        if self.profile.get("logprob_gap_reduction", "token_mean") == "sample_mean":
            per_sample = gap.sum(-1) / counts.clamp(min=1)
            return per_sample.sum() / max(per_sample.shape[0], 1)
        return gap.sum() / counts.sum().clamp(min=1)

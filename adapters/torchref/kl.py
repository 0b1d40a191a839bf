"""torchref operations for the CONTRACT area `kl` (vectorized torch, any device)."""

from __future__ import annotations

import torch

_ESTIMATORS = {
    "kl": "k1",
    "k1": "k1",
    "abs": "abs",
    "mse": "k2",
    "k2": "k2",
    "low_var_kl": "k3",
    "k3": "k3",
}

_CONTROLLER_ERROR_CLIP = 0.2


def _split_mode(mode: str) -> tuple[str, bool]:
    straight = mode.endswith("+")
    name = mode[:-1] if straight else mode
    if name not in _ESTIMATORS:
        raise ValueError(f"unknown KL estimator {mode!r}")
    return _ESTIMATORS[name], straight


def _estimate(
    estimator: str,
    logprob: torch.Tensor,
    ref_logprob: torch.Tensor,
    ref_clamp: float | None,
    value_clamp: float | None,
) -> torch.Tensor:
    diff = logprob - ref_logprob
    if estimator == "k1":
        return diff
    if estimator == "abs":
        return diff.abs()
    if estimator == "k2":
        return 0.5 * diff.square()
    # The input clamp keeps exp finite (and its gradient free of inf * 0) at any log-ratio.
    x = ref_logprob - logprob
    if ref_clamp is not None:
        x = x.clamp(-ref_clamp, ref_clamp)
    value = torch.expm1(x) - x
    if value_clamp is not None:
        value = value.clamp(-value_clamp, value_clamp)
    return value


class KLOps:
    """Vectorized `kl` operations in the canonical padded layout."""

    def kl_penalty(
        self, logprob: torch.Tensor, ref_logprob: torch.Tensor, mode: str
    ) -> torch.Tensor:
        """kl.estimators / kl.straight_through: element-wise (B, T) KL estimate.

        A trailing ``+`` returns the named estimator's value with the gradient of k2.
        """
        estimator, straight = _split_mode(mode)
        value = _estimate(
            estimator,
            logprob,
            ref_logprob,
            self.profile.get("kl_ref_clamp", 20.0),
            self.profile.get("k3_value_clamp", 10.0),
        )
        if not straight:
            return value
        diff = logprob - ref_logprob
        return value.detach() + diff.detach() * (diff - diff.detach())

    def importance_weighted_kl(
        self,
        logprob: torch.Tensor,
        ref_logprob: torch.Tensor,
        old_logprob: torch.Tensor,
        mode: str,
    ) -> torch.Tensor:
        """kl.importance_weighted: exp(clamp(logprob - old)) * kl(logprob, ref), ratio with gradient."""
        estimator, straight = _split_mode(mode)
        if straight:
            raise ValueError(f"straight-through mode {mode!r} is not importance weighted")
        kl = _estimate(
            estimator,
            logprob,
            ref_logprob,
            self.profile.get("kl_ref_clamp", 20.0),
            self.profile.get("k3_value_clamp", 10.0),
        )
        log_ratio = logprob - old_logprob
        log_ratio_clamp = self.profile.get("kl_is_log_ratio_clamp", 20.0)
        if log_ratio_clamp is not None:
            log_ratio = log_ratio.clamp(-log_ratio_clamp, log_ratio_clamp)
        return torch.exp(log_ratio) * kl

    def apply_kl_in_reward(
        self,
        token_scores: torch.Tensor,
        old_logprob: torch.Tensor,
        ref_logprob: torch.Tensor,
        response_mask: torch.Tensor,
        beta: float,
        mode: str,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """kl.in_reward: (token_scores - beta * kl * mask, KL metric over action tokens)."""
        estimator, _ = _split_mode(mode)
        actions = response_mask.bool()
        kl = _estimate(
            estimator,
            old_logprob.detach(),
            ref_logprob.detach(),
            self.profile.get("kl_ref_clamp", 20.0),
            self.profile.get("k3_value_clamp", 10.0),
        )
        kl = torch.where(actions, kl, torch.zeros_like(kl))
        token_rewards = token_scores - beta * kl
        counts = actions.sum(-1).to(kl.dtype)
        if self.profile.get("kl_metric_reduction", "token_mean") == "sample_mean":
            per_sample = kl.sum(-1) / counts.clamp(min=1)
            metric = per_sample.sum() / max(per_sample.shape[0], 1)
        else:
            metric = kl.sum() / counts.sum().clamp(min=1)
        return token_rewards, metric

    def kl_controller_update(
        self,
        kind: str,
        value: float,
        current_kl: float,
        n_steps: int,
        target_kl: float,
        horizon: float,
    ) -> float:
        """kl.adaptive_controller: the coefficient after one update (stateless)."""
        if kind == "fixed":
            return float(value)
        if kind != "adaptive":
            raise ValueError(f"unknown controller kind {kind!r}")
        if target_kl <= 0 or horizon <= 0:
            raise ValueError("target_kl and horizon must be > 0")
        err = min(
            max(current_kl / target_kl - 1.0, -_CONTROLLER_ERROR_CLIP), _CONTROLLER_ERROR_CLIP
        )
        return float(value) * (1.0 + err * n_steps / horizon)

"""verl bindings for the CONTRACT area `offpolicy`: the trainer's rollout-correction entry
point ``rollout_corr_helper.compute_rollout_correction_and_rejection_mask``.

verl picks the weighting from its ``rollout_is`` level ("token" / "sequence") and the form
of ``rollout_is_threshold``: a single upper bound truncates (TIS), a ``"lower_upper"``
string rejects outside the band (IcePop). Those are the only translations made here.

verl's bands need a positive lower bound. A contract band without one (or with 0) keeps every
ratio up to the upper bound; verl's weights on action tokens are at least exp(-20) (its own
safety clamp of the log-ratio), so the smallest positive float32 stands for "no lower
bound" and keeps exactly the same tokens. A lower *truncation* bound has no counterpart in
verl (its TIS only truncates from above): the operation refuses it.
"""

from __future__ import annotations

from typing import Any

import torch

_NO_LOWER_BOUND = float(torch.finfo(torch.float32).tiny)


def _band(low: float | None, high: float) -> str:
    lower = _NO_LOWER_BOUND if low is None or low == 0.0 else float(low)
    return f"{lower!r}_{float(high)!r}"


def _truncation(low: float | None, high: float) -> float:
    if low is not None and low != 0.0:
        raise ValueError(
            f"verl's truncated IS clamps from above only; a lower truncation bound {low} "
            "has no verl setting"
        )
    return float(high)


def _weights(
    old_logprob: torch.Tensor,
    rollout_logprob: torch.Tensor,
    response_mask: torch.Tensor,
    level: str,
    threshold: Any,
) -> torch.Tensor:
    from verl.trainer.ppo.rollout_corr_helper import (
        compute_rollout_correction_and_rejection_mask,
    )

    proto, _, _ = compute_rollout_correction_and_rejection_mask(
        old_log_prob=old_logprob,
        rollout_log_prob=rollout_logprob,
        response_mask=response_mask,
        rollout_is=level,
        rollout_is_threshold=threshold,
    )
    return proto.batch["rollout_is_weights"]


class OffpolicyOps:
    """`offpolicy` operations through verl's rollout correction."""

    def tis_weights(
        self,
        old_logprob: torch.Tensor,
        rollout_logprob: torch.Tensor,
        response_mask: torch.Tensor,
        clip_low: float | None = 0.0,
        clip_high: float | None = 2.0,
    ) -> torch.Tensor:
        """offpolicy.tis: token-level IS with a single threshold (truncation)."""
        threshold = _truncation(clip_low, clip_high)
        return _weights(old_logprob, rollout_logprob, response_mask, "token", threshold)

    def icepop_weights(
        self,
        old_logprob: torch.Tensor,
        rollout_logprob: torch.Tensor,
        response_mask: torch.Tensor,
        clip_low: float | None = 0.5,
        clip_high: float | None = 2.0,
    ) -> torch.Tensor:
        """offpolicy.icepop: token-level IS with a ``"lower_upper"`` band (rejection)."""
        return _weights(
            old_logprob, rollout_logprob, response_mask, "token", _band(clip_low, clip_high)
        )

    def is_correction_weights(
        self,
        old_logprob: torch.Tensor,
        rollout_logprob: torch.Tensor,
        response_mask: torch.Tensor,
        mode: str = "sequence_mask",
        clip_min: float | None = None,
        clip_max: float | None = 3.0,
    ) -> torch.Tensor:
        """offpolicy.is_correction: ``token_*`` / ``sequence_*`` is verl's ``rollout_is``
        level; ``*_truncate`` a single threshold, ``*_mask`` a band."""
        level, _, action = mode.partition("_")
        if level not in ("token", "sequence") or action not in ("truncate", "mask"):
            raise ValueError(f"unknown IS-correction mode {mode!r}")
        threshold = (
            _truncation(clip_min, clip_max) if action == "truncate" else _band(clip_min, clip_max)
        )
        return _weights(old_logprob, rollout_logprob, response_mask, level, threshold)

    def logprob_gap(
        self,
        old_logprob: torch.Tensor,
        rollout_logprob: torch.Tensor,
        response_mask: torch.Tensor,
    ) -> torch.Tensor:
        """offpolicy.logprob_gap: ``training/rollout_probs_diff_mean`` of
        ``verl.utils.debug.metrics.calculate_debug_metrics``, the trainer's rollout-vs-actor
        gap metric, on a batch with the response mask and the two log-prob tensors."""
        from verl import DataProto
        from verl.utils.debug.metrics import calculate_debug_metrics

        data = DataProto.from_dict(
            tensors={
                "rollout_log_probs": rollout_logprob,
                "old_log_probs": old_logprob,
                "response_mask": response_mask,
                "responses": torch.zeros_like(response_mask, dtype=torch.int64),
            }
        )
        metrics = calculate_debug_metrics(data)
        return torch.as_tensor(metrics["training/rollout_probs_diff_mean"], dtype=torch.float64)

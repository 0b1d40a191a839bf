"""Oracle for the CONTRACT area `offpolicy` (standard library only, ragged lists, float64).

Every per-token result is 0 off the action tokens (mask 0): a weight or mask only exists
where the policy chose the token (what an implementation puts there is ignored by what
consumes it, as long as it is finite). ``log_ratio_clamp`` (profile ``is_log_ratio_clamp``;
verl +-20, default none) clamps a log-ratio before it is exponentiated.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from rlconform.oracle.errors import ContractError, require_same_length
from rlconform.oracle.kl import exp_or_inf

IS_CORRECTION_MODES = ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask")


def _clamp(x: float, low: float | None, high: float | None) -> float:
    if low is not None and x < low:
        return low
    if high is not None and x > high:
        return high
    return x


def _inside(x: float, low: float | None, high: float | None) -> bool:
    return (low is None or x >= low) and (high is None or x <= high)


def _ratio(log_ratio: float, log_ratio_clamp: float | None) -> float:
    """exp of the log-ratio, clamped to +-log_ratio_clamp first when one is given."""
    if log_ratio_clamp is not None:
        log_ratio = max(-log_ratio_clamp, min(log_ratio_clamp, log_ratio))
    return exp_or_inf(log_ratio)


def tis_weights(
    old: Sequence[float],
    rollout: Sequence[float],
    mask: Sequence[int],
    *,
    low: float | None,
    high: float | None,
    log_ratio_clamp: float | None = None,
    uid: object = None,
) -> list[float]:
    """offpolicy.tis: w_t = clamp(exp(old_t - rollout_t), low, high) on action tokens, else 0."""
    require_same_length("offpolicy.tis", uid, old=old, rollout=rollout, mask=mask)
    return [
        _clamp(_ratio(od - ro, log_ratio_clamp), low, high) if m else 0.0
        for od, ro, m in zip(old, rollout, mask, strict=True)
    ]


def icepop_weights(
    old: Sequence[float],
    rollout: Sequence[float],
    mask: Sequence[int],
    *,
    low: float | None,
    high: float | None,
    log_ratio_clamp: float | None = None,
    uid: object = None,
) -> list[float]:
    """offpolicy.icepop: r_t = exp(old_t - rollout_t); w_t = r_t if low <= r_t <= high, else 0
    (rejection, not clamping); 0 off the action tokens."""
    require_same_length("offpolicy.icepop", uid, old=old, rollout=rollout, mask=mask)
    weights = []
    for od, ro, m in zip(old, rollout, mask, strict=True):
        ratio = _ratio(od - ro, log_ratio_clamp)
        weights.append(ratio if m and _inside(ratio, low, high) else 0.0)
    return weights


def opsm_keep(
    logp: Sequence[float],
    old: Sequence[float],
    mask: Sequence[int],
    advantage: float,
    *,
    delta: float,
    uid: object = None,
) -> list[int]:
    """offpolicy.opsm: seq_kl = sum_t (old_t - logp_t) m_t / sum_t m_t; a sequence with
    A < 0 and seq_kl > delta is masked out entirely (all 0); otherwise keep = m."""
    require_same_length("offpolicy.opsm", uid, logp=logp, old=old, mask=mask)
    actions = [od - lp for lp, od, m in zip(logp, old, mask, strict=True) if m]
    seq_kl = math.fsum(actions) / len(actions) if actions else 0.0
    if advantage < 0 and seq_kl > delta:
        return [0] * len(mask)
    return [1 if m else 0 for m in mask]


def is_correction_weights(
    old: Sequence[float],
    rollout: Sequence[float],
    mask: Sequence[int],
    *,
    mode: str,
    clip_min: float | None = None,
    clip_max: float | None = 3.0,
    sequence_log_ratio: str = "sum",
    log_ratio_clamp: float | None = None,
    uid: object = None,
) -> list[float]:
    """offpolicy.is_correction: rollout-vs-train importance weights (TRL mode names).

    token_*: r_t = exp(old_t - rollout_t). sequence_*: one ratio per sequence,
    exp(sum over action tokens of (old - rollout)) when ``sequence_log_ratio == "sum"``
    (TRL: product of token ratios), exp of their mean when ``"mean"`` (geometric mean).
    *_truncate: clamp(r, clip_min, clip_max). *_mask: r inside [clip_min, clip_max], else 0.
    A None bound is absent. 0 off the action tokens.
    """
    clause = "offpolicy.is_correction"
    require_same_length(clause, uid, old=old, rollout=rollout, mask=mask)
    if mode not in IS_CORRECTION_MODES:
        raise ContractError(clause, f"unknown mode {mode!r}", uid=uid)
    if sequence_log_ratio not in ("sum", "mean"):
        raise ContractError(clause, f"unknown sequence_log_ratio {sequence_log_ratio!r}")
    log_ratios = [od - ro for od, ro in zip(old, rollout, strict=True)]
    if mode.startswith("sequence_"):
        actions = [lr for lr, m in zip(log_ratios, mask, strict=True) if m]
        total = math.fsum(actions)
        if sequence_log_ratio == "mean" and actions:
            total /= len(actions)
        log_ratios = [total] * len(mask)
    weights = []
    for lr, m in zip(log_ratios, mask, strict=True):
        ratio = _ratio(lr, log_ratio_clamp)
        if mode.endswith("_truncate"):
            weight = _clamp(ratio, clip_min, clip_max)
        else:
            weight = ratio if _inside(ratio, clip_min, clip_max) else 0.0
        weights.append(weight if m else 0.0)
    return weights


def logprob_gap(
    olds: Sequence[Sequence[float]],
    rollouts: Sequence[Sequence[float]],
    masks: Sequence[Sequence[int]],
    *,
    reduction: str = "token_mean",
) -> float:
    """offpolicy.logprob_gap: train_rollout_logprob_abs_diff = mean of |old - rollout| over
    action tokens.

    ``token_mean``: over all action tokens of the batch. ``sample_mean`` (slime's
    sum-of-sample-means divided by the sample count): mean over samples of each sample's
    action-token mean, a sample without action tokens counting as 0. Nothing to average
    gives 0.0.
    """
    if reduction not in ("token_mean", "sample_mean"):
        raise ContractError("offpolicy.logprob_gap", f"unknown reduction {reduction!r}")
    per_sample = []
    for old, rollout, mask in zip(olds, rollouts, masks, strict=True):
        require_same_length("offpolicy.logprob_gap", None, old=old, rollout=rollout, mask=mask)
        per_sample.append([abs(od - ro) for od, ro, m in zip(old, rollout, mask, strict=True) if m])
    if reduction == "token_mean":
        tokens = [gap for row in per_sample for gap in row]
        return math.fsum(tokens) / len(tokens) if tokens else 0.0
    means = [math.fsum(row) / len(row) if row else 0.0 for row in per_sample]
    return math.fsum(means) / len(means) if means else 0.0

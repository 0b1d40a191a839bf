"""Oracle for the CONTRACT area `kl` (standard library only, ragged lists, float64).

Each per-token estimator returns ``(value, d value / d logp)``: the gradient with respect
to the current log-prob is part of the contract, so the oracle states it analytically.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from rlconform.oracle.errors import ContractError, require_same_length

ESTIMATOR_ALIASES: dict[str, str] = {
    "kl": "k1",
    "k1": "k1",
    "abs": "abs",
    "mse": "k2",
    "k2": "k2",
    "low_var_kl": "k3",
    "k3": "k3",
}

CONTROLLER_ERROR_CLIP = 0.2


def exp_or_inf(x: float) -> float:
    """``math.exp`` that gives inf instead of raising OverflowError (as float arithmetic does)."""
    try:
        return math.exp(x)
    except OverflowError:
        return math.inf


def k1(logp: float, ref: float) -> tuple[float, float]:
    """kl.estimators k1 ("kl"): value logp - ref; d/dlogp = 1."""
    return logp - ref, 1.0


def kl_abs(logp: float, ref: float) -> tuple[float, float]:
    """kl.estimators abs: value |logp - ref|; d/dlogp = sign(logp - ref), 0 at a tie."""
    diff = logp - ref
    sign = 1.0 if diff > 0 else (-1.0 if diff < 0 else 0.0)
    return abs(diff), sign


def k2(logp: float, ref: float) -> tuple[float, float]:
    """kl.estimators k2 ("mse"): value 0.5 (logp - ref)^2; d/dlogp = logp - ref."""
    diff = logp - ref
    return 0.5 * diff * diff, diff


def k3(
    logp: float, ref: float, *, ref_clamp: float | None, value_clamp: float | None
) -> tuple[float, float]:
    """kl.estimators k3 ("low_var_kl"): x = clamp(ref - logp, +-ref_clamp);
    value = clamp(exp(x) - x - 1, +-value_clamp).

    d/dlogp is the derivative of that clamped form: -(exp(x) - 1) where neither clamp is
    active, 0 where one is (bounds inclusive, as ``torch.clamp`` passes the gradient there).
    """
    x, dx_dlogp = ref - logp, -1.0
    if ref_clamp is not None and abs(x) > ref_clamp:
        x, dx_dlogp = math.copysign(ref_clamp, x), 0.0
    e = exp_or_inf(x)
    value, grad = e - x - 1.0, (e - 1.0) * dx_dlogp
    if value_clamp is not None and abs(value) > value_clamp:
        value, grad = math.copysign(value_clamp, value), 0.0
    return value, grad


def split_mode(mode: str, clause: str = "kl.estimators") -> tuple[str, bool]:
    """(canonical estimator, straight-through?) for a mode such as ``"low_var_kl"`` or ``"k3+"``."""
    straight = mode.endswith("+")
    name = mode[:-1] if straight else mode
    if name not in ESTIMATOR_ALIASES:
        raise ContractError(clause, f"unknown KL estimator {mode!r}")
    return ESTIMATOR_ALIASES[name], straight


def estimate(
    estimator: str,
    logp: float,
    ref: float,
    *,
    ref_clamp: float | None = 20.0,
    value_clamp: float | None = 10.0,
) -> tuple[float, float]:
    """One token's (value, d value / d logp) for a canonical estimator name."""
    if estimator == "k3":
        return k3(logp, ref, ref_clamp=ref_clamp, value_clamp=value_clamp)
    simple: dict[str, Callable[[float, float], tuple[float, float]]] = {
        "k1": k1,
        "abs": kl_abs,
        "k2": k2,
    }
    return simple[estimator](logp, ref)


def kl_penalty(
    logp: Sequence[float],
    ref: Sequence[float],
    mode: str,
    *,
    ref_clamp: float | None = 20.0,
    value_clamp: float | None = 10.0,
    uid: object = None,
) -> tuple[list[float], list[float]]:
    """kl.estimators and kl.straight_through: per-token KL values and d value / d logp.

    ``mode`` is an estimator name or alias; a trailing ``+`` keeps the value of that
    estimator and takes the gradient of k2, d/dlogp = logp - ref (straight-through).
    """
    clause = "kl.straight_through" if mode.endswith("+") else "kl.estimators"
    require_same_length(clause, uid, logp=logp, ref=ref)
    estimator, straight = split_mode(mode, clause)
    values, grads = [], []
    for lp, rf in zip(logp, ref, strict=True):
        value, grad = estimate(estimator, lp, rf, ref_clamp=ref_clamp, value_clamp=value_clamp)
        values.append(value)
        grads.append(lp - rf if straight else grad)
    return values, grads


def importance_weighted_kl(
    logp: Sequence[float],
    ref: Sequence[float],
    old: Sequence[float],
    mode: str,
    *,
    ref_clamp: float | None = 20.0,
    value_clamp: float | None = 10.0,
    log_ratio_clamp: float | None = 20.0,
    uid: object = None,
) -> tuple[list[float], list[float]]:
    """kl.importance_weighted: w * kl(logp, ref) with w = exp(clamp(logp - old, +-log_ratio_clamp)).

    The ratio carries gradient (it is not detached; this is the gradient of the
    importance-sampled KL): d/dlogp = w' kl + w kl', w' = w where the log-ratio clamp is
    inactive, else 0. The k3 value clamp applies to the KL before it is weighted (a clamped
    kl has kl' = 0 there; slime clamps the product instead).
    """
    clause = "kl.importance_weighted"
    require_same_length(clause, uid, logp=logp, ref=ref, old=old)
    estimator, straight = split_mode(mode, clause)
    if straight:
        raise ContractError(clause, f"straight-through mode {mode!r} is not importance weighted")
    values, grads = [], []
    for lp, rf, od in zip(logp, ref, old, strict=True):
        kl, dkl = estimate(estimator, lp, rf, ref_clamp=ref_clamp, value_clamp=value_clamp)
        log_ratio, dlog_ratio = lp - od, 1.0
        if log_ratio_clamp is not None and abs(log_ratio) > log_ratio_clamp:
            log_ratio, dlog_ratio = math.copysign(log_ratio_clamp, log_ratio), 0.0
        w = exp_or_inf(log_ratio)
        values.append(w * kl)
        grads.append(w * dlog_ratio * kl + w * dkl)
    return values, grads


def kl_in_reward(
    scores: Sequence[float],
    old: Sequence[float],
    ref: Sequence[float],
    mask: Sequence[int],
    *,
    beta: float,
    mode: str,
    ref_clamp: float | None = 20.0,
    value_clamp: float | None = 10.0,
    uid: object = None,
) -> list[float]:
    """kl.in_reward: r_t = s_t - beta * kl(old_t, ref_t) * m_t (m = action-token mask)."""
    require_same_length("kl.in_reward", uid, scores=scores, old=old, ref=ref, mask=mask)
    estimator, _ = split_mode(mode, "kl.in_reward")
    rewards = []
    for s, od, rf, m in zip(scores, old, ref, mask, strict=True):
        if m:
            kl, _ = estimate(estimator, od, rf, ref_clamp=ref_clamp, value_clamp=value_clamp)
            rewards.append(s - beta * kl)
        else:
            rewards.append(s)
    return rewards


def kl_in_reward_metric(
    olds: Sequence[Sequence[float]],
    refs: Sequence[Sequence[float]],
    masks: Sequence[Sequence[int]],
    *,
    mode: str,
    reduction: str = "token_mean",
    ref_clamp: float | None = 20.0,
    value_clamp: float | None = 10.0,
) -> float:
    """kl.in_reward metric: the KL (old vs ref) averaged over action tokens.

    ``token_mean``: over all action tokens of the batch. ``sample_mean`` (verl's
    ``actor/reward_kl_penalty``): mean over samples of each sample's action-token mean, a
    sample without action tokens counting as 0. Nothing to average gives 0.0.
    """
    if reduction not in ("token_mean", "sample_mean"):
        raise ContractError("kl.in_reward", f"unknown metric reduction {reduction!r}")
    estimator, _ = split_mode(mode, "kl.in_reward")
    per_sample = []
    for old, ref, mask in zip(olds, refs, masks, strict=True):
        per_sample.append(
            [
                estimate(estimator, od, rf, ref_clamp=ref_clamp, value_clamp=value_clamp)[0]
                for od, rf, m in zip(old, ref, mask, strict=True)
                if m
            ]
        )
    if reduction == "token_mean":
        tokens = [kl for row in per_sample for kl in row]
        return math.fsum(tokens) / len(tokens) if tokens else 0.0
    means = [math.fsum(row) / len(row) if row else 0.0 for row in per_sample]
    return math.fsum(means) / len(means) if means else 0.0


def kl_controller_update(
    kind: str,
    value: float,
    current_kl: float,
    n_steps: int,
    *,
    target_kl: float,
    horizon: float,
) -> float:
    """kl.adaptive_controller: fixed -> value; adaptive -> value * (1 + err * n_steps / horizon),
    err = clip(current_kl / target_kl - 1, -0.2, 0.2)."""
    if kind == "fixed":
        return value
    if kind != "adaptive":
        raise ContractError("kl.adaptive_controller", f"unknown controller kind {kind!r}")
    if target_kl <= 0 or horizon <= 0:
        raise ContractError(
            "kl.adaptive_controller",
            f"target_kl and horizon must be > 0 (got {target_kl!r}, {horizon!r})",
        )
    err = current_kl / target_kl - 1.0
    err = min(max(err, -CONTROLLER_ERROR_CLIP), CONTROLLER_ERROR_CLIP)
    return value * (1.0 + err * n_steps / horizon)

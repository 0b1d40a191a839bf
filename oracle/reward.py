"""Oracle for the CONTRACT area `reward` (standard library only, ragged lists, float64)."""

from __future__ import annotations

import math
from fractions import Fraction

from rlconform.oracle.errors import ContractError


def place_reward_last(
    reward: float, loss_mask: list[int], *, nonaction_tail: str = "last_token", uid: object = None
) -> tuple[list[float], bool]:
    """reward.place_last: the sequence reward goes on one token, all others 0.

    Index L_i - 1 when ``nonaction_tail == "last_token"`` (verl), or the last action token
    (mask 1) when ``"last_action"`` (slime REINFORCE++, OpenRLHF). L_i = 0 (or no action
    token under ``last_action``): nothing can be placed; returns an all-zero row, flagged.
    Row sum == reward whenever the sample is not flagged.
    """
    if nonaction_tail not in ("last_token", "last_action"):
        raise ContractError(
            "reward.place_last", f"unknown nonaction_tail {nonaction_tail!r}", uid=uid
        )
    row = [0.0] * len(loss_mask)
    if nonaction_tail == "last_token":
        index = len(loss_mask) - 1
    else:
        actions = [t for t, m in enumerate(loss_mask) if m]
        index = actions[-1] if actions else -1
    if index < 0:
        return row, True
    row[index] = float(reward)
    return row, False


def place_reward_uniform(reward: float, loss_mask: list[int], *, uid: object = None) -> list[float]:
    """reward.place_uniform: r / n_i on each of the n_i action tokens (mask 1), 0 elsewhere.

    The row sums to r also when the response has mask holes. No action token (L_i = 0, or
    only holes): nothing can be placed, an all-zero row.
    """
    actions = sum(1 for m in loss_mask if m)
    return [float(reward) / actions if m else 0.0 for m in loss_mask]


def place_reward_discounted(
    reward: float, loss_mask: list[int], gamma: float, *, uid: object = None
) -> list[float]:
    """reward.place_discounted: over the n_i action tokens in order, the k-th gets
    r * g^(n_i-1-k) / sum_j g^(n_i-1-j); 0 elsewhere; sum = r.

    g = 0 puts the whole reward on the last action token (0^0 = 1); g = 1 spreads it
    uniformly. No action token: an all-zero row.
    """
    if gamma < 0:
        raise ContractError(
            "reward.place_discounted", f"gamma must be >= 0, got {gamma!r}", uid=uid
        )
    n = sum(1 for m in loss_mask if m)
    weights = [gamma ** (n - 1 - k) for k in range(n)]
    total = math.fsum(weights)
    row, k = [], 0
    for m in loss_mask:
        if m:
            row.append(float(reward) * weights[k] / total)
            k += 1
        else:
            row.append(0.0)
    return row


def normalize_rewards(
    rewards: list[float],
    keep: list[bool],
    *,
    ddof: int = 0,
    eps: float = 1e-8,
    uids: list[object] | None = None,
) -> list[float | None]:
    """reward.normalize_batch: (r - mean) / (std + eps) over kept samples; None when dropped.

    mean and std (ddof 0 by contract) come from kept samples only. Exact rational arithmetic
    up to the square root, so all-equal rewards give exactly 0 (never ~0 / ~0).
    """
    uids = uids if uids is not None else list(range(len(rewards)))
    kept = []
    for r, k, uid in zip(rewards, keep, uids, strict=True):
        if k and not math.isfinite(r):
            raise ContractError(
                "reward.normalize_batch", f"kept reward {r!r}", uid=uid, field="reward"
            )
        if k:
            kept.append(Fraction(r))
    if not kept:
        return [None] * len(rewards)
    mean = sum(kept) / len(kept)
    dof = len(kept) - ddof
    variance = sum((r - mean) ** 2 for r in kept) / dof if dof > 0 else Fraction(0)
    std = math.sqrt(variance)
    return [
        float(Fraction(r) - mean) / (std + eps) if k else None
        for r, k in zip(rewards, keep, strict=True)
    ]


def td_target(
    reward: float, bootstrap: float, truncated: bool, gamma: float, *, uid: object = None
) -> float:
    """reward.td_target: terminated -> r; truncated -> r + gamma * V_boot.

    V_boot (``bootstrap``) is the value of the state after the trajectory's last response
    token (the bootstrap value adv.gae takes), never the next episode's first state; a
    terminated trajectory ignores it.
    """
    if not truncated:
        return float(reward)
    if not math.isfinite(bootstrap):
        raise ContractError(
            "reward.td_target", f"truncated trajectory with bootstrap {bootstrap!r}", uid=uid
        )
    return float(reward) + gamma * float(bootstrap)

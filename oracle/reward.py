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
    """reward.place_uniform: r / L_i on each action token (mask 1), 0 elsewhere.

    L_i is the response length (``len(loss_mask)``), so with mask holes the row sums to
    r * (action tokens) / L_i. L_i = 0: an empty row.
    """
    length = len(loss_mask)
    return [float(reward) / length if m else 0.0 for m in loss_mask]


def place_reward_discounted(
    reward: float, length: int, gamma: float, *, uid: object = None
) -> list[float]:
    """reward.place_discounted: token t gets r * g^(L_i-1-t) / sum_k g^(L_i-1-k); sum = r.

    g = 0 puts the whole reward on the last token (0^0 = 1); g = 1 spreads it uniformly.
    """
    if gamma < 0:
        raise ContractError(
            "reward.place_discounted", f"gamma must be >= 0, got {gamma!r}", uid=uid
        )
    weights = [gamma ** (length - 1 - t) for t in range(length)]
    total = math.fsum(weights)
    return [float(reward) * w / total for w in weights]


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
    reward: float, values: list[float], truncated: bool, gamma: float, *, uid: object = None
) -> float:
    """reward.td_target: terminated -> r; truncated -> r + gamma * V(last real state).

    ``values`` are this trajectory's own per-token values; the last real state is
    values[L_i - 1], never the next trajectory's first value.
    """
    if not truncated:
        return float(reward)
    if not values:
        raise ContractError(
            "reward.td_target", "a truncated trajectory with no state cannot bootstrap", uid=uid
        )
    return float(reward) + gamma * values[-1]

"""Oracle for the CONTRACT area `reward` (standard library only, ragged lists, float64)."""

from __future__ import annotations

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

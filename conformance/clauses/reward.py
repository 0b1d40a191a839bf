"""Clauses of the CONTRACT area `reward`."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from rlconform.conformance import strategies as cs
from rlconform.conformance.compare import assert_rows_close
from rlconform.conformance.harness import assert_padding_zero, pad_right, right_mask, unpad_right
from rlconform.conformance.registry import clause
from rlconform.oracle import reward as oracle

_PLACE_EXAMPLES = (
    # L_i = 0 next to a full-length row: verl writes the reward into column -1 (padding).
    {
        "samples": [
            {"uid": "s0", "mask": [], "reward": 1.0},
            {"uid": "s1", "mask": [1, 1, 1], "reward": 2.0},
        ],
        "pad_value": 0.0,
        "extra_pad": 0,
    },
    # Uneven lengths with extra right padding: column -1 is not L_i - 1.
    {
        "samples": [
            {"uid": "s0", "mask": [1, 1], "reward": 1.0},
            {"uid": "s1", "mask": [1, 1, 1, 1], "reward": -1.0},
        ],
        "pad_value": 0.0,
        "extra_pad": 2,
    },
    # Response ends in a tool observation (mask 0 tail).
    {
        "samples": [{"uid": "s0", "mask": [1, 1, 0, 0], "reward": 3.0}],
        "pad_value": 0.0,
        "extra_pad": 1,
    },
)


def _place_case() -> st.SearchStrategy[dict[str, Any]]:
    return cs.token_batch(fields=(), with_rewards=True)


@clause(
    "reward.place_last",
    title="Sequence reward on the last response token",
    statement="""A sequence reward goes on the last response token, index L_i-1 (not the last
    column of the padded tensor), or on the last action token when the profile says so; all
    other positions 0; row sums recover the scalar reward; L_i = 0 gives an all-zero row.""",
    ops=("place_reward_last",),
    strategy=_place_case(),
    examples=_PLACE_EXAMPLES,
)
def check_place_last(ctx: Any, case: dict[str, Any]) -> None:
    samples = case["samples"]
    lengths = cs.lengths_of(case)
    uids = cs.uids_of(case)
    width = cs.width_of_case(case)
    tail = ctx.profile.reward_nonaction_tail
    expected = [
        oracle.place_reward_last(s["reward"], s["mask"], nonaction_tail=tail, uid=s["uid"])[0]
        for s in samples
    ]
    scores = pad_right(
        [[s["reward"]] for s in samples], width=1, dtype=ctx.dtype, device=ctx.device
    )[:, 0]
    response_mask = right_mask(lengths, width, ctx.device)
    loss_mask = pad_right(
        [s["mask"] for s in samples], width=width, dtype=response_mask.dtype, device=ctx.device
    )
    placed = ctx.call("place_reward_last", scores, response_mask, loss_mask)
    assert_padding_zero("reward.place_last", "token_level_scores", placed, lengths, uids)
    assert_rows_close(
        "reward.place_last",
        "token_level_scores",
        expected,
        unpad_right(placed, lengths),
        uids=uids,
        tolerance=ctx.tolerance,
    )

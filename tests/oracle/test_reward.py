"""The reward oracle against hand-computed CONTRACT numbers."""

from __future__ import annotations

import math

import pytest

from rlconform.oracle import reward as oracle
from rlconform.oracle.errors import ContractError

NAN = float("nan")


def test_place_last_on_index_l_minus_1():
    assert oracle.place_reward_last(2.0, [1, 1, 1]) == ([0.0, 0.0, 2.0], False)
    assert oracle.place_reward_last(2.0, [1, 1, 0], nonaction_tail="last_action") == (
        [0.0, 2.0, 0.0],
        False,
    )
    assert oracle.place_reward_last(2.0, []) == ([], True)


def test_place_uniform_is_r_over_n_on_action_tokens():
    assert oracle.place_reward_uniform(2.0, [1, 1, 1, 1]) == [0.5, 0.5, 0.5, 0.5]
    # L_i = 4 with a tool observation at index 1: 3 / 3 on the three action tokens (sum r).
    assert oracle.place_reward_uniform(3.0, [1, 0, 1, 1]) == [1.0, 0.0, 1.0, 1.0]
    assert oracle.place_reward_uniform(2.0, []) == []
    assert oracle.place_reward_uniform(2.0, [0, 0]) == [0.0, 0.0]


def test_place_discounted():
    # g = 0.5, 3 action tokens: weights 1/4, 1/2, 1 over a total of 7/4 -> [1, 2, 4] for r = 7.
    assert oracle.place_reward_discounted(7.0, [1, 1, 1], 0.5) == pytest.approx(
        [1.0, 2.0, 4.0], rel=1e-15
    )
    # A hole is skipped: the same weights over the action tokens, 0 on the hole.
    assert oracle.place_reward_discounted(7.0, [1, 0, 1, 1], 0.5) == pytest.approx(
        [1.0, 0.0, 2.0, 4.0], rel=1e-15
    )
    # g = 0: everything on the last action token, even when a tool token follows it.
    assert oracle.place_reward_discounted(2.0, [1, 1, 1, 0], 0.0) == [0.0, 0.0, 2.0, 0.0]
    assert oracle.place_reward_discounted(2.0, [1, 1, 1, 1], 1.0) == [0.5, 0.5, 0.5, 0.5]
    assert math.fsum(oracle.place_reward_discounted(3.0, [1] * 5, 0.9)) == pytest.approx(
        3.0, rel=1e-15
    )
    assert oracle.place_reward_discounted(3.0, [], 0.9) == []
    assert oracle.place_reward_discounted(3.0, [0, 0], 0.9) == [0.0, 0.0]
    with pytest.raises(ContractError):
        oracle.place_reward_discounted(1.0, [1, 1], -1.0)


def test_normalize_batch_worked_example():
    # [1, 3, 2, 4]: mean 2.5, population std sqrt(1.25) = 1.1180339887...
    std = math.sqrt(1.25)
    assert std == pytest.approx(1.118034, abs=1e-6)
    values = oracle.normalize_rewards([1.0, 3.0, 2.0, 4.0], [True] * 4)
    assert values == pytest.approx([-1.342, 0.447, -0.447, 1.342], abs=5e-4)
    assert values == pytest.approx([d / (std + 1e-8) for d in (-1.5, 0.5, -0.5, 1.5)], rel=1e-14)


def test_normalize_batch_uses_kept_samples_only():
    values = oracle.normalize_rewards([1.0, 3.0, NAN, 2.0, 4.0], [True, True, False, True, True])
    assert values[2] is None
    assert [values[i] for i in (0, 1, 3, 4)] == pytest.approx(
        [-1.342, 0.447, -0.447, 1.342], abs=5e-4
    )


def test_normalize_batch_edge_cases():
    assert oracle.normalize_rewards([0.1, 0.1, 0.1, 7.5], [True, True, True, False]) == [
        0.0,
        0.0,
        0.0,
        None,
    ]
    assert oracle.normalize_rewards([2.5], [True]) == [0.0]
    assert oracle.normalize_rewards([], []) == []
    assert oracle.normalize_rewards([1.0], [False]) == [None]
    # Nearly equal rewards are not "equal": [1, 1.00001] -> +-1 up to eps / std.
    low, high = oracle.normalize_rewards([1.0, 1.00001], [True, True])
    assert low == pytest.approx(-1.0, abs=3e-3) and high == pytest.approx(1.0, abs=3e-3)
    # ddof 1 (a profile choice): std of [1, 3, 2, 4] is sqrt(5/3).
    ddof1 = oracle.normalize_rewards([1.0, 3.0, 2.0, 4.0], [True] * 4, ddof=1)
    assert ddof1[0] == pytest.approx(-1.5 / (math.sqrt(5 / 3) + 1e-8), rel=1e-14)
    with pytest.raises(ContractError, match="kept reward"):
        oracle.normalize_rewards([1.0, NAN], [True, True], uids=["a", "b"])


def test_td_target_worked_example():
    # r 0.2, V_boot 0.8, gamma 0.9: terminated 0.2, truncated 0.2 + 0.72 = 0.92.
    assert oracle.td_target(0.2, 0.8, False, 0.9) == 0.2
    assert oracle.td_target(0.2, 0.8, True, 0.9) == pytest.approx(0.92, rel=1e-15)
    assert oracle.td_target(1.0, float("nan"), False, 0.9) == 1.0
    with pytest.raises(ContractError, match="bootstrap nan"):
        oracle.td_target(1.0, float("nan"), True, 0.9, uid="s0")

"""The kl oracle against hand-computed numbers (CONTRACT kl.*, verl 0.9.1 [ran] values)."""

from __future__ import annotations

import math

import pytest

from rlconform.oracle import kl
from rlconform.oracle.errors import ContractError


def test_simple_estimators_and_gradients():
    assert kl.k1(-0.8, -1.0) == pytest.approx((0.2, 1.0))
    assert kl.kl_abs(-2.0, -0.5) == (1.5, -1.0)
    assert kl.kl_abs(-1.0, -1.0) == (0.0, 0.0)  # a tie: torch.abs has gradient 0 there
    assert kl.k2(-1.4, -1.0) == pytest.approx((0.08, -0.4))


def test_low_var_kl_matches_verl_worked_numbers():
    # verl [ran]: logp - ref = [0.2, -0.4, -29.9, 25.0] -> values [0.0187, 0.0918, 10, 10],
    # gradients [0.1813, -0.4918, 0, 0].
    values, grads = kl.kl_penalty(
        [-0.8, -1.4, -30.0, -5.0], [-1.0, -1.0, -0.1, -30.0], "low_var_kl"
    )
    assert values == pytest.approx([0.0187, 0.0918, 10.0, 10.0], abs=1e-4)
    assert grads == pytest.approx([0.1813, -0.4918, 0.0, 0.0], abs=1e-4)


def test_k3_clamps():
    # ref - logp = 99 (float32 exp overflows): both clamps active, value 10, gradient 0.
    assert kl.k3(-100.0, -1.0, ref_clamp=20.0, value_clamp=10.0) == (10.0, 0.0)
    # Input clamp alone: x = 30 -> 20, value e^20 - 21, and the clamp cuts the gradient.
    value, grad = kl.k3(-31.0, -1.0, ref_clamp=20.0, value_clamp=None)
    assert value == pytest.approx(485165195.40979 - 21.0)
    assert grad == 0.0
    # No clamps at all: x = 800 overflows float64 too; the value is inf, not an exception.
    value, grad = kl.k3(-800.5, -0.5, ref_clamp=None, value_clamp=None)
    assert value == math.inf and grad == -math.inf
    # Unclamped, x = 1: e - 2 and d/dlogp = -(e - 1).
    assert kl.k3(-2.0, -1.0, ref_clamp=20.0, value_clamp=10.0) == pytest.approx(
        (0.718281828, -1.718281828)
    )


def test_straight_through_keeps_value_takes_k2_gradient():
    # verl [ran]: k3+ has the k3 values and gradient logp - ref = [0.2, -0.4, -29.9, 25.0].
    values, grads = kl.kl_penalty([-0.8, -1.4, -30.0, -5.0], [-1.0, -1.0, -0.1, -30.0], "k3+")
    assert values == pytest.approx([0.0187, 0.0918, 10.0, 10.0], abs=1e-4)
    assert grads == pytest.approx([0.2, -0.4, -29.9, 25.0])
    assert kl.kl_penalty([-2.0], [-0.5], "abs+") == ([1.5], [-1.5])


def test_aliases_and_unknown_modes():
    assert kl.split_mode("kl") == ("k1", False)
    assert kl.split_mode("mse+") == ("k2", True)
    assert kl.split_mode("low_var_kl") == ("k3", False)
    for bad in ("full", "kl++", "xyz"):
        with pytest.raises(ContractError):
            kl.kl_penalty([0.0], [0.0], bad)
    with pytest.raises(ContractError):
        kl.kl_penalty([0.0, 1.0], [0.0], "k1")


def test_importance_weighted():
    # k1: d = 0.5, w = e^0.25 = 1.2840254; value w d, gradient w d + w.
    values, grads = kl.importance_weighted_kl([-1.0], [-1.5], [-1.25], "k1")
    assert values == pytest.approx([0.6420127])
    assert grads == pytest.approx([1.9260381])
    # k3 = e^-2 + 1 = 1.1353 < 10 and w = e^3 = 20.09: the clamp acts on the KL before the
    # weighting, so the product 22.8 stands; d/dlogp = w k3 + w (1 - e^-2).
    values, grads = kl.importance_weighted_kl([-1.0], [-3.0], [-4.0], "low_var_kl")
    w, k3 = math.exp(3.0), math.exp(-2.0) + 1.0
    assert values == pytest.approx([w * k3])
    assert grads == pytest.approx([w * k3 + w * (1.0 - math.exp(-2.0))])
    # k3 = e^12 - 13 > 10 is clamped to 10 (its gradient 0) and then weighted by w = e^1.
    values, grads = kl.importance_weighted_kl([-1.0], [11.0], [-2.0], "low_var_kl")
    assert values == pytest.approx([10.0 * math.e]) and grads == pytest.approx([10.0 * math.e])
    # logp - old = 29.5 -> clamped to 20: w = e^20 carries no gradient; k1 = -0.25.
    values, grads = kl.importance_weighted_kl([-0.5], [-0.25], [-30.0], "kl")
    assert values == pytest.approx([-0.25 * 485165195.40979])
    assert grads == pytest.approx([485165195.40979])
    with pytest.raises(ContractError):
        kl.importance_weighted_kl([0.0], [0.0], [0.0], "k3+")


def test_kl_in_reward_penalises_action_tokens_only():
    rewards = kl.kl_in_reward(
        [0.0, 0.5, 1.0], [-0.5, -3.0, -1.25], [-0.75, -0.5, -1.25], [1, 0, 1], beta=0.1, mode="kl"
    )
    assert rewards == pytest.approx([-0.025, 0.5, 1.0])


def test_kl_in_reward_metric_reductions():
    # k1 per action token: sample a [0.25, 0.0], sample b none, sample c [1.0].
    olds = [[-0.5, -1.0], [-2.0], [-1.0]]
    refs = [[-0.75, -1.0], [-0.5], [-2.0]]
    masks = [[1, 1], [0], [1]]
    assert kl.kl_in_reward_metric(olds, refs, masks, mode="k1") == pytest.approx(1.25 / 3)
    # verl: (0.125 + 0 + 1.0) / 3, the sample without action tokens counted as 0.
    assert kl.kl_in_reward_metric(olds, refs, masks, mode="k1", reduction="sample_mean") == (
        pytest.approx(0.375)
    )
    assert kl.kl_in_reward_metric([], [], [], mode="k1") == 0.0


def test_adaptive_controller_matches_verl_sequence():
    # verl [ran]: target 0.05, n_steps / horizon = 0.1: 0.1 -> 0.1 -> 0.102 -> 0.09996 -> 0.101959.
    value = 0.1
    expected = [0.1, 0.102, 0.09996, 0.1019592]
    for current_kl, want in zip([0.05, 0.5, 0.0, 0.06], expected, strict=True):
        value = kl.kl_controller_update(
            "adaptive", value, current_kl, 10, target_kl=0.05, horizon=100
        )
        assert value == pytest.approx(want)
    # Inside the clip: err = 1.1 / 1 - 1 = 0.1, n_steps / horizon = 2 -> x 1.2.
    assert kl.kl_controller_update("adaptive", 0.5, 1.1, 8, target_kl=1.0, horizon=4) == (
        pytest.approx(0.6)
    )
    assert kl.kl_controller_update("fixed", 0.3, 9.0, 100, target_kl=0.1, horizon=1) == 0.3
    with pytest.raises(ContractError):
        kl.kl_controller_update("adaptive", 0.1, 0.1, 1, target_kl=0.1, horizon=0)

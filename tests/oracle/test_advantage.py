"""The `adv` oracle against numbers worked out by hand (CONTRACT §2 adv, §4, reward.td_target)."""

from __future__ import annotations

import math

import pytest

from rlconform.oracle import advantage as oracle
from rlconform.oracle.errors import ContractError

ROOT3 = math.sqrt(3.0)


def one_token(*scores: float) -> tuple[list[list[float]], list[list[int]]]:
    """Each sample a single action token carrying its score."""
    return [[s] for s in scores], [[1] for _ in scores]


def firsts(rows: list[list[float]]) -> list[float]:
    return [row[0] for row in rows]


def test_grpo_group_of_three_and_singleton():
    # Group a: scores 1, 0, 1 -> mean 2/3, unbiased std sqrt(1/3); group c: singleton 3.
    rewards, masks = one_token(1.0, 0.0, 1.0, 3.0)
    advantages, returns = oracle.grpo(rewards, masks, ["a", "a", "a", "c"])
    std = math.sqrt(1.0 / 3.0)
    expected = [
        (1 / 3) / (std + 1e-6),
        (-2 / 3) / (std + 1e-6),
        (1 / 3) / (std + 1e-6),
        3.0 / 1.000001,
    ]
    assert firsts(advantages) == pytest.approx(expected, rel=1e-12)
    assert firsts(advantages)[:2] == pytest.approx([1 / ROOT3, -2 / ROOT3], rel=1e-5)
    assert returns == advantages


def test_grpo_dr_grpo_population_std_and_zero_singleton():
    rewards, masks = one_token(1.0, 0.0, 1.0, 3.0)
    plain, _ = oracle.grpo(rewards, masks, ["a", "a", "a", "c"], norm_by_std=False)
    assert firsts(plain) == pytest.approx([1 / 3, -2 / 3, 1 / 3, 3.0], rel=1e-12)
    # ddof 0: std = sqrt(2/9), so A = (1/3) / 0.4714 = 0.7071.
    population, _ = oracle.grpo(rewards, masks, ["a", "a", "a", "c"], std_ddof=0, singleton="zero")
    assert firsts(population) == pytest.approx([0.70710, -1.41421, 0.70710, 0.0], rel=1e-5)


def test_grpo_nearly_equal_scores_match_contract_section_4():
    # 1.0 vs 1.00001: std (ddof 1) = 7.07e-6, eps 1e-6 -> +-5e-6 / 8.07e-6 = +-0.6195.
    advantages, _ = oracle.grpo(*one_token(1.0, 1.00001), ["g", "g"])
    assert firsts(advantages) == pytest.approx([-0.61949, 0.61949], abs=1e-4)


def test_grpo_all_equal_scores_give_zero_and_hole_rewards_count():
    # scores: 0 + 0.25 (on the hole) + 0.25 = 0.5, and 0.25 + 0.25 = 0.5: all equal.
    rewards = [[0.0, 0.25, 0.25], [0.25, 0.25]]
    masks = [[1, 0, 1], [1, 1]]
    advantages, _ = oracle.grpo(rewards, masks, ["g", "g"])
    assert advantages == [[0.0, 0.0, 0.0], [0.0, 0.0]]


def test_score_sums_the_whole_response_holes_included():
    assert oracle.sample_score([1.0, 7.0, 2.0, 0.5], [1, 0, 1, 0]) == 10.5
    assert oracle.sample_score([], []) == 0.0


def test_credited_rewards_move_to_the_preceding_action_token():
    # a hole's reward goes to the action token before it; one before every action token
    # goes to the first action token; a sample without action tokens has no carrier.
    assert oracle.credited_rewards([1.0, 7.0, 2.0, 0.5], [1, 0, 1, 0]) == [8.0, 0.0, 2.5, 0.0]
    assert oracle.credited_rewards([3.0, 1.0, 0.0], [0, 1, 1]) == [0.0, 4.0, 0.0]
    assert oracle.credited_rewards([1.0, 2.0], [0, 0]) == [0.0, 0.0]


def test_rloo_leave_one_out():
    # 1 - mean(0, 1) = 0.5; 0 - mean(1, 1) = -1 = 3/2 (0 - 2/3).
    advantages, _ = oracle.rloo(*one_token(1.0, 0.0, 1.0, 4.0), ["a", "a", "a", "c"])
    assert firsts(advantages) == pytest.approx([0.5, -1.0, 0.5, 4.0])
    alone, _ = oracle.rloo(*one_token(4.0), ["c"], singleton="zero")
    assert alone == [[0.0]]


def test_gae_two_tokens_by_hand():
    # gamma = lam = 1, terminated: delta_1 = 1 - 0.25 = 0.75; delta_0 = 0.25 - 0.5 = -0.25;
    # A = [0.5, 0.75], returns = A + V = [1, 1]; whitened: mean 0.625, var 0.03125.
    advantages, returns = oracle.gae(
        [[0.0, 1.0]], [[0.5, 0.25]], [[1, 1]], [True], [0.0], gamma=1.0, lam=1.0
    )
    assert returns == [[1.0, 1.0]]
    assert advantages[0] == pytest.approx(
        [-0.125 / math.sqrt(0.03125 + 1e-8), 0.125 / math.sqrt(0.03125 + 1e-8)]
    )
    assert advantages[0] == pytest.approx([-1 / math.sqrt(2), 1 / math.sqrt(2)], rel=1e-6)


def test_gae_skips_a_tool_observation_and_credits_its_reward():
    # The hole's value 99 is skipped; its reward 2 counts on the action token before it:
    # r = [2, -, 1], V = [0.5, -, 0.25], gamma = lam = 1, terminated:
    # delta_2 = 1 - 0.25 = 0.75; delta_0 = 2 + 0.25 - 0.5 = 1.75; A = [2.5, -, 0.75];
    # returns = A + V = [3, 0, 1].
    _, returns = oracle.gae(
        [[0.0, 2.0, 1.0]], [[0.5, 99.0, 0.25]], [[1, 0, 1]], [True], [0.0], gamma=1.0, lam=1.0
    )
    assert returns == [[3.0, 0.0, 1.0]]


def test_gae_discount_at_holes_counts_every_position():
    # gamma 0.5, lam 1: with holes as steps, token 0 sees gamma^2 of the next action token.
    # delta_2 = 1 - 0.25 = 0.75; delta_0 = 0 + 0.25 * 0.25 - 0.5 = -0.4375;
    # A_0 = -0.4375 + 0.25 * 0.75 = -0.25; returns = [0.25, 0, 1].
    _, returns = oracle.gae(
        [[0.0, 0.0, 1.0]],
        [[0.5, 9.0, 0.25]],
        [[1, 0, 1]],
        [True],
        [0.0],
        gamma=0.5,
        lam=1.0,
        discount_at_holes=True,
    )
    assert returns == [[0.25, 0.0, 1.0]]


def test_gae_bootstraps_only_truncated_samples():
    # gamma 0.5, lam 1, bootstrap 2: delta_1 = 1 + 0.5*2 - 0.25 = 1.75; delta_0 = 0.125 - 0.5;
    # A_0 = -0.375 + 0.5 * 1.75 = 0.5 -> returns [1.0, 2.0]. Terminated: bootstrap ignored.
    rewards, values = [[0.0, 1.0], [0.0, 1.0]], [[0.5, 0.25], [0.5, 0.25]]
    _, returns = oracle.gae(
        rewards, values, [[1, 1], [1, 1]], [False, True], [2.0, 2.0], gamma=0.5, lam=1.0
    )
    assert returns[0] == pytest.approx([1.0, 2.0])
    # Terminated: delta_1 = 0.75, A_0 = -0.375 + 0.375 = 0 -> returns [0.5, 1.0].
    assert returns[1] == pytest.approx([0.5, 1.0])


def test_gae_td_target_worked_example():
    # reward.td_target: r 0.2, V 0.8, gamma 0.9: terminated 0.2, truncated 0.2 + 0.9 * 0.8 = 0.92.
    _, returns = oracle.gae(
        [[0.2], [0.2]], [[0.8], [0.8]], [[1], [1]], [True, False], [0.8, 0.8], gamma=0.9, lam=1.0
    )
    assert firsts(returns) == pytest.approx([0.2, 0.92])


def test_whitening_with_at_most_one_action_token():
    rows, masks = [[5.0, 3.0]], [[0, 1]]
    assert oracle.whiten(rows, masks, degenerate="zeros", clause="adv.gae") == [[0.0, 0.0]]
    assert oracle.whiten([], [], degenerate="zeros", clause="adv.gae") == []
    with pytest.raises(ContractError, match="at least 2 action tokens"):
        oracle.whiten(rows, masks, degenerate="raise", clause="adv.gae")


def test_reinforce_pp_carries_the_return_through_a_hole():
    # mask 1,0,1,1, gamma 0.5, reward 1 at the end and 0 on the hole: G = [0.25, -, 0.5, 1].
    advantages, returns = oracle.reinforce_pp([[0.0, 0.0, 0.0, 1.0]], [[1, 0, 1, 1]], gamma=0.5)
    assert returns == [[0.25, 0.0, 0.5, 1.0]]
    # Whitened over 3 tokens: mean 7/12, unbiased var 0.1458333.
    std = math.sqrt(0.1458333333333333 + 1e-8)
    expected = [(0.25 - 7 / 12) / std, 0.0, (0.5 - 7 / 12) / std, (1.0 - 7 / 12) / std]
    assert advantages[0] == pytest.approx(expected)
    assert advantages[0][0] == pytest.approx(-0.87287, abs=1e-5)


def test_reinforce_pp_baseline_centres_then_whitens():
    # Group scores 1, 0 -> centred +-0.5; whitened over 2 tokens: +-0.5 / sqrt(0.5).
    advantages, returns = oracle.reinforce_pp_baseline(*one_token(1.0, 0.0), ["g", "g"])
    assert firsts(advantages) == pytest.approx([0.70711, -0.70711], abs=1e-5)
    assert returns == advantages


def test_remax_suffix_sums_minus_greedy_reward():
    # the hole's 9 counts on token 0: credited [9.5, -, 0, 1] -> suffix sums [10.5, -, 1, 1].
    advantages, returns = oracle.remax([[0.5, 9.0, 0.0, 1.0]], [[1, 0, 1, 1]], [0.5])
    assert returns == [[10.5, 0.0, 1.0, 1.0]]
    assert advantages == [[10.0, 0.0, 0.5, 0.5]]


def test_opo_length_weighted_baseline():
    # L = 3, 4, 1 with scores 1, 0, 1: b = (3 + 0 + 1) / 8 = 0.5.
    rewards = [[0, 0, 1.0], [0, 0, 0, 0.0], [1.0]]
    masks = [[1, 1, 1], [1, 1, 1, 1], [1]]
    advantages, _ = oracle.opo(rewards, masks, ["a", "a", "a"])
    assert firsts(advantages) == [0.5, -0.5, 0.5]
    assert oracle.opo(*one_token(2.0), ["c"])[0] == [[2.0]]
    assert oracle.opo(*one_token(2.0), ["c"], singleton_baseline="self")[0] == [[0.0]]
    # A group without action tokens writes nothing (no 0/0).
    assert oracle.opo([[], [1.0]], [[], [0]], ["g", "g"])[0] == [[], [0.0]]


def test_grpo_passk_best_sample_only():
    rewards, masks = one_token(1.0, 0.0, 0.5)
    plain, _ = oracle.grpo_passk(rewards, masks, ["g"] * 3, norm_by_std=False)
    assert firsts(plain) == [0.5, 0.0, 0.0]
    # std (ddof 1) of 1, 0, 0.5 is 0.5: 0.5 / (0.5 + 1e-6).
    normed, _ = oracle.grpo_passk(rewards, masks, ["g"] * 3)
    assert firsts(normed) == pytest.approx([0.5 / 0.500001, 0.0, 0.0])
    tied, _ = oracle.grpo_passk(*one_token(1.0, 1.0, 0.0), ["g"] * 3)
    assert firsts(tied) == [0.0, 0.0, 0.0]
    with pytest.raises(ContractError, match="at least 2"):
        oracle.grpo_passk(*one_token(1.0, 0.0, 1.0), ["g", "g", "h"])


def test_gpg_alpha_rules():
    # Group a (1, 0) is informative, group c (0, 0) is not; B = 4.
    rewards, masks = one_token(1.0, 0.0, 0.0, 0.0)
    labels = ["a", "a", "c", "c"]
    informative, _ = oracle.gpg(rewards, masks, labels)  # alpha = 4 / 2
    assert firsts(informative) == [1.0, -1.0, 0.0, 0.0]
    verl_like, _ = oracle.gpg(rewards, masks, labels, alpha_rule="nonzero_score")  # alpha = 4 / 1
    assert firsts(verl_like) == [2.0, -2.0, 0.0, 0.0]
    halved, _ = oracle.gpg(rewards, masks, labels, alpha_rule="one", f_norm=2.0)
    assert firsts(halved) == [0.25, -0.25, 0.0, 0.0]


def test_optimal_token_baseline_by_hand():
    # pi = 0.5, sum pi^2 = 0.5 -> w = 1 - 1 + 0.5 = 0.5 for both; B = (1 * 0.5) / (1 + 1e-8).
    half = math.log(0.5)
    advantages, returns = oracle.optimal_token_baseline(
        [[1.0], [0.0]], [[1], [1]], ["g", "g"], [[half], [half]], [[0.5], [0.5]]
    )
    assert returns == [[1.0], [0.0]]
    assert firsts(advantages) == pytest.approx([0.5, -0.5], rel=1e-7)


def test_optimal_token_baseline_lone_position_and_singleton_get_no_baseline():
    half = math.log(0.5)
    advantages, returns = oracle.optimal_token_baseline(
        [[0.0, 1.0], [2.0], [3.0]],
        [[1, 1], [1], [1]],
        ["g", "g", "h"],
        [[half, half], [half], [half]],
        [[0.5, 0.5], [0.5], [0.5]],
    )
    # Column 1 of group g has only sample 0: B = 0 there; group h is a singleton.
    assert advantages[0][1] == 1.0
    assert advantages[2] == [3.0]
    # Column 0: G = 1 and 2, W = 0.5 and 0.5 -> B = 1.5.
    assert advantages[0][0] == pytest.approx(1.0 - 1.5)
    assert returns[0] == [1.0, 1.0]


def test_gdpo_normalises_each_component_then_whitens():
    # Component 1: 1, 0 -> +-0.5 / (sqrt(0.5) + 1e-6); component 2 all equal -> 0.
    # Sum +-0.70711 over two tokens: mean 0, var 1 -> unchanged by whitening.
    advantages, _ = oracle.gdpo([[1.0, 3.0], [0.0, 3.0]], [[1], [1]], ["g", "g"], [1.0, 1.0])
    assert firsts(advantages) == pytest.approx([0.70711, -0.70711], abs=1e-5)


def test_misaligned_rows_raise_naming_the_sample():
    with pytest.raises(ContractError, match="uid='s1'"):
        oracle.grpo([[1.0], [1.0, 2.0]], [[1], [1]], ["g", "g"], uids=["s0", "s1"])

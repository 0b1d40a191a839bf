"""The loss oracle against numbers worked out by hand (CONTRACT §2 loss, research notes)."""

from __future__ import annotations

import math

import pytest

from rlconform.adapters.base import Profile
from rlconform.conformance.clauses import loss as loss_clauses
from rlconform.oracle import loss as oracle
from rlconform.oracle.errors import ContractError

E = math.e
EPS = {"clip_low": 0.2, "clip_high": 0.2}


def _log_ratio_sample(log_ratios, adv, mask=None, old=-1.0):
    """(old, logp, adv, mask) with logp - old equal to the given log-ratios."""
    olds = [old] * len(log_ratios)
    return (
        olds,
        [old + x for x in log_ratios],
        adv,
        mask if mask is not None else [1] * len(log_ratios),
    )


def test_ppo_clip_tokens_by_hand():
    # r = e^0.5 = 1.6487, A = 1: max(-1.6487, -1.2) = -1.2, clipped, no gradient.
    # r = e^0.5, A = -1: max(1.6487, 1.2) = 1.6487, not clipped, gradient -A r = 1.6487.
    # A = 0: 0, not clipped (the two terms are equal), gradient 0.
    sample = _log_ratio_sample([0.5, 0.5, 0.5], [1.0, -1.0, 0.0])
    losses, clipped = oracle.ppo_clip_loss(*sample, **EPS)
    assert losses == pytest.approx([-1.2, math.exp(0.5), 0.0])
    assert clipped == [True, False, False]
    grads = oracle.ppo_clip_grad(*sample, [1.0, 1.0, 1.0], **EPS)
    assert grads == pytest.approx([0.0, math.exp(0.5), 0.0])


def test_ppo_clip_clamps_the_log_ratio_at_20():
    # logp - old = 99.5 with A = -1: ratio e^20 (not e^99.5), gradient 0 (clamp active).
    # logp - old = -99.5 with A = 1: ratio e^-20, unclipped, gradient 0.
    sample = ([-100.0, -0.5], [-0.5, -100.0], [-1.0, 1.0], [1, 1])
    losses, clipped = oracle.ppo_clip_loss(*sample, **EPS)
    assert losses == pytest.approx([math.exp(20.0), -math.exp(-20.0)])
    assert clipped == [False, False]
    assert oracle.ppo_clip_grad(*sample, [1.0, 1.0], **EPS) == [0.0, 0.0]


def test_ppo_clip_asymmetric_eps():
    # eps_low 0.1, eps_high 0.28: r = e^0.2 = 1.2214 < 1.28 unclipped for A = 1;
    # r = e^-0.2 = 0.8187 < 0.9 clipped for A = -1 (loss -A * 0.9 = 0.9).
    losses, clipped = oracle.ppo_clip_loss(
        *_log_ratio_sample([0.2, -0.2], [1.0, -1.0]), clip_low=0.1, clip_high=0.28
    )
    assert losses == pytest.approx([-math.exp(0.2), 0.9])
    assert clipped == [False, True]


def test_ppo_clip_verl_example_by_hand():
    """verl 0.9.1 vanilla on these inputs: 0.277857, pg_clipfrac 1/7 (research notes)."""
    # Per token (x = logp - old, A): (0.5, 1) -> -1.2 clipped; (-0.5, 1) -> -e^-0.5;
    # (0.05, -1) -> e^0.05; (1, -1) -> e; (-1, 1) -> -e^-1; (0.3, -1) -> e^0.3; (0, 1) -> -1.
    by_hand = (
        -1.2 - math.exp(-0.5) + math.exp(0.05) + E - math.exp(-1.0) + math.exp(0.3) - 1.0
    ) / 7
    samples = loss_clauses._VERL_SAMPLES
    rows = [oracle.ppo_clip_loss(s["old"], s["logp"], s["adv"], s["mask"], **EPS) for s in samples]
    masks = [s["mask"] for s in samples]
    assert oracle.action_token_mean([r[0] for r in rows], masks) == pytest.approx(by_hand, abs=1e-9)
    assert by_hand == pytest.approx(0.277857, abs=1e-5)
    assert oracle.clip_fraction([r[1] for r in rows], masks) == pytest.approx(1 / 7)


def test_dual_clip_worked_examples():
    # slime: ratios [4, 0.5], A [-1, 1], eps 0.2, c 3 -> [3.0, -0.5].
    sample = _log_ratio_sample([math.log(4.0), math.log(0.5)], [-1.0, 1.0])
    assert oracle.ppo_clip_loss(*sample, **EPS, dual_clip=3.0)[0] == pytest.approx([3.0, -0.5])
    # slime's test: ratios [2, 2, 0.5], A [2, -2, 2], eps 0.2, c 1.5 -> [-2.4, 3.0, -1.0].
    sample = _log_ratio_sample([math.log(2.0), math.log(2.0), math.log(0.5)], [2.0, -2.0, 2.0])
    losses, clipped = oracle.ppo_clip_loss(*sample, **EPS, dual_clip=1.5)
    assert losses == pytest.approx([-2.4, 3.0, -1.0])
    assert clipped == [True, False, False]
    # Dual bound active: no gradient; A = 2 at ratio 2 is clipped: no gradient; r = 0.5, A = 2
    # unclipped: gradient -A r = -1.
    assert oracle.ppo_clip_grad(*sample, [1.0] * 3, **EPS, dual_clip=1.5) == pytest.approx(
        [0.0, 0.0, -1.0]
    )


def test_dual_clip_never_touches_positive_advantages():
    # ratio e^5, A = 1: -1.2 (a dual clip would give -3); A = -1: capped at 3 (verl).
    sample = _log_ratio_sample([5.0, 5.0], [1.0, -1.0])
    assert oracle.ppo_clip_loss(*sample, **EPS, dual_clip=3.0)[0] == pytest.approx([-1.2, 3.0])


def test_gspo_by_hand():
    # Action log-ratios 0.5, -0.1, 0.2 (the hole's -2.5 is excluded): s = 0.2, rho = e^0.2.
    # A = 1: max(-1.2214, -1.2) = -1.2 clipped; A = -1: 1.2214; A = 0.5: max(-0.6107, -0.6) = -0.6.
    sample = _log_ratio_sample([0.5, -0.1, -2.5, 0.2], [1.0, -1.0, 2.0, 0.5], mask=[1, 1, 0, 1])
    rho = math.exp(0.2)
    losses, clipped = oracle.gspo_loss(*sample, **EPS)
    assert losses == pytest.approx([-1.2, rho, 0.0, -0.6])
    assert clipped == [True, False, False, True]
    # Per-token gradient with the sequence value: only the unclipped token moves, by -A rho.
    assert oracle.gspo_grad(*sample, [1.0] * 4, **EPS) == pytest.approx([0.0, rho, 0.0, 0.0])


def test_gspo_clamps_the_sequence_log_ratio_at_10():
    sample = _log_ratio_sample([25.0, 20.0], [-1.0, 1.0], old=-100.0)
    losses, clipped = oracle.gspo_loss(*sample, **EPS)
    assert losses == pytest.approx([math.exp(10.0), -1.2])
    assert oracle.gspo_grad(*sample, [1.0, 1.0], **EPS) == [0.0, 0.0]
    assert oracle.gspo_loss(*sample, **EPS, log_ratio_max=None)[0][0] == pytest.approx(
        math.exp(22.5)
    )


def test_gmpo_by_hand():
    # x = [0.5, -0.5], A = [1, 1], eps 0.2: y = [min(0.5, 0.2), min(-0.5, 0.2)] = [0.2, -0.5];
    # rho = exp(-0.15); A_bar = 1; loss -rho on both tokens; token 0 clipped.
    sample = _log_ratio_sample([0.5, -0.5], [1.0, 1.0])
    rho = math.exp(-0.15)
    losses, clipped = oracle.gmpo_loss(*sample, **EPS)
    assert losses == pytest.approx([-rho, -rho])
    assert clipped == [True, False]
    # d(l_0 + l_1)/d logp_s = 2 * (-rho) * slope_s / 2: slope 0 for the clipped token.
    assert oracle.gmpo_grad(*sample, [1.0, 1.0], **EPS) == pytest.approx([0.0, -rho])


def test_gmpo_sign_aware_clip_for_negative_advantages():
    # A < 0: y = max(x, -0.2): x = -0.5 -> -0.2 (clipped), x = 0.5 -> 0.5 (kept).
    # rho = exp(0.15), A_bar = -1: loss +rho.
    sample = _log_ratio_sample([-0.5, 0.5], [-1.0, -1.0])
    losses, clipped = oracle.gmpo_loss(*sample, **EPS)
    assert losses == pytest.approx([math.exp(0.15)] * 2)
    assert clipped == [True, False]


def test_gmpo_verl_example_row_mean():
    """verl geo_mean averages the sequence losses over all 3 rows: -0.102227."""
    samples = loss_clauses._VERL_SAMPLES
    per_row = [
        oracle.gmpo_loss(s["old"], s["logp"], s["adv"], s["mask"], **EPS)[0] for s in samples
    ]
    sequence_losses = [row[0] for row in per_row[:2]] + [0.0]
    # Row 0 by hand: y = [0.2, -0.5, max(0.05, -0.2)] -> rho = exp(-0.25 / 3); A_bar = 1/3.
    assert sequence_losses[0] == pytest.approx(-math.exp(-0.25 / 3) / 3)
    assert sum(sequence_losses) / 3 == pytest.approx(-0.102227, abs=1e-5)


def test_cispo_by_hand():
    # r = e^0.5 clipped to 1.2, A = 1, logp = -1 -> l = -1.2 * 1 * -1 = 1.2; gradient -1.2.
    # r = e^-1 with lower bound 0 (clip_low 1): kept, A = -1, logp = -3 -> l = -e^-1 * 3.
    sample = ([-1.5, -2.0], [-1.0, -3.0], [1.0, -1.0], [1, 1])
    losses, clipped = oracle.cispo_loss(*sample, clip_low=1.0, clip_high=0.2)
    assert losses == pytest.approx([1.2, -3.0 * math.exp(-1.0)])
    assert clipped == [True, False]
    assert oracle.cispo_grad(*sample, [1.0, 1.0], clip_low=1.0, clip_high=0.2) == pytest.approx(
        [-1.2, math.exp(-1.0)]
    )


def test_cispo_verl_example():
    """verl 0.9.1 cispo on the research-note inputs: 0.762869, pg_clipfrac 5/7."""
    samples = loss_clauses._VERL_SAMPLES
    rows = [oracle.cispo_loss(s["old"], s["logp"], s["adv"], s["mask"], **EPS) for s in samples]
    masks = [s["mask"] for s in samples]
    assert oracle.action_token_mean([r[0] for r in rows], masks) == pytest.approx(
        0.762869, abs=1e-5
    )
    assert oracle.clip_fraction([r[1] for r in rows], masks) == pytest.approx(5 / 7)


def test_dppo_tv_by_hand():
    # p = 0.5, p_old = 0.2: gap +0.3 > 0.2 -> masked for A = 1; kept for A = -1:
    # l = -(-1) * min(2.5, c) * log 0.5; gradient -A min(r, c).
    half, fifth = math.log(0.5), math.log(0.2)
    sample = ([fifth, fifth], [half, half], [1.0, -1.0], [1, 1])
    losses, clipped = oracle.dppo_tv_loss(*sample, **EPS, ratio_cap=20.0)
    assert losses == pytest.approx([0.0, 2.5 * half])
    assert clipped == [True, False]
    assert oracle.dppo_tv_loss(*sample, **EPS, ratio_cap=2.0)[0] == pytest.approx([0.0, 2.0 * half])
    assert oracle.dppo_tv_grad(*sample, [1.0, 1.0], **EPS, ratio_cap=20.0) == pytest.approx(
        [0.0, 2.5]
    )


def test_value_clip_by_hand():
    # v 1.0, v_old 0.5, c 0.2 -> v_clip 0.7; R 1.5: 0.5 * max(0.25, 0.64) = 0.32, clipped.
    # v 2.0, R 0.0: 0.5 * max(4, 0.49) = 2.0, unclipped, gradient 2 * 0.5 * (2 - 0) = 2.
    sample = ([1.0, 2.0], [1.5, 0.0], [0.5, 0.5], [1, 1])
    losses, clipped = oracle.value_clip_loss(*sample, clip=0.2)
    assert losses == pytest.approx([0.32, 2.0])
    assert clipped == [True, False]
    assert oracle.value_clip_grad(*sample, [1.0, 1.0], clip=0.2) == pytest.approx([0.0, 2.0])
    assert oracle.value_clip_loss(*sample, clip=0.2, scale=1.0)[0] == pytest.approx([0.64, 4.0])


def test_entropy_bonus_sign_and_total():
    # pg 0.5, H 1.0, KL 0.2, c_ent 0.01, c_kl 0.1 -> 0.5 - 0.01 + 0.02 = 0.51.
    assert oracle.actor_loss(
        [0.5], [1.0], [0.2], [1], entropy_coeff=0.01, kl_coef=0.1
    ) == pytest.approx([0.51])
    # verl ppo_loss (float32): pg 0.3242925703525543 + 0.5 * kl 0.09946729987859726 = 0.374026209.
    total = oracle.actor_loss(
        [0.3242925703525543], [1.0], [0.09946729987859726], [1], entropy_coeff=0.0, kl_coef=0.5
    )
    assert total == pytest.approx([0.37402620911598206], abs=1e-7)
    assert oracle.actor_loss_grad([1, 0], [0.5, 0.5], entropy_coeff=0.01, kl_coef=0.1) == (
        [0.5, 0.0],
        [-0.005, -0.0],
        [0.05, 0.0],
    )


def test_worked_mask_mean_counts_action_tokens_only():
    # CONTRACT mask.loss worked number: 4 x 2.0 and 5 x 4.0 over 9 action tokens = 28/9.
    rows = [[2.0] * 4 + [0.0] * 6, [4.0] * 5 + [0.0] * 5]
    masks = [[1] * 4 + [0] * 6, [1] * 5 + [0] * 5]
    assert oracle.action_token_mean(rows, masks) == pytest.approx(28 / 9)
    assert oracle.action_token_mean([[]], [[]]) == 0.0


def test_sapo_by_hand():
    # r = 1: gate (4 / tau) sigmoid(0) = 2 / tau, so l = -2 A / tau and the gradient is
    # -4 A sigmoid'(0) = -A (the plain policy gradient). A = 1 takes tau_pos 2: l = -1;
    # A = -1 takes tau_neg 0.5: l = 4; A = 0 takes tau_neg: l = 0.
    # r = 2 (log-ratio ln 2), A = 0.5, tau_pos 2: l = -0.5 * 2 * sigmoid(2); gradient
    # -4 * 0.5 * sigmoid(2) (1 - sigmoid(2)) * 2.
    sig2 = 1.0 / (1.0 + math.exp(-2.0))
    sample = (
        [-1.0, -1.0, -1.0, -2.0],
        [-1.0, -1.0, -1.0, -2.0 + math.log(2.0)],
        [1.0, -1.0, 0.0, 0.5],
        [1, 1, 1, 1],
    )
    losses, clipped = oracle.sapo_loss(*sample, tau_pos=2.0, tau_neg=0.5)
    assert losses == pytest.approx([-1.0, 4.0, 0.0, -sig2])
    assert clipped == [False] * 4
    grads = oracle.sapo_grad(*sample, [1.0] * 4, tau_pos=2.0, tau_neg=0.5)
    assert grads == pytest.approx([-1.0, 1.0, 0.0, -4.0 * sig2 * (1.0 - sig2)])


def test_sapo_beyond_the_clamp():
    # log-ratio 25 is clamped to 20: r = e^20 saturates the gate (l = -4 A / tau) and the
    # gradient is 0 beyond the clamp; log-ratio -25 gives r = e^-20, the gate sigmoid(-tau(1 - e^-20)).
    sample = ([-30.0, -1.0], [-5.0, -26.0], [-1.0, 1.0], [1, 1])
    losses, _ = oracle.sapo_loss(*sample, tau_pos=1.0, tau_neg=1.05)
    low = 1.0 / (1.0 + math.exp(1.0 - math.exp(-20.0)))
    assert losses == pytest.approx([4.0 / 1.05, -4.0 * low])
    assert oracle.sapo_grad(*sample, [1.0, 1.0], tau_pos=1.0, tau_neg=1.05) == [0.0, 0.0]


def test_sapo_verl_example():
    """verl 0.9.1 compute_policy_loss_sapo (tau 1.0 / 1.05, always seq-mean-token-mean: the
    mean over the two non-empty rows of each row's token mean) on the research-note inputs,
    run 2026-12-07: -0.113687."""
    samples = loss_clauses._VERL_SAMPLES
    rows = [
        oracle.sapo_loss(s["old"], s["logp"], s["adv"], s["mask"], tau_pos=1.0, tau_neg=1.05)[0]
        for s in samples
    ]
    row_means = [
        sum(r) / sum(s["mask"]) for r, s in zip(rows, samples, strict=True) if sum(s["mask"])
    ]
    assert sum(row_means) / len(row_means) == pytest.approx(-0.113687, abs=1e-6)


def test_misaligned_input_names_the_sample():
    with pytest.raises(ContractError, match="uid='s7'"):
        oracle.ppo_clip_loss([0.0, 0.0], [0.0], [1.0, 1.0], [1, 1], **EPS, uid="s7")


def test_pinned_examples_stay_clear_of_branch_points():
    """Float32 rounding must not be able to flip a branch on any pinned example."""
    default = Profile()
    pinned = {
        "ppo_clip": loss_clauses._PPO_EXAMPLES,
        "dual_clip": loss_clauses._DUAL_EXAMPLES,
        "gspo": loss_clauses._GSPO_EXAMPLES,
        "gmpo": loss_clauses._GMPO_EXAMPLES,
        "cispo": loss_clauses._CISPO_EXAMPLES,
        "dppo_tv": loss_clauses._DPPO_EXAMPLES,
        "sapo": loss_clauses._SAPO_EXAMPLES,
    }
    for mode, examples in pinned.items():
        assert mode in loss_clauses._SPECS
        for case in examples:
            for sample in case["samples"]:
                assert loss_clauses.clear_of_branch_points(mode, sample, case, default), (
                    mode,
                    sample,
                )
    for case in loss_clauses._VALUE_EXAMPLES:
        for sample in case["samples"]:
            assert loss_clauses.clear_of_value_branch_points(sample, case["clip"]), sample

"""The logprob / entropy oracle against hand-computed CONTRACT numbers."""

from __future__ import annotations

import math

import pytest

from rlconform.oracle import logprob as oracle
from rlconform.oracle.errors import ContractError

LN = math.log
NAN = float("nan")


def test_response_token_j_uses_row_p_plus_j_minus_1():
    # Prompt [0] (P = 1), response [1, 0]. Row 0 = [0, ln 3] -> p(1) = 3/4; row 1 = [ln 2, 0]
    # -> p(0) = 2/3; row 2 (after the last token) is never read, so NaN there is harmless.
    logits = [[0.0, LN(3)], [LN(2), 0.0], [NAN, NAN]]
    values = oracle.response_logprobs(logits, [0, 1, 0], 1)
    assert values == pytest.approx([LN(3 / 4), LN(2 / 3)], rel=1e-12)


def test_response_logprobs_divide_by_temperature():
    # p = [0.8, 0.2] at temperature 2 -> [2/3, 1/3].
    values = oracle.response_logprobs([[LN(0.8), LN(0.2)], [0.0, 0.0]], [0, 1], 1, temperature=2.0)
    assert values == pytest.approx([LN(1 / 3)], rel=1e-12)


def test_response_logprobs_reject_bad_input():
    with pytest.raises(ContractError, match="prompt length 0"):
        oracle.response_logprobs([[0.0, 0.0]], [1], 0, uid="u")
    with pytest.raises(ContractError, match="logits rows"):
        oracle.response_logprobs([[0.0, 0.0]], [1, 0], 1, uid="u")


def test_sampling_distribution_worked_example():
    # CONTRACT: p = [0.8, 0.2], temperature 2 -> [2/3, 1/3]; new policy 0.25 on token 1.
    row = [LN(0.8), LN(0.2)]
    behaviour = math.exp(oracle.sampling_logprob(row, 1, temperature=2.0))
    assert behaviour == pytest.approx(1 / 3, rel=1e-12)
    assert math.exp(oracle.sampling_logprob(row, 0, temperature=2.0)) == pytest.approx(
        2 / 3, rel=1e-12
    )
    assert 0.25 / behaviour == pytest.approx(0.75, rel=1e-12)
    assert 0.25 / 0.2 == pytest.approx(1.25)  # the raw probability: the wrong direction


def test_top_k_renormalises_over_the_k_largest():
    # [2, 1, 0, -1], k = 2 -> support {0, 1}; log p(1) = 1 - ln(e^2 + e) = -ln(1 + e).
    row = [2.0, 1.0, 0.0, -1.0]
    assert oracle.sampling_support(row, top_k=2) == [0, 1]
    assert oracle.sampling_logprob(row, 1, top_k=2) == pytest.approx(-LN(1 + math.e), rel=1e-12)
    assert oracle.sampling_support(row, top_k=-1) == [0, 1, 2, 3]
    assert oracle.sampling_support(row, top_k=0) == [0, 1, 2, 3]


def test_top_k_ties_follow_the_profile():
    row = [2.0, 1.0, 1.0, 0.0]
    assert oracle.sampling_support(row, top_k=2, top_k_ties="keep") == [0, 1, 2]
    assert oracle.sampling_support(row, top_k=2, top_k_ties="exact") == [0, 1]
    # Token 0 under "keep": 2 - ln(e^2 + 2e); under "exact": 2 - ln(e^2 + e).
    keep = oracle.sampling_logprob(row, 0, top_k=2, top_k_ties="keep")
    exact = oracle.sampling_logprob(row, 0, top_k=2, top_k_ties="exact")
    assert keep == pytest.approx(2 - LN(math.e**2 + 2 * math.e), rel=1e-12)
    assert exact == pytest.approx(2 - LN(math.e**2 + math.e), rel=1e-12)


def test_top_p_keeps_the_token_that_crosses_the_threshold():
    # p = [0.5, 0.3, 0.2]: a token stays while the mass before it is < top_p.
    row = [LN(0.5), LN(0.3), LN(0.2)]
    assert oracle.sampling_support(row, top_p=0.5 - 1e-9) == [0]
    assert oracle.sampling_support(row, top_p=0.5 + 1e-9) == [0, 1]
    assert oracle.sampling_support(row, top_p=0.8 + 1e-9) == [0, 1, 2]
    assert oracle.sampling_support(row, top_p=1.0) == [0, 1, 2]
    # log p(1) on the nucleus {0, 1}: 0.3 / 0.8.
    assert oracle.sampling_logprob(row, 1, top_p=0.6) == pytest.approx(LN(0.3 / 0.8), rel=1e-12)


def test_top_p_applies_to_the_top_k_renormalised_distribution():
    # p = [0.4, 0.3, 0.2, 0.1], k = 2 -> [4/7, 3/7]; top_p 0.5: the mass before token 1 is
    # 4/7 >= 0.5, so only token 0 stays (on the raw p it would be 0.4 < 0.5: both stay).
    row = [LN(0.4), LN(0.3), LN(0.2), LN(0.1)]
    assert oracle.sampling_support(row, top_k=2, top_p=0.5) == [0]
    assert oracle.sampling_support(row, top_p=0.5) == [0, 1]


def test_a_token_outside_the_support_is_a_contract_error():
    with pytest.raises(ContractError, match="outside the sampling support"):
        oracle.sampling_logprob([2.0, 1.0, 0.0], 2, top_k=2, uid="s0")
    with pytest.raises(ContractError, match="outside the kept set"):
        oracle.support_logprob([2.0, 1.0, 0.0], 2, [0, 1], uid="s0")


def test_keep_sampling_mask_renormalises_over_the_kept_set():
    row = [1.0, 2.0, 3.0]
    assert oracle.support_logprob(row, 1, [1]) == 0.0
    # {0, 1}: 2 - ln(e + e^2) = -ln(1 + e^-1).
    assert oracle.support_logprob(row, 1, [0, 1]) == pytest.approx(-LN(1 + math.exp(-1)), rel=1e-12)
    # Temperature first: [2, 1, 0] / 2 = [1, 0.5, 0] over {0, 1} -> p(0) = 1 / (1 + e^-0.5).
    value = oracle.support_logprob([2.0, 1.0, 0.0], 0, [0, 1], temperature=2.0)
    assert value == pytest.approx(-LN(1 + math.exp(-0.5)), rel=1e-12)


def test_entropy_from_logits():
    assert oracle.entropy([0.0, 0.0, 0.0, 0.0]) == pytest.approx(LN(4), rel=1e-12)
    # p = [1/4, 3/4]: H = ln 4 - (3/4) ln 3.
    assert oracle.entropy([0.0, LN(3)]) == pytest.approx(LN(4) - 0.75 * LN(3), rel=1e-12)
    # Shift invariance with huge logits (a naive exp would overflow).
    assert oracle.entropy([1000.0, 1000.0]) == pytest.approx(LN(2), rel=1e-12)
    assert oracle.entropy([7.0]) == 0.0


def test_entropy_mean_counts_valid_positions_only():
    logits = [[[0.0, 0.0], [NAN, NAN]], [[0.0, LN(3)]]]
    masks = [[1, 0], [1]]
    expected = (LN(2) + LN(4) - 0.75 * LN(3)) / 2
    assert oracle.entropy_mean(logits, masks) == pytest.approx(expected, rel=1e-12)
    assert oracle.entropy_mean([[[0.0, 1.0]]], [[0]]) == 0.0
    with pytest.raises(ContractError, match="disagree in length"):
        oracle.entropy_mean([[[0.0, 1.0]]], [[1, 1]], uids=["s0"])

"""The metrics oracle against hand-computed values (CONTRACT metrics.* worked numbers)."""

from __future__ import annotations

import math

import pytest

from rlconform.oracle import metrics as oracle


def test_response_length_all_vs_non_aborted():
    # verl's example: T = 4, lengths 3, 4, 1, 2, 0 (aborted), 3.
    found = oracle.response_length_metrics([3, 4, 1, 2, 0, 3], 4)
    assert found["response_length/mean"] == pytest.approx(13 / 6)
    assert found["response_length_non_aborted/mean"] == pytest.approx(13 / 5)
    assert found["response_length/clip_ratio"] == pytest.approx(1 / 6)
    assert found["response_length_non_aborted/clip_ratio"] == pytest.approx(1 / 5)
    assert found["response_length/min"] == 0.0
    assert found["response_length_non_aborted/min"] == 1.0
    assert found["response/aborted_ratio"] == pytest.approx(1 / 6)


def test_response_length_all_aborted():
    found = oracle.response_length_metrics([0, 0], 3)
    assert found["response_length/mean"] == 0.0
    assert found["response_length_non_aborted/mean"] is None


def test_mean_and_population_std():
    values = [1.0, 0.0, 1.0, 1.0, 0.0]
    assert oracle.mean_at_n(values) == pytest.approx(0.6)
    # ddof 0: sqrt((3 * 0.16 + 2 * 0.36) / 5) = sqrt(0.24); ddof 1 would be sqrt(0.3).
    assert oracle.std_at_n(values) == pytest.approx(math.sqrt(0.24))
    with pytest.raises(ValueError):
        oracle.std_at_n([1.0])


def test_best_and_worst_expectations():
    values = [1.0, 0.0, 1.0, 1.0, 0.0]
    # max of 2 draws is 0 only if both draws are 0: 1 - 0.4^2 = 0.84; std sqrt(0.84 * 0.16).
    mean, std = oracle.best_at_n(values, 2)
    assert mean == pytest.approx(0.84)
    assert std == pytest.approx(math.sqrt(0.84 * 0.16))
    # min of 2 draws is 1 only if both draws are 1: 0.6^2 = 0.36.
    assert oracle.worst_at_n(values, 2)[0] == pytest.approx(0.36)
    # [1, 2, 3], n = 2: max is 1 w.p. 1/9, 2 w.p. 3/9, 3 w.p. 5/9 -> 22/9.
    assert oracle.best_at_n([3.0, 1.0, 2.0], 2)[0] == pytest.approx(22 / 9)
    # min is 1 w.p. 5/9, 2 w.p. 3/9, 3 w.p. 1/9 -> 14/9.
    assert oracle.worst_at_n([3.0, 1.0, 2.0], 2)[0] == pytest.approx(14 / 9)
    assert oracle.best_at_n([0.5], 1) == (0.5, 0.0)


def test_majority_ties_first_seen():
    # A and B once each: A is seen first; its first value is reported.
    assert oracle.majority_value(["A", "B"], [1.0, 0.0]) == 1.0
    assert oracle.majority_value(["B", "A"], [0.0, 1.0]) == 0.0
    # B twice wins; its first occurrence has value 0.25.
    assert oracle.majority_value(["A", "B", "B"], [1.0, 0.25, 0.75]) == 0.25


def test_maj_expectation_over_draws():
    # Draws of 2 from A=1, B=0: AA -> 1, AB -> 1, BA -> 0, BB -> 0: mean 1/2, std 1/2.
    assert oracle.maj_at_n(["A", "B"], [1.0, 0.0], 2) == pytest.approx((0.5, 0.5))
    # A=1, A=1, B=0, n = 1: the single draw is the value: 2/3.
    assert oracle.maj_at_n(["A", "A", "B"], [1.0, 1.0, 0.0], 1)[0] == pytest.approx(2 / 3)


def test_reduce_by_key_substring():
    assert oracle.reduce_metric("response_length/max", [3.0, 7.0, 5.0]) == 7.0
    assert oracle.reduce_metric("response_length/min", [3.0, 1.0, 5.0]) == 1.0
    assert oracle.reduce_metric("actor/pg_loss", [1.0, 2.0, 6.0]) == 3.0
    assert oracle.reduce_metric("perf/max_min_ratio", [1.0, 4.0]) == 4.0  # max is tested first
    assert (
        oracle.reduce_metric("env/terminated_ratio", [0.5, 0.25]) == 0.25
    )  # "terminated" has "min"


def test_token_accounting_worked_example():
    # 64 prompts x 8 samples x 2048 tokens; keep every fourth prompt's group (16 groups).
    lengths = [2048] * (64 * 8)
    keep = [(i // 8) % 4 == 0 for i in range(64 * 8)]
    assert oracle.token_accounting(lengths, keep) == {
        "generated": 1_048_576,
        "kept": 262_144,
        "discarded": 786_432,
    }
    assert oracle.token_accounting([], []) == {"generated": 0, "kept": 0, "discarded": 0}
    assert oracle.token_accounting([3, 5], [False, False]) == {
        "generated": 8,
        "kept": 0,
        "discarded": 8,
    }

"""The agg oracle against numbers worked out by hand."""

from __future__ import annotations

import math

import pytest

from rlconform.oracle import aggregate as agg
from rlconform.oracle.errors import ContractError

NAN = float("nan")

# Three samples: s0 ends in a non-action token, s1 is short, s2 is fully masked.
# Action tokens: s0 -> 1, 2, 3 (sum 6, n 3); s1 -> 5, 6 (sum 11, n 2); s2 -> none.
LOSSES = [[1.0, 2.0, 3.0, 4.0], [5.0, 6.0], [7.0, 7.0, 7.0, 7.0]]
MASKS = [[1, 1, 1, 0], [1, 1], [0, 0, 0, 0]]


def test_counts_exclude_fully_masked_rows():
    assert agg.action_token_count(MASKS) == 5
    assert agg.sequence_count(MASKS) == 2


def test_single_call_values():
    assert agg.token_mean(LOSSES, MASKS) == pytest.approx(17 / 5)  # 3.4
    assert agg.token_sum(LOSSES, MASKS) == pytest.approx(17.0)
    assert agg.seq_mean_token_sum(LOSSES, MASKS) == pytest.approx((6 + 11) / 2)  # 8.5
    assert agg.seq_mean_token_mean(LOSSES, MASKS) == pytest.approx((6 / 3 + 11 / 2) / 2)  # 3.75
    assert agg.seq_mean_token_sum_norm(LOSSES, MASKS, norm_length=4) == pytest.approx(17 / (2 * 4))


def test_global_denominators_and_dp_size():
    # dp_size 2, 10 action tokens and 4 sequences in the whole mini-batch, C = 2.
    assert agg.token_mean(LOSSES, MASKS, dp_size=2, num_tokens=10) == pytest.approx(2 * 17 / 10)
    assert agg.token_sum(LOSSES, MASKS, dp_size=2) == pytest.approx(34.0)
    assert agg.seq_mean_token_sum(LOSSES, MASKS, dp_size=2, num_sequences=4) == pytest.approx(
        2 * 17 / 4
    )
    assert agg.seq_mean_token_mean(LOSSES, MASKS, dp_size=2, num_sequences=4) == pytest.approx(
        2 * 7.5 / 4
    )
    value = agg.seq_mean_token_sum_norm(LOSSES, MASKS, norm_length=2, dp_size=2, num_sequences=4)
    assert value == pytest.approx(2 * 17 / (4 * 2))  # 4.25


def test_contract_mask_loss_worked_example():
    # CONTRACT mask.loss: 20 positions, 9 action tokens, 2.0 (x4) and 4.0 (x5) -> 28/9, not /20.
    losses = [[2.0] * 10, [4.0] * 10]
    masks = [[1, 0, 1, 0, 1, 0, 1, 0, 0, 0], [0, 1, 1, 1, 1, 1, 0, 0, 0, 0]]
    assert agg.token_mean(losses, masks) == pytest.approx(28 / 9)


def test_garbage_at_masked_positions_is_never_read():
    losses = [[1.0, 2.0, 3.0, NAN], [5.0, 6.0], [NAN, -math.inf, math.inf, NAN]]
    for mode in agg.MODES:
        clean = agg.aggregate(LOSSES, MASKS, mode, norm_length=4)
        assert agg.aggregate(losses, MASKS, mode, norm_length=4) == pytest.approx(clean)


def test_no_action_token_gives_zero_not_nan():
    for mode in agg.MODES:
        assert agg.aggregate([[NAN, 1.0], []], [[0, 0], []], mode, norm_length=3) == 0.0
        assert (
            agg.aggregate([], [], mode, dp_size=2, num_tokens=0, num_sequences=0, norm_length=3)
            == 0.0
        )
        assert agg.aggregate_gradient([[0, 0], []], mode, norm_length=3) == [[0.0, 0.0], []]


def test_gradient_is_the_weight_of_each_token():
    assert agg.aggregate_gradient(MASKS, "token-mean") == [
        [0.2, 0.2, 0.2, 0.0],
        [0.2, 0.2],
        [0.0] * 4,
    ]
    assert agg.aggregate_gradient(MASKS, "token-sum", dp_size=3) == [
        [3.0, 3.0, 3.0, 0.0],
        [3.0, 3.0],
        [0.0] * 4,
    ]
    assert agg.aggregate_gradient(MASKS, "seq-mean-token-sum") == [
        [0.5, 0.5, 0.5, 0.0],
        [0.5, 0.5],
        [0.0] * 4,
    ]
    # Row means: weight 1 / (n_i * S) = 1/6 for s0, 1/4 for s1.
    weights = agg.aggregate_gradient(MASKS, "seq-mean-token-mean")
    assert weights[0] == pytest.approx([1 / 6, 1 / 6, 1 / 6, 0.0])
    assert weights[1] == pytest.approx([1 / 4, 1 / 4])
    norm = agg.aggregate_gradient(
        MASKS, "seq-mean-token-sum-norm", dp_size=2, num_sequences=4, norm_length=2
    )
    assert norm[0] == pytest.approx([0.25, 0.25, 0.25, 0.0])  # 2 / (4 * 2)


@pytest.mark.parametrize("mode", agg.MODES)
def test_micro_batches_with_global_denominators_sum_to_the_full_batch(mode):
    # Micro-batch A = [s0], B = [s1, s2]: global 5 tokens, 2 sequences; C = 4.
    full = agg.aggregate(LOSSES, MASKS, mode, norm_length=4)
    parts = [
        agg.aggregate(LOSSES[:1], MASKS[:1], mode, num_tokens=5, num_sequences=2, norm_length=4),
        agg.aggregate(LOSSES[1:], MASKS[1:], mode, num_tokens=5, num_sequences=2, norm_length=4),
    ]
    assert math.fsum(parts) == pytest.approx(full)


def test_counting_the_empty_row_changes_the_seq_mean():
    # global_batch_size = 3 rows (empty row counted) vs the local default 2: 17/3 != 17/2.
    assert agg.seq_mean_token_sum(LOSSES, MASKS, num_sequences=3) == pytest.approx(17 / 3)
    assert agg.seq_mean_token_sum(LOSSES, MASKS) == pytest.approx(17 / 2)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: agg.token_mean([[1.0]], [[2]]), "must be 0 or 1"),
        (lambda: agg.token_sum([[1.0, 2.0]], [[1]]), "disagree in length"),
        (lambda: agg.token_mean(LOSSES, MASKS, num_tokens=4), "smaller than this shard"),
        (
            lambda: agg.seq_mean_token_sum(LOSSES, MASKS, dp_size=2),
            "needs the global num_sequences",
        ),
        (lambda: agg.token_sum(LOSSES, MASKS, dp_size=0), "dp_size"),
        (lambda: agg.seq_mean_token_sum_norm(LOSSES, MASKS, norm_length=0), "norm_length"),
        (lambda: agg.aggregate(LOSSES, MASKS, "seq-mean"), "unknown aggregation mode"),
    ],
)
def test_bad_input_raises_a_contract_error(call, message):
    with pytest.raises(ContractError, match=message):
        call()

"""The mask oracle against hand-computed CONTRACT numbers."""

from __future__ import annotations

import math

import pytest

from rlconform.oracle import mask
from rlconform.oracle.errors import ContractError

NAN = float("nan")


def test_masked_mean_worked_number_is_28_over_9():
    # CONTRACT mask.loss: 2 x 10 = 20 positions; 4 action tokens of 2.0 and 5 of 4.0.
    values = [
        [2.0, 2.0, NAN, 2.0, 2.0, NAN, NAN, NAN, NAN, NAN],
        [4.0, 4.0, 4.0, 4.0, 4.0, NAN, NAN, NAN, NAN, NAN],
    ]
    valid = [
        [1, 1, 0, 1, 1, 0, 0, 0, 0, 0],
        [1, 1, 1, 1, 1, 0, 0, 0, 0, 0],
    ]
    assert sum(map(sum, valid)) == 9
    assert mask.masked_mean(values, valid) == 28 / 9
    assert mask.masked_mean(values, valid) != 28 / 20


def test_valid_mask_intersects_response_loss_and_keep():
    # 6 response tokens with a 2-token tool observation -> 4 valid; a dropped sample -> 0.
    assert mask.valid_token_mask([1] * 6, [1, 1, 0, 0, 1, 1], 1) == [1, 1, 0, 0, 1, 1]
    assert mask.valid_token_mask([1] * 3, [1, 1, 1], 0) == [0, 0, 0]
    assert mask.valid_token_mask([1, 1, 0], [1, 1, 1], 1) == [1, 1, 0]
    with pytest.raises(ContractError, match="mask.loss"):
        mask.valid_token_mask([1, 1], [1], 1, uid="s0")


def test_masked_mean_of_no_valid_token_is_the_empty_value():
    assert mask.masked_mean([[NAN, 1.0]], [[0, 0]]) == 0.0
    assert math.isnan(mask.masked_mean([], [], empty=NAN))


def test_eos_mask_includes_the_first_eos_only():
    # verl get_response_mask facts (research notes): EOS included, later tokens 0.
    assert mask.response_mask_from_eos([20, 10, 34, 1, 0, 0, 0], 1) == [1, 1, 1, 1, 0, 0, 0]
    assert mask.response_mask_from_eos([78, 0, 76, 2, 1, 0, 0], [1, 2]) == [1, 1, 1, 1, 0, 0, 0]
    assert mask.response_mask_from_eos([1, 5, 5], 1) == [1, 0, 0]
    assert mask.response_mask_from_eos([5, 5, 5], 1) == [1, 1, 1]
    assert mask.response_mask_from_eos([], 1) == []


def test_attention_mask_last_columns():
    # P = 3, R = 3: prompt [0, 1, 1] (left-padded), response [1, 1, 0] (right-padded).
    assert mask.response_mask_from_attention([0, 1, 1, 1, 1, 0], 3) == [1, 1, 0]
    assert mask.response_mask_from_attention([0, 0, 0, 0, 0, 0], 3) == [0, 0, 0]
    assert mask.response_mask_from_attention([0, 1, 1], 0) == []


@pytest.mark.parametrize(
    "row, width, problem",
    [
        ([1, 1, 0, 1, 1], 2, "not left-padded"),  # right-padded prompt
        ([1, 1, 0, 1, 1], 3, "not right-padded"),  # left-padded response
        ([0, 1, 1, 0, 1, 0], 4, "not right-padded"),  # hole in the response
        ([0, 1, 0, 1, 1], 1, "not left-padded"),  # hole in the prompt
        ([0, 1, 2, 1], 2, "not 0 or 1"),
    ],
)
def test_attention_mask_violations_are_errors(row, width, problem):
    with pytest.raises(ContractError, match=problem):
        mask.response_mask_from_attention(row, width, uid="s0")


def test_multi_turn_mask_by_role():
    messages = [
        {"role": "system", "header": [9, 1], "content": [5]},  # 3 tokens: 0 0 0
        {"role": "user", "header": [9, 2], "content": [6, 7]},  # 4 tokens: 0 0 0 0
        {"role": "assistant", "header": [9, 3], "content": [8, 8, 0]},  # 0 0 1 1 1
        {"role": "tool", "header": [9, 4], "content": [7]},  # 0 0 0
        {"role": "assistant", "header": [9, 3], "content": [8], "step_loss_mask": 0},  # 0 0 0
        {"role": "assistant", "header": [9, 3], "think": [50, 51], "content": [8]},  # 0 0 1 1 1
    ]
    expected = [0, 0, 0] + [0, 0, 0, 0] + [0, 0, 1, 1, 1] + [0, 0, 0] + [0, 0, 0] + [0, 0, 1, 1, 1]
    assert mask.multi_turn_loss_mask(messages) == expected
    think_masked = expected[:-3] + [0, 0, 1]
    assert mask.multi_turn_loss_mask(messages, mask_think_block=True) == think_masked


def test_multi_turn_rejects_unknown_roles():
    with pytest.raises(ContractError, match="unknown role"):
        mask.multi_turn_loss_mask([{"role": "critic", "header": [], "content": [1]}], uid="c0")

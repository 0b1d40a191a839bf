"""canonical <-> ROLL (B, L - 1) layout: round trips for every per-token field."""

from __future__ import annotations

import itertools

import pytest
import torch

from rlconform.adapters.roll.layout import RollLayout, default_prompt_lengths, response_lengths

CASES = [
    # (response lengths, response width R, prompt lengths or None, extra width)
    ([3, 1, 0], 4, None, 0),
    ([0, 0], 2, [1, 4], 3),
    ([2, 5, 5, 1], 5, [3, 1, 2, 6], 0),
    ([0], 0, [2], 1),
    ([], 3, [], 0),
    ([4, 2], 6, [1, 1], 10),
]


def _layout(lengths, width_r, prompts, extra):
    lengths = torch.tensor(lengths, dtype=torch.int64)
    prompt = None if prompts is None else torch.tensor(prompts, dtype=torch.int64)
    base = RollLayout.build(lengths, width_r, prompt)
    return RollLayout.build(lengths, width_r, base.prompt_lengths, base.width + extra)


def _right_mask(lengths, width):
    j = torch.arange(width)
    return (j < torch.tensor(lengths, dtype=torch.int64).unsqueeze(-1)).to(torch.int64)


@pytest.mark.parametrize("lengths,width_r,prompts,extra", CASES)
def test_per_token_fields_round_trip(lengths, width_r, prompts, extra):
    layout = _layout(lengths, width_r, prompts, extra)
    b = len(lengths)
    assert layout.width - 1 >= 0
    for dtype, shape in itertools.product(
        (torch.float32, torch.float64, torch.int64), ((b, width_r), (b, width_r, 3))
    ):
        x = (torch.arange(b * width_r * (shape[2] if len(shape) == 3 else 1)) + 1).reshape(shape)
        x = x.to(dtype)
        if dtype.is_floating_point and x.numel():
            x.view(-1)[0] = float("nan")  # garbage survives the trip unchanged
        roll = layout.tokens_to_roll(x, fill=0)
        assert roll.shape == (b, layout.width - 1, *shape[2:])
        back = layout.tokens_from_roll(roll)
        assert back.dtype == x.dtype
        assert torch.equal(torch.nan_to_num(back, nan=-7), torch.nan_to_num(x, nan=-7))
        seq = layout.sequence_to_roll(x, fill=0)
        assert seq.shape == (b, layout.width, *shape[2:])
        assert torch.equal(
            torch.nan_to_num(layout.sequence_from_roll(seq), nan=-7), torch.nan_to_num(x, nan=-7)
        )


@pytest.mark.parametrize("lengths,width_r,prompts,extra", CASES)
def test_alignment_matches_roll_convention(lengths, width_r, prompts, extra):
    """Response token j of row i is token column P_i + j and per-token column P_i + j - 1;
    the per-token response mask is response_mask[:, 1:]."""
    layout = _layout(lengths, width_r, prompts, extra)
    valid = _right_mask(lengths, width_r)
    full = layout.response_mask(valid)
    attention = layout.attention_mask()
    for i, (length, p) in enumerate(zip(lengths, layout.prompt_lengths.tolist())):
        assert full[i].tolist() == [int(p <= c < p + length) for c in range(layout.width)]
        assert attention[i].sum().item() == p + length
        positions = layout.position_ids()[i].tolist()
        assert positions[: p + length] == list(range(p + length))
    tokens = torch.arange(1, len(lengths) * width_r + 1, dtype=torch.float64).reshape(
        len(lengths), width_r
    )
    grid = layout.tokens_to_roll(tokens * valid, fill=0)
    assert torch.equal(grid.ne(0), full[:, 1:].bool())


def test_mask_holes_stay_holes():
    layout = RollLayout.build(torch.tensor([4]), 4, torch.tensor([2]))
    holes = torch.tensor([[1, 0, 0, 1]])
    assert layout.response_mask(holes)[0].tolist() == [0, 0, 1, 0, 0, 1]
    assert layout.tokens_from_roll(layout.response_mask(holes)[:, 1:]).tolist() == [[1, 0, 0, 1]]


@pytest.mark.parametrize("lengths,width_r,prompts,extra", CASES)
def test_ids_round_trip(lengths, width_r, prompts, extra):
    layout = _layout(lengths, width_r, prompts, extra)
    b = len(lengths)
    pw = int(layout.prompt_lengths.max()) + 1 if b else 1
    prompt_mask = (
        torch.arange(pw) >= (pw - layout.prompt_lengths).unsqueeze(-1)
        if b
        else torch.zeros((0, pw), dtype=torch.bool)
    )
    prompts_ids = torch.where(prompt_mask, torch.arange(10, 10 + pw).expand(b, pw), 0)
    responses = torch.where(
        _right_mask(lengths, width_r).bool(), torch.arange(50, 50 + width_r).expand(b, width_r), 0
    )
    input_ids = layout.ids_to_roll(prompts_ids, responses, pad_token_id=0)
    assert input_ids.shape == (b, layout.width)
    for i in range(b):
        p, length = int(layout.prompt_lengths[i]), lengths[i]
        row = input_ids[i].tolist()
        assert row[:p] == prompts_ids[i, pw - p :].tolist()
        assert row[p : p + length] == responses[i, :length].tolist()
        assert all(v == 0 for v in row[p + length :])
    back_prompts, back_responses = layout.ids_from_roll(input_ids, pw, pad_token_id=0)
    assert torch.equal(back_prompts, prompts_ids)
    assert torch.equal(back_responses, responses)
    assert torch.equal(RollLayout.prompt_lengths_from_mask(prompt_mask), layout.prompt_lengths)


def test_default_prompts_vary_and_lengths_from_holed_masks():
    assert default_prompt_lengths(5).tolist() == [1, 2, 3, 1, 2]
    mask = torch.tensor([[1, 0, 1, 0, 0], [0, 0, 0, 0, 0], [1, 1, 1, 1, 1]])
    assert response_lengths(mask).tolist() == [3, 0, 5]
    assert response_lengths(torch.zeros((2, 0))).tolist() == [0, 0]


def test_width_too_narrow_and_empty_prompt_rejected():
    with pytest.raises(ValueError, match="cannot hold"):
        RollLayout.build(torch.tensor([2]), 3, torch.tensor([2]), width=4)
    with pytest.raises(ValueError, match="at least one prompt token"):
        RollLayout.build(torch.tensor([2]), 3, torch.tensor([0]))

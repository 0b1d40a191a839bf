"""Round trips between the canonical padded layout and slime's lists / packed form."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlconform.adapters.slime import layout

FIELDS = {  # every per-token field slime keeps per sample, with its dtype
    "log_probs": torch.float32,
    "rollout_log_probs": torch.float32,
    "advantages": torch.float32,
    "loss_masks": torch.int32,
    "tokens": torch.int64,
}


def _padded(rows: list[list[float]], width: int, dtype: torch.dtype, pad: float) -> torch.Tensor:
    out = torch.full((len(rows), width), pad, dtype=torch.float64)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(row, dtype=torch.float64)
    return out.to(dtype)


rows_strategy = st.lists(
    st.lists(st.integers(-5, 5).map(float), min_size=0, max_size=5), min_size=0, max_size=4
)


@settings(max_examples=40, deadline=None, derandomize=True)
@given(rows=rows_strategy, extra=st.integers(0, 3), field=st.sampled_from(sorted(FIELDS)))
def test_padded_lists_packed_round_trip(rows, extra, field):
    dtype = FIELDS[field]
    lengths = [len(r) for r in rows]
    width = max(lengths, default=0) + extra
    pad = math.nan if dtype.is_floating_point else -7
    padded = _padded(rows, width, dtype, pad)

    lists = layout.to_lists(padded, lengths)
    assert [int(t.numel()) for t in lists] == lengths
    assert [t.tolist() for t in lists] == [_padded([r], len(r), dtype, 0)[0].tolist() for r in rows]

    flat, cu = layout.padded_to_packed(padded, lengths)
    assert flat.numel() == sum(lengths)
    assert layout.lengths_from_cu_seqlens(cu) == lengths
    assert cu.dtype == torch.int32 and int(cu[0]) == 0

    back = layout.packed_to_padded(flat, cu, width)
    again = layout.from_lists(layout.unpack(flat, lengths), width, dtype=dtype)
    expected = _padded(rows, width, dtype, 0)
    assert torch.equal(back.to(dtype), expected) and torch.equal(again, expected)
    assert [t.tolist() for t in layout.unpack(*layout.pack(lists)[:1], lengths)] == [
        t.tolist() for t in lists
    ]


def test_zero_length_and_empty_batch():
    padded = torch.tensor([[1.0, 2.0], [float("nan"), float("nan")]])
    lists = layout.to_lists(padded, [2, 0])
    assert [t.tolist() for t in lists] == [[1.0, 2.0], []]
    flat, cu = layout.padded_to_packed(padded, [2, 0])
    assert cu.tolist() == [0, 2, 2] and flat.tolist() == [1.0, 2.0]
    assert layout.packed_to_padded(flat, cu, 3).tolist() == [[1.0, 2.0, 0.0], [0.0, 0.0, 0.0]]
    empty = torch.zeros((0, 4))
    assert layout.to_lists(empty, []) == []
    flat, cu = layout.padded_to_packed(empty, [])
    assert flat.numel() == 0 and cu.tolist() == [0]
    assert layout.from_lists([], 4).shape == (0, 4)


def test_lengths_from_mask_counts_holes_and_ignores_trailing_zeros():
    mask = torch.tensor([[1, 0, 1, 0, 0], [0, 0, 0, 0, 0], [1, 1, 1, 1, 1]])
    assert layout.lengths_from_mask(mask) == [3, 0, 5]
    assert layout.lengths_from_mask(torch.zeros((2, 0))) == [0, 0]


def test_from_lists_keeps_gradient_and_rejects_overlong_rows():
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    out = layout.from_lists([x * 3], 4)
    out.sum().backward()
    assert x.grad.tolist() == [3.0, 3.0]
    with pytest.raises(ValueError):
        layout.from_lists([torch.ones(5)], 4)
    with pytest.raises(ValueError):
        layout.unpack(torch.ones(3), [1, 1])

"""Canonical padded layout <-> slime's layouts. Pure layout: no arithmetic on values.

slime keeps every per-token field **response-only and unpadded**: one 1-D tensor of
length L_i per sample (``log_probs``, ``loss_masks``, ``advantages``, ...). Its loss
functions ``torch.cat`` those into one flat tensor (the packed form) and split it back
with ``response_lengths``; Megatron sees the boundaries as ``cu_seqlens``.

The canonical layout (rlconform): (B, T) right-padded responses, a ``response_mask``
with ones on the first L_i columns.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def lengths_from_mask(mask: torch.Tensor) -> list[int]:
    """L_i of a (B, T) right-padded layout: one past the last nonzero column (0 if none).

    Mask holes (tool tokens inside a response) are part of the response; a response that
    ends in mask-0 tokens loses only tokens nothing reads.
    """
    if mask.ndim != 2:
        raise ValueError(f"expected a (B, T) mask, got shape {tuple(mask.shape)}")
    width = mask.shape[-1]
    if width == 0:
        return [0] * mask.shape[0]
    columns = torch.arange(1, width + 1, device=mask.device)
    return torch.where(mask.bool(), columns, torch.zeros_like(columns)).amax(dim=-1).tolist()


def response_lengths(mask: torch.Tensor, *rows: torch.Tensor) -> list[int]:
    """L_i when a row may end in mask-0 tokens that carry a value (a reward on the tool
    observation that ends a response): one past the last column where the mask or one of
    ``rows`` is nonzero. The padded protocol keeps those rows 0 on padding."""
    lengths = lengths_from_mask(mask)
    for row in rows:
        lengths = [max(a, b) for a, b in zip(lengths, lengths_from_mask(row != 0), strict=True)]
    return lengths


def to_lists(padded: torch.Tensor, lengths: Sequence[int]) -> list[torch.Tensor]:
    """(B, T) right-padded -> slime's per-sample list of 1-D tensors (first L_i columns).

    Padding is never read, so NaN/inf there cannot reach slime.
    """
    if padded.shape[0] != len(lengths):
        raise ValueError(f"{padded.shape[0]} rows but {len(lengths)} lengths")
    return [padded[i, : int(n)].clone() for i, n in enumerate(lengths)]


def from_lists(
    rows: Sequence[torch.Tensor],
    width: int,
    *,
    dtype: torch.dtype | None = None,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """slime's per-sample list -> (B, width) right-padded, 0 at padding.

    Autograd flows through (a row is copied by ``torch.cat`` with zeros, never in place).
    """
    if dtype is None:
        dtype = rows[0].dtype if rows else torch.float32
    if device is None:
        device = rows[0].device if rows else "cpu"
    if not rows:
        return torch.zeros((0, width), dtype=dtype, device=device)
    out = []
    for i, row in enumerate(rows):
        row = row.reshape(-1).to(device=device, dtype=dtype)
        if row.numel() > width:
            raise ValueError(f"row {i} has {row.numel()} values, wider than {width}")
        tail = torch.zeros(width - row.numel(), dtype=dtype, device=device)
        out.append(torch.cat([row, tail]))
    return torch.stack(out)


def pack(rows: Sequence[torch.Tensor]) -> tuple[torch.Tensor, list[int]]:
    """slime's per-sample list -> (flat 1-D tensor, response_lengths): ``torch.cat`` form."""
    lengths = [int(row.numel()) for row in rows]
    if not rows:
        return torch.zeros(0), lengths
    return torch.cat([row.reshape(-1) for row in rows]), lengths


def unpack(flat: torch.Tensor, lengths: Sequence[int]) -> list[torch.Tensor]:
    """Flat 1-D tensor + response_lengths -> per-sample list (slime's ``x.split``)."""
    if flat.numel() != sum(lengths):
        raise ValueError(f"flat tensor has {flat.numel()} values, lengths sum to {sum(lengths)}")
    return list(flat.reshape(-1).split([int(n) for n in lengths]))


def cu_seqlens(lengths: Sequence[int], device: torch.device | str = "cpu") -> torch.Tensor:
    """(B + 1,) int32 boundaries of the packed form: 0, L_0, L_0 + L_1, ..."""
    out = [0]
    for n in lengths:
        out.append(out[-1] + int(n))
    return torch.tensor(out, dtype=torch.int32, device=device)


def lengths_from_cu_seqlens(bounds: torch.Tensor) -> list[int]:
    bounds = bounds.to(torch.int64)
    return (bounds[1:] - bounds[:-1]).tolist()


def padded_to_packed(
    padded: torch.Tensor, lengths: Sequence[int]
) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, T) right-padded -> (flat values, cu_seqlens)."""
    flat, _ = pack(to_lists(padded, lengths))
    if not lengths:
        flat = flat.to(dtype=padded.dtype, device=padded.device)
    return flat, cu_seqlens(lengths, padded.device)


def packed_to_padded(flat: torch.Tensor, bounds: torch.Tensor, width: int) -> torch.Tensor:
    """(flat values, cu_seqlens) -> (B, width) right-padded, 0 at padding."""
    rows = unpack(flat, lengths_from_cu_seqlens(bounds))
    return from_lists(rows, width, dtype=flat.dtype, device=flat.device)

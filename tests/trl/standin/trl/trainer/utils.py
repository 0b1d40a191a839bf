"""Stand-in helpers under TRL's names (contract math, written for rlconform's tests)."""

from __future__ import annotations

import torch


def nanstd(tensor: torch.Tensor, dim=None, keepdim: bool = False) -> torch.Tensor:
    """Bessel-corrected std ignoring NaN (NaN where fewer than two values)."""
    valid = ~torch.isnan(tensor)
    count = valid.sum() if dim is None else valid.sum(dim=dim, keepdim=True)
    values = torch.where(valid, tensor, torch.zeros_like(tensor))
    total = values.sum() if dim is None else values.sum(dim=dim, keepdim=True)
    mean = total / count
    squares = torch.where(valid, (tensor - mean) ** 2, torch.zeros_like(tensor))
    spread = squares.sum() if dim is None else squares.sum(dim=dim, keepdim=True)
    std = torch.sqrt(spread / (count - 1))
    std = torch.where(count > 1, std, torch.full_like(std, float("nan")))
    return std if dim is None or keepdim else std.squeeze(dim)


def pad(
    tensors: list[torch.Tensor], padding_value=0, padding_side="right", pad_to_multiple_of=None
):
    width = max((len(t) for t in tensors), default=0)
    out = torch.full(
        (len(tensors), width), padding_value, dtype=tensors[0].dtype if tensors else torch.long
    )
    for i, row in enumerate(tensors):
        if len(row):
            if padding_side == "right":
                out[i, : len(row)] = row
            else:
                out[i, width - len(row) :] = row
    return out

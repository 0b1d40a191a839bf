"""Conversions shared by the oracle-target operations: padded tensors <-> ragged lists."""

from __future__ import annotations

import torch

from rlconform.conformance.harness import pad_right


def pad_like(rows: list[list[float]], like: torch.Tensor) -> torch.Tensor:
    """Right-pad ragged rows (padding 0) to the width, dtype and device of ``like``."""
    return pad_right(rows, width=like.shape[-1], dtype=like.dtype, device=like.device)


def binary_rows(mask: torch.Tensor) -> list[list[int]]:
    """A (B, T) mask as Python rows of 0/1 (any non-zero entry counts as 1)."""
    return [[1 if m else 0 for m in row] for row in mask.tolist()]


def int_rows(mask: torch.Tensor) -> list[list[int]]:
    """A (B, T) mask as Python rows of ``int(m)``."""
    return [[int(m) for m in row] for row in mask.tolist()]


def row_lengths(mask: torch.Tensor) -> list[int]:
    """L_i of each row of a right-padded 0/1 mask (its row sums)."""
    return [int(n) for n in mask.sum(-1).tolist()]

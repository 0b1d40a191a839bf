"""The harness owns layout: ragged lists <-> padded tensors, and padding-hygiene checks.

Canonical layout: responses right-padded to a common width, prompts left-padded. The
harness fills padding with the case's ``pad_value`` (0, NaN, inf or garbage) so that an
implementation which reads padding is caught; it reads back only the valid positions and
checks the padded ones separately.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from rlconform.conformance.errors import ClauseMismatch

_DTYPES = {
    "float64": torch.float64,
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}


def torch_dtype(name: str) -> torch.dtype:
    """The torch dtype for a profile dtype name."""
    return _DTYPES[str(name).replace("torch.", "")]


def width_of(rows: Sequence[Sequence[Any]], extra: int = 0) -> int:
    return max((len(r) for r in rows), default=0) + extra


def pad_right(
    rows: Sequence[Sequence[Any]],
    *,
    width: int | None = None,
    fill: Any = 0,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cpu",
) -> torch.Tensor:
    """Right-pad ragged rows into a (B, width) tensor; padding holds ``fill``."""
    width = width_of(rows) if width is None else width
    out = torch.full((len(rows), width), fill, dtype=dtype)
    for i, row in enumerate(rows):
        if len(row) > width:
            raise ValueError(f"row {i} has {len(row)} values, wider than {width}")
        if len(row):
            out[i, : len(row)] = torch.tensor(list(row), dtype=dtype)
    return out.to(device)


def pad_left(
    rows: Sequence[Sequence[Any]],
    *,
    width: int | None = None,
    fill: Any = 0,
    dtype: torch.dtype = torch.int64,
    device: str | torch.device = "cpu",
) -> torch.Tensor:
    """Left-pad ragged rows (prompts) into a (B, width) tensor."""
    width = width_of(rows) if width is None else width
    out = torch.full((len(rows), width), fill, dtype=dtype)
    for i, row in enumerate(rows):
        if len(row):
            out[i, width - len(row) :] = torch.tensor(list(row), dtype=dtype)
    return out.to(device)


def right_mask(
    lengths: Sequence[int], width: int, device: str | torch.device = "cpu"
) -> torch.Tensor:
    """(B, width) int64 mask with ones on the first ``lengths[i]`` columns of row i."""
    cols = torch.arange(width).unsqueeze(0)
    return (
        (cols < torch.tensor(list(lengths), dtype=torch.int64).unsqueeze(1))
        .to(torch.int64)
        .to(device)
    )


def unpad_right(tensor: Any, lengths: Sequence[int]) -> list[list[float]]:
    """Valid positions of a right-padded (B, T) tensor as float64 ragged lists."""
    values = _as_rows(tensor)
    if len(values) != len(lengths):
        raise ClauseMismatch(
            f"output has {len(values)} rows, expected {len(lengths)}",
            detail={"expected": len(lengths), "actual": len(values)},
        )
    return [list(values[i][: lengths[i]]) for i in range(len(lengths))]


def padding_values(tensor: Any, lengths: Sequence[int]) -> list[list[float]]:
    """The padded (invalid) positions of a right-padded (B, T) tensor."""
    values = _as_rows(tensor)
    return [list(values[i][lengths[i] :]) for i in range(len(lengths))]


def to_float_list(tensor: Any) -> list[Any]:
    """A tensor (any device/dtype) as nested Python floats (float64 exact for fp32)."""
    if isinstance(tensor, torch.Tensor):
        t = tensor.detach().to("cpu")
        if t.is_floating_point():
            t = t.to(torch.float64)
        return t.tolist()
    return list(tensor)


def _as_rows(tensor: Any) -> list[list[float]]:
    rows = to_float_list(tensor)
    return [list(r) if isinstance(r, (list, tuple)) else [r] for r in rows]


def assert_padding_zero(
    clause: str,
    what: str,
    tensor: Any,
    lengths: Sequence[int],
    uids: Sequence[Any],
    check: str | None = None,
) -> None:
    """Padding hygiene: every position past L_i must be exactly 0 (and finite)."""
    for i, row in enumerate(padding_values(tensor, lengths)):
        for offset, value in enumerate(row):
            if value != 0 or (isinstance(value, float) and math.isnan(value)):
                token = lengths[i] + offset
                raise ClauseMismatch(
                    f"[{clause}] {what}: padding is not zero at sample uid={uids[i]!r}, "
                    f"column {token} (L_i={lengths[i]}): actual {value!r}",
                    detail={
                        "what": what,
                        "uid": uids[i],
                        "token": token,
                        "expected": 0.0,
                        "actual": value,
                    },
                    check=check,
                )


def non_tensor_rows(values: Sequence[Any]) -> Any:
    """One Python value per row as a TensorDict entry (element-wise, so lists are not stacked).

    An empty NonTensorStack cannot be assigned into a TensorDict on tensordict 0.10 (the
    version verl 0.9.1 pins); an empty NonTensorData reads back as [] on every version.
    """
    from tensordict import NonTensorData, NonTensorStack

    if not values:
        return NonTensorData(data=[], batch_size=[0])
    return NonTensorStack(*[NonTensorData(value) for value in values])

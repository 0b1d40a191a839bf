"""The call a failing clause made, as Python a user can paste (CONTRACT §2: the operation and
the tensors it received), for the console, the plugin and the JSON report.

``render(target, op, args, kwargs)`` names every argument by the operation's signature and
writes tensors as ``torch.tensor([...], dtype=torch.float32)`` (NaN and infinities as
``float('nan')`` ...) and numpy arrays as ``np.array([...], dtype=...)``: paste after
``import numpy as np, torch`` with ``target`` the loaded target. Arguments that are not tensors, numbers, strings or containers of
them (a framework's batch object) cannot be written so: the result is None and the report
keeps only the ``replay`` reproducer.
"""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np
import torch

from rlconform.conformance.literal import to_literal

# beyond this a pasted call is no longer a thing a user reads
MAX_CHARS = 6000


class _Unwritable(Exception):
    pass


def render(target: Any, op: str, args: tuple, kwargs: dict) -> str | None:
    """``target.op(name=value, ...)`` or None."""
    # a variant built by with_overrides keeps the interface of the target it wraps
    interface = getattr(getattr(target, "_original", None), op, None) or getattr(target, op)
    try:
        named = _named(interface, args, kwargs)
        parts = [f"{name}={_value(value)}" for name, value in named]
    except _Unwritable:
        return None
    text = f"target.{op}(" + ", ".join(parts) + ")"
    return text if len(text) <= MAX_CHARS else None


def _named(fn: Any, args: tuple, kwargs: dict) -> list[tuple[str, Any]]:
    try:
        bound = inspect.signature(fn).bind(*args, **kwargs)
    except (TypeError, ValueError):
        return [(f"arg{i}", a) for i, a in enumerate(args)] + list(kwargs.items())
    out: list[tuple[str, Any]] = []
    for name, value in bound.arguments.items():
        kind = bound.signature.parameters[name].kind
        if kind is inspect.Parameter.VAR_KEYWORD:
            out += list(value.items())
        elif kind is inspect.Parameter.VAR_POSITIONAL:
            out += [(f"{name}{i}", v) for i, v in enumerate(value)]
        else:
            out.append((name, value))
    return out


def _value(value: Any) -> str:
    return to_literal(value, leaf=_array_text)


def _array_text(value: Any) -> str | None:
    """Tensors and numpy values as constructor calls; plain values left to to_literal; any
    other object cannot be written."""
    if isinstance(value, torch.Tensor):
        dtype = str(value.dtype).replace("torch.", "")
        return f"torch.tensor({_value(value.detach().cpu().tolist())}, dtype=torch.{dtype})"
    if isinstance(value, np.ndarray):
        dtype = "object" if value.dtype == object else f"np.{value.dtype}"
        return f"np.array({_value(value.tolist())}, dtype={dtype})"
    if isinstance(value, np.generic):
        return _value(value.item())
    if value is None or isinstance(value, (bool, int, float, str, list, tuple, dict)):
        return None
    raise _Unwritable(type(value).__name__)

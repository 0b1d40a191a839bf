"""The call a failing clause made, as Python a user can paste (CONTRACT §2: the operation and
the tensors it received), for the console, the plugin and the JSON report.

``render(target, op, args, kwargs)`` names every argument by the operation's signature and
writes tensors as ``torch.tensor([...], dtype=torch.float32)`` (NaN and infinities as
``float("nan")`` ...) and numpy arrays as ``np.array([...], dtype=...)``: paste after
``import numpy as np, torch`` with ``target`` the loaded target. Arguments that are not tensors, numbers, strings or containers of
them (a framework's batch object) cannot be written so: the result is None and the report
keeps only the ``replay`` reproducer.
"""

from __future__ import annotations

import inspect
import math
from typing import Any

import numpy as np
import torch

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
    if isinstance(value, torch.Tensor):
        dtype = str(value.dtype).replace("torch.", "")
        return f"torch.tensor({_value(value.detach().cpu().tolist())}, dtype=torch.{dtype})"
    if isinstance(value, np.ndarray):
        dtype = "object" if value.dtype == object else f"np.{value.dtype}"
        return f"np.array({_value(value.tolist())}, dtype={dtype})"
    if isinstance(value, np.generic):
        return _value(value.item())
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return repr(value)
    if isinstance(value, float):
        if math.isnan(value):
            return 'float("nan")'
        if math.isinf(value):
            return 'float("inf")' if value > 0 else 'float("-inf")'
        return repr(value)
    if isinstance(value, int):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, tuple):
        inner = ", ".join(_value(v) for v in value)
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_value(k)}: {_value(v)}" for k, v in value.items()) + "}"
    raise _Unwritable(type(value).__name__)

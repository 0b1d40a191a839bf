"""Render cases as copy-pasteable Python literals (NaN and inf included)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any


def to_literal(value: Any, leaf: Callable[[Any], str | None] | None = None) -> str:
    """A Python expression that evaluates back to ``value`` (floats exactly, via repr).
    ``leaf(value)``, when given, writes the values it knows (tensors: call_text.py) and
    returns None for the rest."""
    written = leaf(value) if leaf is not None else None
    if written is not None:
        return written
    if isinstance(value, float):
        if math.isnan(value):
            return "float('nan')"
        if math.isinf(value):
            return "float('inf')" if value > 0 else "-float('inf')"
        return repr(value)
    if isinstance(value, dict):
        items = (f"{to_literal(k, leaf)}: {to_literal(v, leaf)}" for k, v in value.items())
        return "{" + ", ".join(items) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(to_literal(v, leaf) for v in value) + "]"
    if isinstance(value, tuple):
        inner = ", ".join(to_literal(v, leaf) for v in value)
        return "(" + inner + ("," if len(value) == 1 else "") + ")"
    return repr(value)


def to_jsonable(value: Any) -> Any:
    """The same value with NaN/inf as strings so that strict JSON can carry it."""
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    if isinstance(value, (str, int, bool)) or value is None or isinstance(value, float):
        return value
    return repr(value)


_NON_FINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


def from_jsonable(value: Any) -> Any:
    """The inverse of ``to_jsonable`` for a case: ``"nan"`` / ``"inf"`` / ``"-inf"`` back to
    floats (every other value unchanged)."""
    if isinstance(value, str):
        return _NON_FINITE.get(value, value)
    if isinstance(value, dict):
        return {k: from_jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [from_jsonable(v) for v in value]
    return value

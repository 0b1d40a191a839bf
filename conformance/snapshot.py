"""Deep snapshots of call arguments and outputs, and their bit-level comparison.

Used by the engine's no-mutation and determinism checks on every target call
(``CheckContext.call``) and by the purity, schema and filter clauses.
"""

from __future__ import annotations

import copy
import math
from typing import Any

import numpy as np
import torch
from tensordict import TensorDictBase
from tensordict.tensorclass import NonTensorData, NonTensorStack

from rlconform.conformance.compare import Tolerance
from rlconform.conformance.errors import ClauseMismatch

_PLAIN = (str, bytes, int, float, bool, complex, type(None))


def snapshot(value: Any, depth: int = 4) -> Any:
    """Like ``freeze``, for any argument or output of a target call: an object that is not
    plain data is captured through its attributes (``vars``, up to ``depth`` levels, so a
    framework container such as verl's DataProto is compared by content), anything else
    (a function, a module, an object without attributes) by its type name only."""
    if isinstance(value, (torch.Tensor, np.ndarray, NonTensorStack, NonTensorData, TensorDictBase)):
        return freeze(value)
    if isinstance(value, _PLAIN):
        return value
    if isinstance(value, dict):
        return {key: snapshot(item, depth) for key, item in value.items()}
    if isinstance(value, list):
        return [snapshot(item, depth) for item in value]
    if isinstance(value, tuple):
        return tuple(snapshot(item, depth) for item in value)
    name = type(value).__name__
    attributes = getattr(value, "__dict__", None)
    if depth <= 0 or not isinstance(attributes, dict) or callable(value):
        return f"<opaque {name}>"
    return {f"<{name}>": snapshot(dict(attributes), depth - 1)}


def freeze(value: Any) -> Any:
    """A deep copy of ``value`` as plain data: tensors cloned, TensorDicts, non-tensor
    stacks and numpy arrays unpacked into dicts and lists, containers copied recursively."""
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, np.ndarray):
        return {"<ndarray>": (str(value.dtype), value.shape, freeze(value.tolist()))}
    if isinstance(value, (NonTensorStack, NonTensorData)):
        return {"<NonTensor>": copy.deepcopy(value.tolist())}
    if isinstance(value, TensorDictBase):
        return {"<TensorDict>": {key: freeze(value.get(key)) for key in sorted(value.keys())}}
    if isinstance(value, dict):
        return {key: freeze(item) for key, item in value.items()}
    if isinstance(value, list):
        return [freeze(item) for item in value]
    if isinstance(value, tuple):
        return tuple(freeze(item) for item in value)
    return copy.deepcopy(value)


def first_difference(
    expected: Any, actual: Any, path: tuple = (), tolerance: Tolerance | None = None
) -> tuple[tuple, Any, Any] | None:
    """The first place where two frozen values differ, as ``(path, expected, actual)``.

    Without ``tolerance`` the comparison is bit-level (NaN equals NaN, 0.0 differs from
    -0.0, float32 differs from float64); with it, floats may differ by the tolerance.
    """
    if isinstance(expected, torch.Tensor) or isinstance(actual, torch.Tensor):
        return _tensor_difference(expected, actual, path, tolerance)
    if isinstance(expected, float) or isinstance(actual, float):
        if not isinstance(expected, float) or not isinstance(actual, float):
            return (path, expected, actual)
        return None if _floats_match(expected, actual, tolerance) else (path, expected, actual)
    if isinstance(expected, dict) and isinstance(actual, dict):
        if set(expected) != set(actual):
            return (path + ("<keys>",), sorted(expected, key=repr), sorted(actual, key=repr))
        for key in expected:
            found = first_difference(expected[key], actual[key], path + (key,), tolerance)
            if found:
                return found
        return None
    if isinstance(expected, (list, tuple)) and isinstance(actual, (list, tuple)):
        if type(expected) is not type(actual) or len(expected) != len(actual):
            return (path + ("<len>",), len(expected), len(actual))
        for index, (e, a) in enumerate(zip(expected, actual)):
            found = first_difference(e, a, path + (index,), tolerance)
            if found:
                return found
        return None
    if type(expected) is not type(actual) or expected != actual:
        return (path, expected, actual)
    return None


def _floats_match(e: float, a: float, tolerance: Tolerance | None) -> bool:
    if math.isnan(e) or math.isnan(a):
        return math.isnan(e) and math.isnan(a)
    if tolerance is None or math.isinf(e) or math.isinf(a):
        return e.hex() == a.hex()
    return abs(e - a) <= tolerance.allowed(e)


def _tensor_difference(
    expected: Any, actual: Any, path: tuple, tolerance: Tolerance | None
) -> tuple[tuple, Any, Any] | None:
    if not (isinstance(expected, torch.Tensor) and isinstance(actual, torch.Tensor)):
        return (path, type(expected).__name__, type(actual).__name__)
    if expected.dtype != actual.dtype or expected.shape != actual.shape:
        return (
            path + ("<dtype/shape>",),
            (expected.dtype, tuple(expected.shape)),
            (actual.dtype, tuple(actual.shape)),
        )
    e, a = expected.detach().cpu(), actual.detach().cpu()
    if e.is_floating_point():
        same = (e == a) | (e.isnan() & a.isnan())
        if tolerance is None:
            same &= e.signbit() == a.signbit()
        else:
            e64, a64 = e.to(torch.float64), a.to(torch.float64)
            same |= (e64 - a64).abs() <= tolerance.atol + tolerance.rtol * e64.abs()
    else:
        same = e == a
    if bool(same.all()):
        return None
    index = tuple(int(i) for i in (~same).nonzero()[0].tolist())
    return (path + (index,), e[index].item(), a[index].item())


def describe(path: tuple, frozen: Any, uids: list[Any] = (), call: bool = False) -> tuple[str, Any]:
    """A readable path (``args[0][2]['reward']``) and the sample uid it passes through.

    With ``call`` the frozen value is ``(args, kwargs)`` and the path starts there.
    """
    text, uid, node = "", None, frozen
    if call and path:
        text, node, path = ("args", "kwargs")[path[0]], frozen[path[0]], path[1:]
    for step in path:
        if isinstance(step, tuple):  # a tensor element: its first index is the sample row
            text += "[" + ", ".join(map(str, step)) + "]"
            if step and step[0] < len(uids) and uid is None:
                uid = uids[step[0]]
            node = None
            continue
        text += (
            f"[{step!r}]" if not isinstance(step, str) or not step.startswith("<") else f".{step}"
        )
        if isinstance(node, (list, tuple)) and isinstance(step, int) and step < len(node):
            node = node[step]
            if isinstance(node, dict) and "uid" in node and uid is None:
                uid = node["uid"]
        elif isinstance(node, dict) and step in node:
            node = node[step]
        else:
            node = None
    return text, uid


def assert_unchanged(
    clause_id: str, op: str, before: Any, after: Any, uids: list[Any] = ()
) -> None:
    """Purity: the frozen ``(args, kwargs)`` after the call are bit-identical to ``before``."""
    found = first_difference(before, after)
    if found is None:
        return
    path, expected, actual = found
    where, uid = describe(path, before, uids, call=True)
    sample = f" (sample uid={uid!r})" if uid is not None else ""
    raise ClauseMismatch(
        f"[{clause_id}] {op} modified its input at {where}{sample}: "
        f"before {expected!r}, after {actual!r}",
        detail={"what": f"{op} input {where}", "uid": uid, "expected": expected, "actual": actual},
    )


def assert_same_output(
    clause_id: str,
    what: str,
    expected: Any,
    actual: Any,
    *,
    tolerance: Tolerance | None = None,
    uids: list[Any] = (),
) -> None:
    """Two outputs are identical (bit-level, or within ``tolerance`` for floats); ``uids``
    names the sample of a tensor row in messages."""
    found = first_difference(freeze(expected), freeze(actual), tolerance=tolerance)
    if found is None:
        return
    path, e, a = found
    where, uid = describe(path, freeze(expected), uids)
    sample = f" (sample uid={uid!r})" if uid is not None else ""
    raise ClauseMismatch(
        f"[{clause_id}] {what}: differs at {where}{sample}: expected {e!r}, actual {a!r}",
        detail={"what": f"{what} {where}", "uid": uid, "expected": e, "actual": a},
    )

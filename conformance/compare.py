"""Comparison against the float64 oracle with CONTRACT §4 tolerances.

Masks, indices, counts and reasons compare exactly. A float comparison allows
``atol + rtol * |expected| + k * eps(dtype) * scale`` per element, where ``scale`` is the
conditioning term a clause derives for its operation (e.g. ``(|x| + |mean|) / std`` for
whitening), so honest rounding passes and real bugs (a cancelling variance formula, a
wrong denominator) still fail. Messages follow ``torch.testing.assert_close``: how many
elements mismatch, the worst one with its sample uid and token index, both values, the
tolerance used.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

from rlconform.conformance.errors import ClauseMismatch


@dataclasses.dataclass(frozen=True)
class Tolerance:
    """Per-dtype base tolerance (CONTRACT §4) and the unit roundoff ``eps``."""

    dtype: str
    rtol: float
    atol: float
    eps: float

    def allowed(self, expected: float, scale: float = 0.0, k: float = 16.0) -> float:
        return self.atol + self.rtol * abs(expected) + k * self.eps * abs(scale)

    def describe(self) -> str:
        return f"{self.dtype}: rtol {self.rtol:g}, atol {self.atol:g}"


_TOLERANCES = {
    "float64": Tolerance("float64", 1e-9, 1e-12, 2.0**-52),
    "float32": Tolerance("float32", 1.3e-6, 1e-5, 2.0**-23),
    "bfloat16": Tolerance("bfloat16", 1.6e-2, 1e-5, 2.0**-7),
    "float16": Tolerance("float16", 1e-3, 1e-5, 2.0**-10),
}


def tolerance_for(dtype: str) -> Tolerance:
    """The CONTRACT §4 tolerance for ``dtype`` (a name such as ``"float32"``)."""
    key = str(dtype).replace("torch.", "")
    if key not in _TOLERANCES:
        raise ValueError(f"no tolerance defined for dtype {dtype!r}")
    return _TOLERANCES[key]


def _same(expected: float, actual: float) -> bool:
    if math.isnan(expected) or math.isnan(actual):
        return math.isnan(expected) and math.isnan(actual)
    if math.isinf(expected) or math.isinf(actual):
        return expected == actual
    # equal values agree whatever the tolerance's scale (a NaN scale allows nothing else)
    return expected == actual


def overflowed(
    expected: Sequence[Sequence[float]], actual: Sequence[Sequence[float]], limit: float
) -> set[tuple[int, int]]:
    """Positions where the exact value exceeds the dtype's range (``limit``, its largest
    finite number) and the implementation returned an infinity of the same sign: what a
    correct implementation without a clamp returns there (CONTRACT: KL and loss overflow)."""
    return {
        (i, t)
        for i, row in enumerate(actual)
        for t, a in enumerate(row)
        if math.isinf(a)
        and not math.isnan(expected[i][t])
        and abs(expected[i][t]) > limit
        and (a > 0) == (expected[i][t] > 0)
    }


def with_actual_at(
    expected: Sequence[Sequence[float]],
    actual: Sequence[Sequence[float]],
    positions: set[tuple[int, int]],
) -> list[list[float]]:
    """``expected`` with the actual value at ``positions`` (accepted as they are)."""
    rows = [list(row) for row in expected]
    for i, t in positions:
        rows[i][t] = actual[i][t]
    return rows


def assert_rows_close(
    clause: str,
    what: str,
    expected: Sequence[Sequence[float]],
    actual: Sequence[Sequence[float]],
    *,
    uids: Sequence[Any],
    tolerance: Tolerance,
    scale: Sequence[Sequence[float]] | None = None,
    k: float = 16.0,
    check: str | None = None,
) -> None:
    """Compare ragged per-token float rows; raise ClauseMismatch naming the worst element."""
    _check_shapes(clause, what, expected, actual, uids, check)
    worst: tuple[float, int, int, float] | None = None
    mismatched = 0
    total = 0
    for i, (exp_row, act_row) in enumerate(zip(expected, actual)):
        for t, (e, a) in enumerate(zip(exp_row, act_row)):
            total += 1
            e, a = float(e), float(a)
            if _same(e, a):
                continue
            s = scale[i][t] if scale is not None else 0.0
            allowed = tolerance.allowed(e, s, k)
            diff = abs(e - a)
            if not (diff <= allowed):
                mismatched += 1
                ratio = math.inf if math.isnan(diff) else diff / allowed
                if worst is None or ratio > worst[0]:
                    worst = (ratio, i, t, allowed)
    if worst is None:
        return
    _, i, t, allowed = worst
    e, a = float(expected[i][t]), float(actual[i][t])
    raise ClauseMismatch(
        f"[{clause}] {what}: {mismatched} of {total} valid positions mismatch "
        f"({tolerance.describe()}).\n"
        f"  worst at sample uid={uids[i]!r}, token {t}: expected {e!r}, actual {a!r} "
        f"(|diff| {abs(e - a):.3g} > allowed {allowed:.3g})",
        detail={
            "what": what,
            "uid": uids[i],
            "token": t,
            "expected": e,
            "actual": a,
            "allowed": allowed,
            "mismatched": mismatched,
            "total": total,
        },
        check=check,
    )


def assert_rows_equal(
    clause: str,
    what: str,
    expected: Sequence[Sequence[Any]],
    actual: Sequence[Sequence[Any]],
    *,
    uids: Sequence[Any],
    check: str | None = None,
) -> None:
    """Exact comparison of ragged rows (masks, ids, placement, counts)."""
    _check_shapes(clause, what, expected, actual, uids, check)
    mismatched = 0
    first: tuple[int, int] | None = None
    total = 0
    for i, (exp_row, act_row) in enumerate(zip(expected, actual)):
        for t, (e, a) in enumerate(zip(exp_row, act_row)):
            total += 1
            if e != a and not (isinstance(e, float) and isinstance(a, float) and _same(e, a)):
                mismatched += 1
                if first is None:
                    first = (i, t)
    if first is None:
        return
    i, t = first
    raise ClauseMismatch(
        f"[{clause}] {what}: {mismatched} of {total} positions differ (exact comparison).\n"
        f"  first at sample uid={uids[i]!r}, token {t}: expected {expected[i][t]!r}, "
        f"actual {actual[i][t]!r}",
        detail={
            "what": what,
            "uid": uids[i],
            "token": t,
            "expected": expected[i][t],
            "actual": actual[i][t],
            "mismatched": mismatched,
            "total": total,
        },
        check=check,
    )


def assert_scalar_close(
    clause: str,
    what: str,
    expected: float,
    actual: float,
    *,
    tolerance: Tolerance,
    scale: float = 0.0,
    k: float = 16.0,
    uid: Any = None,
    check: str | None = None,
) -> None:
    """Compare one float (a loss, a statistic) against the oracle."""
    e, a = float(expected), float(actual)
    if _same(e, a):
        return
    allowed = tolerance.allowed(e, scale, k)
    if abs(e - a) <= allowed:
        return
    where = f" for sample uid={uid!r}" if uid is not None else ""
    raise ClauseMismatch(
        f"[{clause}] {what}{where}: expected {e!r}, actual {a!r} "
        f"(|diff| {abs(e - a):.3g} > allowed {allowed:.3g}; {tolerance.describe()})",
        detail={"what": what, "uid": uid, "expected": e, "actual": a, "allowed": allowed},
        check=check,
    )


def assert_equal(
    clause: str,
    what: str,
    expected: Any,
    actual: Any,
    uid: Any = None,
    check: str | None = None,
) -> None:
    """Exact comparison of a non-float value (a count, a reason, a list of uids)."""
    if expected == actual:
        return
    where = f" for sample uid={uid!r}" if uid is not None else ""
    raise ClauseMismatch(
        f"[{clause}] {what}{where}: expected {expected!r}, actual {actual!r}",
        detail={"what": what, "uid": uid, "expected": expected, "actual": actual},
        check=check,
    )


def _check_shapes(
    clause: str,
    what: str,
    expected: Sequence[Sequence[Any]],
    actual: Sequence[Sequence[Any]],
    uids: Sequence[Any],
    check: str | None = None,
) -> None:
    if len(expected) != len(actual):
        raise ClauseMismatch(
            f"[{clause}] {what}: expected {len(expected)} samples, actual {len(actual)}",
            detail={"what": what, "expected": len(expected), "actual": len(actual)},
            check=check,
        )
    for i, (exp_row, act_row) in enumerate(zip(expected, actual)):
        if len(exp_row) != len(act_row):
            raise ClauseMismatch(
                f"[{clause}] {what}: sample uid={uids[i]!r} has {len(act_row)} tokens, "
                f"expected {len(exp_row)}",
                detail={
                    "what": what,
                    "uid": uids[i],
                    "expected": len(exp_row),
                    "actual": len(act_row),
                },
                check=check,
            )

"""Where an engine run's time goes: by pass (explore, shrink, grade) and by phase.

Phases are exclusive: a second counted in ``target`` (a call into the implementation) is
not also counted in the enclosing ``other`` (hypothesis' generation, the harness, the
comparison). ``startup`` is the start of gloo worker processes, ``oracle`` the reference
oracle (counted only once ``instrument_oracle()`` has wrapped its public functions, as the
suite-time benchmark does). Passes say why the engine ran a case: ``explore`` (the first
search of a clause), ``shrink`` (hypothesis minimising a failure it found), ``grade``
(severity grading: the milder domains, the declared deviations' domains); ``outside`` is
everything else (imports, target set-up, the test code around the engine).

Always on: the cost is two ``perf_counter`` calls per target call. ``snapshot()`` returns
the totals so far; ``reset()`` clears them.
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections import defaultdict
from collections.abc import Iterator

PHASES = ("other", "target", "oracle", "startup")
PASSES = ("outside", "explore", "shrink", "grade")

_totals: dict[tuple[str, str], float] = defaultdict(float)
_stack: list[str] = []
_pass = ["outside"]
_mark = [time.perf_counter()]


def _charge(now: float) -> None:
    top = _stack[-1] if _stack else "other"
    _totals[(_pass[-1], top)] += now - _mark[0]
    _mark[0] = now


@contextlib.contextmanager
def phase(name: str) -> Iterator[None]:
    """Count the block's time as ``name`` (nested blocks of the same phase count once)."""
    if _stack and _stack[-1] == name:
        yield
        return
    _charge(time.perf_counter())
    _stack.append(name)
    try:
        yield
    finally:
        _charge(time.perf_counter())
        _stack.pop()


@contextlib.contextmanager
def engine_pass(name: str) -> Iterator[None]:
    """Count the block's time (every phase of it) under pass ``name``."""
    _charge(time.perf_counter())
    _pass.append(name)
    try:
        yield
    finally:
        _charge(time.perf_counter())
        _pass.pop()


def switch_pass(name: str) -> None:
    """From now until the enclosing ``engine_pass`` ends, count under ``name`` (hypothesis
    starts shrinking at the first failure it does not tolerate)."""
    _charge(time.perf_counter())
    _pass[-1] = name


def snapshot() -> dict[str, dict[str, float]]:
    """Seconds so far, as {pass: {phase: seconds}}, the open block included."""
    _charge(time.perf_counter())
    out: dict[str, dict[str, float]] = {}
    for (pass_name, phase_name), seconds in _totals.items():
        out.setdefault(pass_name, {})[phase_name] = seconds
    return out


def reset() -> None:
    _totals.clear()
    _mark[0] = time.perf_counter()


def instrument_oracle() -> None:
    """Wrap every public function of the ``rlconform.oracle`` modules so that its time is
    counted as ``oracle`` (for the benchmark; module-attribute calls only)."""
    import importlib
    import inspect
    import pkgutil

    import rlconform.oracle as package

    for info in pkgutil.iter_modules(package.__path__):
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        for name, fn in list(vars(module).items()):
            if (
                name.startswith("_")
                or not inspect.isfunction(fn)
                or fn.__module__ != module.__name__
                or getattr(fn, "__rlc_timed__", False)
            ):
                continue
            setattr(module, name, _timed(fn))


def _timed(fn):  # type: ignore[no-untyped-def]
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):  # type: ignore[no-untyped-def]
        with phase("oracle"):
            return fn(*args, **kwargs)

    wrapper.__rlc_timed__ = True  # type: ignore[attr-defined]
    return wrapper

"""Run clauses against a target with isolation: a crash or hang fails only that clause."""

from __future__ import annotations

import builtins
import contextlib
import signal
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from hypothesis import HealthCheck, Verbosity, example, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis.errors import Unsatisfiable
from hypothesis.strategies import SearchStrategy

from rlconform.adapters.base import Deviation, Target, Unsupported
from rlconform.conformance.context import CheckContext
from rlconform.conformance.errors import ClauseMismatch, ClauseTimeout, TargetError
from rlconform.conformance.literal import to_jsonable, to_literal
from rlconform.conformance.profiles import RunProfile
from rlconform.conformance.registry import Clause
from rlconform.conformance.results import ClauseResult, RunReport
from rlconform.conformance.scopes import SCOPES, in_scope

NOT_IMPLEMENTED = "not implemented by target"


class _TimeLimitExceeded(BaseException):
    """Raised by the alarm; a BaseException so that hypothesis does not shrink on it."""


@contextlib.contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Interrupt the block after ``seconds`` (main thread on POSIX; elsewhere unbounded)."""
    usable = (
        seconds > 0
        and hasattr(signal, "setitimer")
        and threading.current_thread() is threading.main_thread()
    )
    if not usable:
        yield
        return

    def on_alarm(signum: int, frame: Any) -> None:
        raise _TimeLimitExceeded()

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def resolve_strategy(clause: Clause, target: Target) -> SearchStrategy | None:
    strategy = clause.strategy
    if strategy is None or isinstance(strategy, SearchStrategy):
        return strategy
    return strategy(target.profile)


def check_once(clause: Clause, ctx: CheckContext, case: Any) -> None:
    """Run the clause's check on one case, attaching the case to any failure."""
    try:
        clause.check(ctx, case)
    except (ClauseMismatch, TargetError) as failure:
        failure.case = case
        raise


_EXCEPTION_GROUP = getattr(builtins, "BaseExceptionGroup", ())


def _first_failure(exc: BaseException) -> BaseException:
    if _EXCEPTION_GROUP and isinstance(exc, _EXCEPTION_GROUP):
        for inner in exc.exceptions:
            found = _first_failure(inner)
            if isinstance(found, (ClauseMismatch, TargetError)):
                return found
        return exc.exceptions[0]
    cause = exc.__cause__
    if not isinstance(exc, (ClauseMismatch, TargetError)) and isinstance(
        cause, (ClauseMismatch, TargetError)
    ):
        return cause
    return exc


def pinned_cases(clause: Clause) -> list[Any]:
    """The clause's own boundary examples, then every committed fixture case of the clause."""
    from rlconform.fixtures.registry import committed_cases

    return list(clause.examples) + [c["inputs"] for c in committed_cases(clause.id)]


def _explore(
    clause: Clause,
    ctx: CheckContext,
    run_profile: RunProfile,
    seed: int | None,
    exclude: Callable[[Any], bool] | None = None,
) -> None:
    strategy = resolve_strategy(clause, ctx.target)
    if strategy is None:
        check_once(clause, ctx, None)
        return
    pinned = pinned_cases(clause)
    if exclude is not None:
        strategy = strategy.filter(lambda case: not exclude(case))
        pinned = [case for case in pinned if not exclude(case)]

    def prop(case: Any) -> None:
        check_once(clause, ctx, case)

    test: Callable[..., None] = given(strategy)(prop)
    for case in reversed(pinned):
        test = example(case)(test)
    max_examples = max(1, int(run_profile.max_examples * clause.max_examples_scale))
    test = settings(
        max_examples=max_examples,
        derandomize=run_profile.derandomize and seed is None,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
        verbosity=Verbosity.quiet,
        report_multiple_bugs=False,
        print_blob=False,
    )(test)
    if seed is not None:
        test = hypothesis_seed(seed)(test)
    test()


def reproducer(clause_id: str, target_name: str, case: Any) -> str:
    """A copy-pasteable snippet that replays the (shrunk) counterexample."""
    return (
        "from rlconform.conformance.repro import replay\n"
        f"replay({clause_id!r}, {target_name!r}, case={to_literal(case)})"
    )


def _counterexample(clause: Clause, target: Target, failure: ClauseMismatch | TargetError) -> dict:
    detail = dict(getattr(failure, "detail", {}) or {})
    data = {key: to_jsonable(value) for key, value in detail.items()}
    if failure.case is not None:
        data["case"] = to_jsonable(failure.case)
        data["reproducer"] = reproducer(clause.id, target.name, failure.case)
    return data


def run_clause(
    clause: Clause,
    target: Target,
    run_profile: RunProfile,
    *,
    device: str = "cpu",
    seed: int | None = None,
) -> ClauseResult:
    """Certify one clause; never raises for anything the target or the clause does."""
    started = time.perf_counter()
    result = _run_clause(clause, target, run_profile, device=device, seed=seed)
    declared = target.deviations.get(clause.id)
    if declared is not None:
        result = _apply_manifest(clause, result, declared, target, run_profile, device, seed)
    result.duration_s = time.perf_counter() - started
    result.title = clause.title
    return result


def _run_clause(
    clause: Clause,
    target: Target,
    run_profile: RunProfile,
    *,
    device: str,
    seed: int | None,
    exclude: Callable[[Any], bool] | None = None,
) -> ClauseResult:
    missing = [op for op in clause.ops if not target.implements(op)]
    if missing:
        return ClauseResult(clause.id, "skip", f"{NOT_IMPLEMENTED}: {', '.join(missing)}")
    if clause.applies is not None:
        reason = clause.applies(target)
        if reason:
            return ClauseResult(clause.id, "skip", reason)
    ctx = CheckContext(target=target, device=device, seed=seed or 0)
    try:
        with time_limit(run_profile.clause_time_limit_s):
            _explore(clause, ctx, run_profile, seed, exclude)
    except _TimeLimitExceeded:
        return ClauseResult(
            clause.id, "error", f"timed out after {run_profile.clause_time_limit_s:g} s"
        )
    except BaseException as raised:  # isolation: whatever happens fails this clause only
        if isinstance(raised, KeyboardInterrupt):
            raise
        failure = _first_failure(raised)
        if exclude is not None and isinstance(failure, Unsatisfiable):
            return ClauseResult(
                clause.id, "pass", "no generated case lies outside the deviation scope"
            )
        if isinstance(failure, ClauseMismatch):
            return ClauseResult(
                clause.id, "fail", failure.message, _counterexample(clause, target, failure)
            )
        if isinstance(failure, TargetError) and isinstance(failure.original, Unsupported):
            # the target declares the requested variant absent (e.g. a mode it lacks)
            return ClauseResult(clause.id, "skip", f"{NOT_IMPLEMENTED}: {failure.original}")
        if isinstance(failure, TargetError):
            return ClauseResult(
                clause.id,
                "error",
                failure.summary,
                _counterexample(clause, target, failure),
                traceback=failure.traceback,
            )
        if isinstance(failure, ClauseTimeout):
            return ClauseResult(clause.id, "error", str(failure))
        import traceback as tb

        return ClauseResult(
            clause.id,
            "error",
            f"harness error: {type(failure).__name__}: {failure}".splitlines()[0],
            traceback="".join(tb.format_exception(type(failure), failure, failure.__traceback__)),
        )
    return ClauseResult(clause.id, "pass")


def _apply_manifest(
    clause: Clause,
    result: ClauseResult,
    declared: str | Deviation,
    target: Target,
    run_profile: RunProfile,
    device: str,
    seed: int | None,
) -> ClauseResult:
    """Turn an observed, declared deviation into ``deviation``; flag stale or overreaching ones."""
    deviation = declared if isinstance(declared, Deviation) else Deviation(str(declared))
    if result.status == "pass":
        result.status = "fail"
        result.message = (
            f"stale deviation: the manifest declares {deviation.rationale!r} but the clause "
            "passed; remove the entry from the adapter's manifest"
        )
        return result
    if result.status not in ("fail", "error"):
        return result
    if deviation.scope:
        unknown = [name for name in deviation.scope if name not in SCOPES]
        if unknown:
            result.status = "error"
            result.message = (
                f"manifest names unknown deviation scope(s) {unknown}; known: {sorted(SCOPES)}"
            )
            return result
        outside = _run_clause(
            clause,
            target,
            run_profile,
            device=device,
            seed=seed,
            exclude=lambda case: in_scope(deviation.scope, case),
        )
        if outside.status in ("fail", "error"):
            outside.message = (
                f"outside the declared deviation scope ({', '.join(deviation.scope)}): "
                + outside.message
            )
            return outside
        if outside.message:
            # the scope covered every generated case: it is a whole-clause deviation in effect
            result.message += f" | note: {outside.message}"
    result.message = f"declared deviation: {deviation} | observed: {result.message}"
    result.status = "deviation"
    return result


def certify(
    target: Target,
    clauses: Iterable[Clause],
    run_profile: RunProfile,
    *,
    device: str = "cpu",
    seed: int | None = None,
    on_start: Callable[[Clause], None] | None = None,
    on_result: Callable[[ClauseResult], None] | None = None,
) -> RunReport:
    """Run every clause and collect a report."""
    results = []
    for clause in clauses:
        if on_start is not None:
            on_start(clause)
        result = run_clause(clause, target, run_profile, device=device, seed=seed)
        results.append(result)
        if on_result is not None:
            on_result(result)
    header = target.describe()
    header["profile"] = run_profile.name
    return RunReport(target=header, clauses=results)

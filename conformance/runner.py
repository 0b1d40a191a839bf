"""Run clauses against a target: isolation, declared deviations per check, severity.

One clause is explored by hypothesis once over every domain. A failure that a declared
deviation covers (its check and one of its features, CONTRACT §0a) is recorded and the
exploration goes on, so a different break in the same clause still fails; a case the
target cannot express (``Inexpressible``) or a variant it lacks (``Unsupported``) is
skipped for that case only and counted. A clause that fails is explored again restricted
to the milder domains: its severity is the mildest domain where it still fails, and its
counterexample is that domain's minimal case. Declared deviations get their severity the
same way. An exception or a hang inside the implementation fails only that clause.

``grading=False`` asks only whether the clause fails: the first uncovered failure is
returned as found (hypothesis does not shrink it, no milder domain is searched, severity is
not computed), which is what a test that asserts ``fail`` needs. A clause whose first
``max(2 x max_examples, 50)`` cases are all skipped (inexpressible, or a variant the target
lacks) stops there and is ``skip``, rather than drawing hypothesis' full budget of invalid
cases.
"""

from __future__ import annotations

import builtins
import contextlib
import dataclasses
import signal
import threading
import time
import traceback as tb
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from hypothesis import HealthCheck, Phase, Verbosity, example, given, reject, settings
from hypothesis import seed as hypothesis_seed
from hypothesis.errors import Unsatisfiable
from hypothesis.strategies import SearchStrategy

from rlconform.adapters.base import Deviation, Inexpressible, Target, Unsupported
from rlconform.adapters.base import deviation_entries as _entries_of
from rlconform.conformance import features as feats
from rlconform.conformance import fingerprint, neutral, phases
from rlconform.conformance.context import CheckContext, Observer
from rlconform.conformance.errors import (
    BindingDefect,
    ClauseMismatch,
    ClauseTimeout,
    TargetError,
)
from rlconform.conformance.generation import independent_of_imports
from rlconform.conformance.literal import to_jsonable, to_literal
from rlconform.conformance.profiles import RunProfile
from rlconform.conformance.registry import ENGINE_CHECKS, Clause
from rlconform.conformance.results import ClauseResult, DeviationResult, RunReport

NOT_IMPLEMENTED = "not implemented by target"


class _TimeLimitExceeded(BaseException):
    """Raised by the alarm; a BaseException so that hypothesis does not shrink on it."""


class _AllSkipped(BaseException):
    """Every case so far was skipped, enough of them to stop looking (a BaseException:
    hypothesis lets it through)."""


# A clause stops looking for an expressible case after this many skipped ones (none ran).
MIN_SKIPPED_BEFORE_GIVING_UP = 50


# After the limit, the alarm repeats this often until the block gives up.
_ALARM_RETRY_S = 0.05


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

    fired = done = False

    def on_alarm(signum: int, frame: Any) -> None:
        # The raise can land where Python swallows it (a gc callback, a __del__): re-arm a
        # short alarm so that it is retried, and remember it for the exit below.
        nonlocal fired
        fired = True
        if done:
            return
        signal.setitimer(signal.ITIMER_REAL, _ALARM_RETRY_S)
        raise _TimeLimitExceeded()

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    except _TimeLimitExceeded:
        raise
    except BaseException:
        if fired:  # whatever came out after the limit, the clause ran past it
            raise _TimeLimitExceeded() from None
        raise
    finally:
        while True:  # a retry alarm landing here must not leave the handler installed
            try:
                done = True
                signal.setitimer(signal.ITIMER_REAL, 0)
                signal.signal(signal.SIGALRM, previous)
                break
            except _TimeLimitExceeded:
                continue
    if fired:  # every raise was swallowed and the block still finished
        raise _TimeLimitExceeded()


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


def case_domain(clause: Clause, case: Any) -> str:
    """The CONTRACT §0a domain of ``case`` for ``clause``."""
    return feats.domain_of_features(clause.features(case))


def reproducer(clause_id: str, target: Any, case: Any) -> str:
    """A copy-pasteable snippet that replays the (shrunk) counterexample: the target by the
    spec it was loaded with (``module:attribute`` as the user passed it), and its framework
    path."""
    if isinstance(target, str):
        spec, path = target, None
    else:
        spec = getattr(target, "load_spec", None) or target.name
        path = getattr(target, "load_framework_path", None)
    extra = f", framework_path={path!r}" if path else ""
    return (
        "from rlconform.conformance.repro import replay\n"
        f"replay({clause_id!r}, {spec!r}, case={to_literal(case)}{extra})"
    )


# ---------------------------------------------------------------------------------------
# One exploration of a clause (all domains, or restricted to the milder ones).


@dataclasses.dataclass
class _Observation:
    rank: int
    features: frozenset[str]
    message: str
    case: Any


@dataclasses.dataclass
class _Failure:
    """How an exploration ended when it did not pass."""

    status: str  # "fail" or "error"
    message: str
    check: str | None = None
    case: Any = None
    detail: dict[str, Any] = dataclasses.field(default_factory=dict)
    traceback: str | None = None
    graded: bool = True  # False for harness errors and time-outs: no case to grade


class _Failures(Observer):
    """Observer of an explanation run: collects the (check, config) of every failure and
    lets each through, so that the check runs to its end."""

    def __init__(self) -> None:
        self.found: set[tuple[str, str | None]] = set()

    def tolerate(self, failure: ClauseMismatch | TargetError) -> bool:
        detail = getattr(failure, "detail", None)
        config = detail.get("config") if isinstance(detail, dict) else None
        self.found.add((failure.check or "unnamed", config))
        return True


class _Exploration(Observer):
    """Runs hypothesis over a clause, records covered failures and skipped cases."""

    def __init__(self, clause: Clause, target: Target, entries: list[Deviation], **options: Any):
        self.clause = clause
        self.target = target
        self.entries = entries
        self.options = options
        self.observed: dict[int, _Observation] = {}
        self.counts: dict[int, int] = {}
        self.observed_checks: dict[int, set[str]] = {}
        self.excused_by: dict[int, dict[str, int]] = {}  # entry -> basis -> failures
        self._explained: dict[tuple, str | None] = {}
        self._runs: dict[tuple, set[tuple[str, str | None]] | None] = {}
        self.skipped: dict[str, set[str]] = {}
        self.seen: set[str] = set()
        self.covered: set[str] = set()  # §0a features of the cases that ran
        self.ran = 0  # cases that reached the end of the check or failed it (not skipped)
        self.ctx = CheckContext(
            target=target,
            device=options["device"],
            seed=options["seed"] or 0,
            clause_id=clause.id,
            observer=self,
        )

    def tolerate(self, failure: ClauseMismatch | TargetError) -> bool:
        case_features = self.ctx.case_features
        detail = getattr(failure, "detail", None)
        config = detail.get("config") if isinstance(detail, dict) else None
        in_scope = []
        for index, entry in enumerate(self.entries):
            if not entry.covers(failure.check, case_features, config):
                continue
            in_scope.append(index)
            basis = self._explains(entry, failure.check, config, case_features)
            if basis is not None:
                self._excuse(index, basis, failure, case_features)
                return True
        together = self._explained_together(in_scope, failure.check, config, case_features)
        for index in together:
            self._excuse(
                index, "model" if self.entries[index].model else "features", failure, case_features
            )
        return bool(together)

    def _excuse(self, index: int, basis: str, failure: Any, case_features: frozenset) -> None:
        self._record(index, failure, case_features)
        by = self.excused_by.setdefault(index, {})
        by[basis] = by.get(basis, 0) + 1

    def _explained_together(
        self, in_scope: list[int], check: str | None, config: str | None, case_features: frozenset
    ) -> list[int]:
        """A case that fails for two declared reasons (NaN at padding and a hole reward, each
        its own entry; or one entry's features and another's model) passes only without
        both: the entries whose features, taken out together, make the case pass under the
        modelled entries' profile values (none: not explained). Models that disagree on a
        key explain nothing together."""
        featured = [i for i in in_scope if self.entries[i].features and not self.entries[i].model]
        modelled = [i for i in in_scope if self.entries[i].model]
        if len(featured) + len(modelled) < 2 or not featured or self._case is None:
            return []
        if check is None:
            return []
        merged: dict[str, Any] = {}
        for i in modelled:
            for key, value in self.entries[i].model:
                if merged.setdefault(key, value) != value:
                    return []
        drop = set().union(*(set(self.entries[i].features) & case_features for i in featured))
        without = neutral.without(self._case, drop, self.clause.features)
        overrides = tuple(sorted(merged.items()))
        if without is None or self._fails(without, check, config, overrides) is not False:
            return []
        return featured + modelled

    def _explains(
        self, entry: Deviation, check: str | None, config: str | None, case_features: frozenset
    ) -> str | None:
        """Why ``entry`` excuses this failure of ``check`` on the current case, or None when
        it does not (baseline.py, "what an entry excuses"): ``model`` (the check passes with
        the entry's profile values), ``features`` (the case without the entry's features
        passes), ``presence`` (the case has a structural feature of the entry, or the entry
        names none: nothing to take out)."""
        case = self._case
        if case is None or check is None:
            return "presence"
        key = (entry, check, config, repr(case))
        if key in self._explained:
            return self._explained[key]
        if entry.model:
            fails = self._fails(case, check, config, entry.model)
            basis = None if fails else "model"
        else:
            present = set(entry.features) & case_features
            removable = present & neutral.REMOVABLE
            without = neutral.without(case, removable, self.clause.features) if removable else None
            fails = None if without is None else self._fails(without, check, config)
            if fails is None:
                basis = "presence" if present or not entry.features else None
            elif fails and present - removable:
                basis = "presence"  # what is left that fails is a structural feature's
            else:
                basis = None if fails else "features"
        self._explained[key] = basis
        return basis

    def _fails(
        self, case: Any, check: str, config: str | None, overrides: tuple = ()
    ) -> bool | None:
        """Does ``check`` (under ``config``) fail on ``case`` (with profile ``overrides``)?
        None when the case cannot say (the target cannot express it, an assumption of the
        check rejects it, the harness itself fails)."""
        only = config if self.clause.area == "step" else None  # the step: that config alone
        key = (repr(case), overrides, only)
        if key not in self._runs:
            self._runs[key] = self._failures_of(case, overrides, only)
        found = self._runs[key]
        if found is None:
            return None
        if check != "runs" and any(c == "runs" for c, _ in found):
            return True  # it crashes without the entry's features: not explained
        return any(c == check and (config is None or g == config) for c, g in found)

    def probe_context(self, case: Any, observer: Observer, **options: Any) -> CheckContext:
        """A fresh context for one extra run of the clause on ``case`` (explanations,
        fingerprints): the exploration's target, device and seed, ``observer``'s verdicts."""
        ctx = CheckContext(
            target=self.target,
            device=self.ctx.device,
            seed=self.ctx.seed,
            clause_id=self.clause.id,
            observer=observer,
            **options,
        )
        ctx.case_features = self.clause.features(case)
        return ctx

    def _failures_of(
        self, case: Any, overrides: tuple, config: str | None = None
    ) -> set[tuple[str, str | None]] | None:
        """Every (check, config) that fails on ``case`` when the whole clause check runs on
        it (``("runs", None)`` when the target raises), or None (see ``_fails``); a step
        clause runs under trainer config ``config`` only when one is named."""
        from rlconform.conformance.clauses.step import reset_configs, select_configs

        probe = _Failures()
        ctx = self.probe_context(case, probe, profile_overrides=tuple(overrides))
        token = select_configs([config]) if config is not None else None
        try:
            with phases.phase("explain"):
                self.clause.check(ctx, case)
        except TargetError as failure:
            if isinstance(failure.original, (Inexpressible, Unsupported)):
                return None
            probe.found.add(("runs", None))
        except ClauseMismatch as failure:
            probe.tolerate(failure)
        except Exception:  # an assumption, a harness failure: this case cannot tell
            return None
        finally:
            if token is not None:
                reset_configs(token)
        return probe.found

    def _record(self, index: int, failure: Any, case_features: frozenset[str]) -> None:
        self.counts[index] = self.counts.get(index, 0) + 1
        self.observed_checks.setdefault(index, set()).add(failure.check or "unnamed")
        rank = feats.domain_rank(feats.domain_of_features(case_features))
        known = self.observed.get(index)
        if known is None or (rank, len(case_features)) < (known.rank, len(known.features)):
            message = getattr(failure, "message", str(failure))
            self.observed[index] = _Observation(rank, case_features, message, self._case)

    def run(self, domain: str, *, pinned: bool = True, purpose: str = "explore") -> _Failure | None:
        """Explore at ``domain`` or milder (without the pinned examples when ``pinned`` is
        False: generated failures are shrunk, pinned ones are not); the uncovered failure
        that stopped it, or None. ``purpose`` names the pass in the engine's time figures."""
        run_profile: RunProfile = self.options["run_profile"]
        try:
            with (
                phases.engine_pass(purpose),
                feats.restricted(domain),
                time_limit(run_profile.clause_time_limit_s),
            ):
                self._explore(domain, pinned)
        except _AllSkipped:
            return None
        except _TimeLimitExceeded:
            return _Failure(
                "error", f"timed out after {run_profile.clause_time_limit_s:g} s", graded=False
            )
        except BaseException as raised:  # isolation: whatever happens fails this clause only
            if isinstance(raised, KeyboardInterrupt):
                raise
            return self._failure(_first_failure(raised))
        return None

    def _failure(self, failure: BaseException) -> _Failure | None:
        if isinstance(failure, Unsatisfiable):
            return None  # every case was skipped (inexpressible) or filtered out
        if isinstance(failure, ClauseMismatch):
            return _Failure(
                "fail", failure.message, failure.check, failure.case, dict(failure.detail)
            )
        if isinstance(failure, TargetError):
            return _Failure(
                "error",
                failure.summary,
                failure.check,
                failure.case,
                traceback=failure.traceback,
            )
        if isinstance(failure, ClauseTimeout):
            return _Failure("error", str(failure), graded=False)
        if isinstance(failure, BindingDefect):
            return _Failure(
                "error",
                f"binding defect, not a finding of the target: {failure.summary}",
                traceback="".join(
                    tb.format_exception(type(failure), failure, failure.__traceback__)
                ),
                graded=False,
            )
        return _Failure(
            "error",
            f"harness error: {type(failure).__name__}: {failure}".splitlines()[0],
            traceback="".join(tb.format_exception(type(failure), failure, failure.__traceback__)),
            graded=False,
        )

    def _explore(self, domain: str, use_pinned: bool = True) -> None:
        clause, ctx = self.clause, self.ctx
        strategy = resolve_strategy(clause, self.target)
        if strategy is None:
            self._case = None
            ctx.case_features, ctx.pinned = frozenset(), True
            self._check(None)
            return
        pinned = pinned_cases(clause) if use_pinned else []
        limit = feats.domain_rank(domain)
        if limit < feats.domain_rank("hardening"):
            pinned = [c for c in pinned if feats.domain_rank(case_domain(clause, c)) <= limit]
            strategy = strategy.filter(
                lambda case: feats.domain_rank(case_domain(clause, case)) <= limit
            )

        def prop(case: Any) -> None:
            ctx.pinned = any(case is p for p in pinned)
            self._check(case)

        run_profile: RunProfile = self.options["run_profile"]
        seed = self.options["seed"]
        test: Callable[..., None] = given(strategy)(prop)
        for case in reversed(pinned):
            test = example(case)(test)
        max_examples = max(1, int(run_profile.max_examples * clause.max_examples_scale))
        self.give_up_after = max(2 * max_examples, MIN_SKIPPED_BEFORE_GIVING_UP)
        search = [Phase.explicit, Phase.reuse, Phase.generate, Phase.target]
        if self.options["grading"]:
            search.append(Phase.shrink)
        test = settings(
            max_examples=max_examples,
            phases=search,
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
        with independent_of_imports():
            test()

    def _check(self, case: Any) -> None:
        try:
            self._check_case(case)
        except (ClauseMismatch, TargetError):
            phases.switch_pass("shrink")  # hypothesis minimises what it found from here on
            raise
        self.ran += 1

    def _check_case(self, case: Any) -> None:
        ctx = self.ctx
        key = repr(case)
        self.seen.add(key)
        self._case = case
        ctx.case_features = self.clause.features(case) if case is not None else frozenset()
        self.covered |= ctx.case_features
        try:
            check_once(self.clause, ctx, case)
        except TargetError as failure:
            if isinstance(failure.original, (Inexpressible, Unsupported)):
                kind = (
                    "inexpressible"
                    if isinstance(failure.original, Inexpressible)
                    else NOT_IMPLEMENTED
                )
                reason = f"{kind}: {failure.original}".splitlines()[0]
                self.skipped.setdefault(reason, set()).add(key)
                if case is None:
                    raise
                if not self.ran and _skipped_count(self) >= self.give_up_after:
                    raise _AllSkipped() from None
                reject()
            if not self.tolerate(failure):
                raise
        except ClauseMismatch as failure:
            if not self.tolerate(failure):
                raise

    @property
    def all_skipped(self) -> bool:
        skipped = set().union(*self.skipped.values()) if self.skipped else set()
        return bool(self.seen) and skipped >= self.seen


# ---------------------------------------------------------------------------------------
# A clause: explore, grade, judge the declared deviations.


def declared_entries(target: Target, clause_id: str) -> list[Deviation]:
    """The target's declared deviations of one clause, as entries."""
    return _entries_of(target.deviations.get(clause_id))


def run_clause(
    clause: Clause,
    target: Target,
    run_profile: RunProfile,
    *,
    device: str = "cpu",
    seed: int | None = None,
    grading: bool = True,
) -> ClauseResult:
    """Certify one clause; never raises for anything the target or the clause does.

    ``grading=False``: the first failure as found, without severity (see the module doc)."""
    started = time.perf_counter()
    result = _run_clause(clause, target, run_profile, device=device, seed=seed, grading=grading)
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
    grading: bool,
) -> ClauseResult:
    entries = declared_entries(target, clause.id)
    missing = [op for op in clause.ops if not target.implements(op)]
    if missing:
        return _skipped(clause, entries, f"{NOT_IMPLEMENTED}: {', '.join(missing)}")
    if clause.applies is not None:
        reason = clause.applies(target)
        if reason:
            return _skipped(clause, entries, reason)
    problem = _invalid_entries(clause, entries)
    if problem:
        return ClauseResult(clause.id, "error", problem, graded=False)
    exploration = _Exploration(
        clause,
        target,
        entries,
        run_profile=run_profile,
        device=device,
        seed=seed,
        grading=grading,
    )
    failure = exploration.run("hardening")
    severity = None
    if not grading:
        return _result(clause, target, exploration, failure, severity)
    if failure is not None and failure.graded:
        failure, severity = _grade(clause, exploration, failure)
    _grade_entries(clause, exploration, failure)
    changed = _changed_fingerprints(exploration)
    if changed is not None and failure is None:
        failure = changed
    elif changed is not None:
        failure = dataclasses.replace(failure, message=f"{failure.message} | {changed.message}")
    return _result(clause, target, exploration, failure, severity)


def _changed_fingerprints(exploration: _Exploration) -> _Failure | None:
    """Replay each fingerprinted entry's case (conformance/fingerprint.py); a failure naming
    the entries whose case the target now answers differently, or None."""
    changed = []
    for entry in exploration.entries:
        if not entry.fingerprint:
            continue
        text, recorded = entry.fingerprint
        now, found = fingerprint_of(exploration, fingerprint.case_of(text))
        if now != recorded or not any(c in entry.checks for c, _ in found or ()):
            what = "no longer fails" if now == recorded else f"now gives {now}"
            changed.append(
                f"[{', '.join(entry.checks)}] {entry.rationale} ({what}; recorded {recorded})"
            )
    if not changed:
        return None
    return _Failure(
        "fail",
        "declared deviation changed on its recorded case (baseline fingerprint): "
        + "; ".join(changed)
        + ". The target's behaviour there is not what the entry was written for: review it "
        "(certify --write-baseline writes the new fingerprint)",
        graded=False,
    )


def fingerprint_of(
    exploration: _Exploration, case: Any
) -> tuple[str, set[tuple[str, str | None]] | None]:
    """(digest of every output the target returns while the clause runs on ``case``, the
    (check, config) pairs that fail there)."""
    probe = _Failures()
    recorded: list[Any] = []
    ctx = exploration.probe_context(case, probe, recorder=recorded)
    try:
        exploration.clause.check(ctx, case)
    except TargetError as failure:
        recorded.append(f"raised {type(failure.original).__name__}")
        probe.found.add(("runs", None))
    except ClauseMismatch as failure:
        probe.tolerate(failure)
    except Exception as exc:  # the harness cannot run the case: recorded as such
        recorded.append(f"harness {type(exc).__name__}")
        return fingerprint.digest(recorded), None
    return fingerprint.digest(recorded), probe.found


def _skipped(clause: Clause, entries: list[Deviation], reason: str) -> ClauseResult:
    """A clause that does not run: ``skip``, unless a declared deviation expects it to run
    (then that entry is stale: the operation it excused is gone)."""
    if not entries:
        return ClauseResult(clause.id, "skip", reason)
    names = "; ".join(
        f"[{', '.join(e.checks) or 'every check'}] {e.rationale}".splitlines()[0] for e in entries
    )
    return ClauseResult(
        clause.id,
        "fail",
        f"stale deviation: the manifest or baseline declares {names}, but the clause does not "
        f"run ({reason}); remove the entry",
        graded=False,
    )


def _invalid_entries(clause: Clause, entries: list[Deviation]) -> str | None:
    for entry in entries:
        unknown_checks = [c for c in entry.checks if c not in clause.all_checks]
        if unknown_checks:
            return (
                f"declared deviation names unknown check(s) {unknown_checks} of {clause.id}; "
                f"its checks: {', '.join(clause.all_checks)}"
            )
        unknown_features = feats.unknown(entry.features)
        if unknown_features:
            return (
                f"declared deviation names unknown feature(s) {unknown_features}; "
                f"known: {', '.join(feats.FEATURES)}"
            )
    return None


def _grade(clause: Clause, exploration: _Exploration, failure: _Failure) -> tuple[_Failure, str]:
    """Explore again on the milder domains: the mildest one that still fails. A failure on a
    pinned example (never shrunk) is looked for once more among generated cases of its
    domain, whose failures hypothesis shrinks to a minimal case (kept when it fails the same
    check)."""
    found = _domain_of(clause, failure)
    for domain in feats.DOMAINS[: feats.domain_rank(found)]:
        milder = exploration.run(domain, purpose="grade")
        if milder is not None and milder.graded:
            failure, found = milder, _domain_of(clause, milder)
            break
    if failure.case is not None and _is_pinned(clause, failure.case):
        shrunk = exploration.run(found, pinned=False, purpose="grade")
        same = shrunk is not None and shrunk.graded and shrunk.check == failure.check
        if same and _domain_of(clause, shrunk) == found:
            failure = shrunk
    return failure, found


def _domain_of(clause: Clause, failure: _Failure) -> str:
    return case_domain(clause, failure.case) if failure.case is not None else "nominal"


def _is_pinned(clause: Clause, case: Any) -> bool:
    text = repr(case)
    return any(text == repr(pinned) for pinned in pinned_cases(clause))


def _grade_entries(clause: Clause, exploration: _Exploration, failure: _Failure | None) -> None:
    """Observe each declared deviation at its mildest domain (re-exploring where needed).

    After a first exploration that ran to its end (no uncovered failure), every pinned
    example has run and been recorded at its own domain: the re-explorations draw generated
    cases only."""
    pinned = failure is not None
    for domain in feats.DOMAINS[:-1]:
        rank = feats.domain_rank(domain)
        wanted = [
            i
            for i, entry in enumerate(exploration.entries)
            if (i not in exploration.observed or exploration.observed[i].rank > rank)
            and _could_occur_at(entry, rank)
        ]
        if not wanted or failure is not None and not failure.graded:
            continue
        exploration.run(domain, pinned=pinned, purpose="grade")


def _could_occur_at(entry: Deviation, rank: int) -> bool:
    """A case of domain ``rank`` or milder can have one of the entry's features."""
    if not entry.features:
        return True
    return any(feats.domain_rank(feats.FEATURES[f].domain) <= rank for f in entry.features)


def _counterexample(
    clause: Clause, target: Target, failure: _Failure, exploration: _Exploration | None = None
) -> dict[str, Any] | None:
    data = {key: to_jsonable(value) for key, value in failure.detail.items()}
    if failure.case is not None:
        data["case"] = to_jsonable(failure.case)
        data["reproducer"] = reproducer(clause.id, target, failure.case)
        call = _failing_call(exploration, failure.case) if exploration is not None else None
        if call is not None:
            data["call"] = call
    return data or None


def _failing_call(exploration: _Exploration, case: Any) -> str | None:
    """The last call into the target before the clause fails on ``case`` (the call whose
    output broke it, or that raised), as pasteable Python (conformance/call_text.py)."""
    from rlconform.conformance.call_text import render

    ctx = exploration.probe_context(case, Observer(), calls=[])
    try:
        with phases.phase("explain"):
            exploration.clause.check(ctx, case)
    except (ClauseMismatch, TargetError):
        pass
    except Exception:  # an assumption or a harness failure: no call to show
        return None
    else:
        return None  # the case passes when replayed alone: no call to blame
    if not ctx.calls:
        return None
    op, args, kwargs = ctx.calls[-1]
    return render(exploration.target, op, args, kwargs)


def _result(
    clause: Clause,
    target: Target,
    exploration: _Exploration,
    failure: _Failure | None,
    severity: str | None,
) -> ClauseResult:
    """The clause's verdict, with how many distinct cases ran and the §0a features they
    covered (what a rerun needs to know, for a passing clause too)."""
    result = _verdict(clause, target, exploration, failure, severity)
    result.cases = len(exploration.seen)
    result.covered_features = sorted(exploration.covered)
    return result


def _verdict(
    clause: Clause,
    target: Target,
    exploration: _Exploration,
    failure: _Failure | None,
    severity: str | None,
) -> ClauseResult:
    deviations = [
        _deviation_result(i, entry, exploration) for i, entry in enumerate(exploration.entries)
    ]
    skipped = _skipped_note(exploration)
    if failure is not None:
        message = failure.message
        if failure.check:
            message = f"{clause.id}/{failure.check}: {message}"
        if deviations:
            message += " | also declared: " + "; ".join(d.summary for d in deviations)
        features = sorted(clause.features(failure.case)) if failure.case is not None else []
        hint = explaining_profile(exploration, failure) if failure.status == "fail" else {}
        if hint:
            values = ", ".join(f"{k}={v!r}" for k, v in hint.items())
            message += f" | the minimal case passes with profile {values}"
        return ClauseResult(
            clause.id,
            failure.status,
            message + skipped,
            _counterexample(clause, target, failure, exploration),
            traceback=failure.traceback,
            severity=severity,
            features=features,
            check=failure.check,
            deviations=deviations,
            skipped_cases=_skipped_count(exploration),
            graded=failure.graded,
            profile_hint=hint,
        )
    observed = any(d.observed for d in deviations)
    if exploration.all_skipped and not observed:
        reasons = "; ".join(sorted(exploration.skipped))
        return _skipped(clause, exploration.entries, f"every case skipped: {reasons}")
    if exploration.seen and not exploration.ctx.returned and not observed:
        # Nothing was checked: the clause set aside every call that raised (adv.invariants
        # leaves a raising estimator to its own clause). Never a pass.
        return _skipped(
            clause,
            exploration.entries,
            "no case was checked: every call to the target raised (the operations' own "
            "clauses report it)" + skipped,
        )
    stale = [d for d in deviations if not d.observed]
    if stale:
        names = "; ".join(d.summary for d in stale)
        return ClauseResult(
            clause.id,
            "fail",
            f"stale deviation: the manifest or baseline declares {names}, but it was not "
            "observed; remove the entry" + skipped,
            deviations=deviations,
            skipped_cases=_skipped_count(exploration),
            graded=False,
        )
    if deviations:
        best = min(deviations, key=lambda d: feats.domain_rank(d.severity or "hardening"))
        message = "declared deviation: " + " || ".join(
            f"{d.summary} | observed: {d.observed_message}" for d in deviations
        )
        return ClauseResult(
            clause.id,
            "deviation",
            message + skipped,
            {
                "case": to_jsonable(best.case),
                "reproducer": reproducer(clause.id, target, best.case),
            }
            if best.case is not None
            else None,
            severity=best.severity,
            features=list(best.features),
            check=best.checks[0] if best.checks else None,
            deviations=deviations,
            skipped_cases=_skipped_count(exploration),
        )
    return ClauseResult(
        clause.id, "pass", skipped.lstrip(" |"), skipped_cases=_skipped_count(exploration)
    )


def explaining_profile(exploration: _Exploration, failure: _Failure) -> dict[str, Any]:
    """A legitimate profile value (conformance/profile_values.py) under which the failure's
    check passes on its case, or {}: the report says so before suggesting a baseline entry,
    and ``--write-baseline`` writes it as the entry's model."""
    from rlconform.conformance.profile_values import alternatives

    if failure.case is None or not failure.check or failure.check in ENGINE_CHECKS:
        return {}
    config = failure.detail.get("config") if isinstance(failure.detail, dict) else None
    for key, value in alternatives(exploration.clause, exploration.target.profile):
        if exploration._fails(failure.case, failure.check, config, ((key, value),)) is False:
            return {key: value}
    return {}


def _deviation_result(index: int, entry: Deviation, exploration: _Exploration) -> DeviationResult:
    observation = exploration.observed.get(index)
    return DeviationResult(
        rationale=entry.rationale,
        checks=list(entry.checks),
        declared_features=list(entry.features),
        declared_configs=list(entry.configs),
        declared_model=dict(entry.model),
        declared_composition=entry.composition,
        observed=observation is not None,
        count=exploration.counts.get(index, 0),
        severity=feats.DOMAINS[observation.rank] if observation else None,
        features=sorted(observation.features) if observation else [],
        observed_message=observation.message.splitlines()[0] if observation else "",
        case=observation.case if observation else None,
        observed_checks=sorted(exploration.observed_checks.get(index, ())),
        excused_by=dict(sorted(exploration.excused_by.get(index, {}).items())),
    )


def _skipped_count(exploration: _Exploration) -> int:
    return len(set().union(*exploration.skipped.values())) if exploration.skipped else 0


def _skipped_note(exploration: _Exploration) -> str:
    if not exploration.skipped:
        return ""
    count = _skipped_count(exploration)
    reasons = "; ".join(
        f"{len(keys)} {reason}" for reason, keys in sorted(exploration.skipped.items())
    )
    return f" | {count} of {len(exploration.seen)} cases skipped ({reasons})"


MAX_BREAKS_PER_CLAUSE = 8


def discover_breaks(
    clause: Clause,
    target: Target,
    run_profile: RunProfile,
    *,
    device: str = "cpu",
    seed: int | None = None,
) -> list[dict[str, Any]]:
    """Every break of one clause, as baseline rows: the declared entries that are observed,
    then each new failure in turn (declared provisionally, scoped by its check and the
    features of its severity, and the clause run again), until the clause runs clean."""
    from rlconform.conformance.results import cause_features

    declared = declared_entries(target, clause.id)
    entries, rows = list(declared), []
    saved = target.deviations
    try:
        for _ in range(MAX_BREAKS_PER_CLAUSE):
            target.deviations = {**saved, clause.id: list(entries)}
            result = run_clause(clause, target, run_profile, device=device, seed=seed)
            if result.status not in ("fail", "error") or not result.graded or not result.check:
                break
            observed = result.message.split(": ", 1)[-1].splitlines()[0].split(" | ")[0]
            if result.profile_hint:
                entry = Deviation(observed, (result.check,), model=result.profile_hint)
            else:
                entry = Deviation(observed, (result.check,), cause_features(result))
            if entry in entries:
                break
            entries.append(entry)
    finally:
        target.deviations = saved
    pins = _fingerprints(clause, target, run_profile, result, device, seed)
    for d, pin in zip(result.deviations, pins):
        if d.observed:
            rows.append(
                {
                    "clause": clause.id,
                    "checks": d.checks or d.observed_checks,
                    "features": d.declared_features,
                    "configs": d.declared_configs,
                    "model": d.declared_model,
                    "composition": d.declared_composition,
                    "rationale": d.rationale,
                    "severity": d.severity,
                    "observed": d.observed_message,
                    "fingerprint": pin,
                }
            )
    return rows


def _fingerprints(
    clause: Clause,
    target: Target,
    run_profile: RunProfile,
    result: ClauseResult,
    device: str,
    seed: int | None,
) -> list[tuple[str, str] | tuple[()]]:
    """Per deviation of ``result``: a fingerprint of its minimal case when the entry names
    neither features nor a model (it would pin nothing else), else ()."""
    exploration = _Exploration(
        clause, target, [], run_profile=run_profile, device=device, seed=seed, grading=False
    )
    pins: list[tuple[str, str] | tuple[()]] = []
    for d in result.deviations:
        if d.declared_features or d.declared_model or d.case is None:
            pins.append(())
            continue
        text = fingerprint.case_text(d.case)
        now, _ = fingerprint_of(exploration, fingerprint.case_of(text))
        pins.append((text, now))
    return pins


def certify(
    target: Target,
    clauses: Iterable[Clause],
    run_profile: RunProfile,
    *,
    device: str = "cpu",
    seed: int | None = None,
    on_start: Callable[[Clause], None] | None = None,
    on_result: Callable[[ClauseResult], None] | None = None,
    trainer_configs: Sequence[str] | None = None,
) -> RunReport:
    """Run every clause under the selected trainer configs (None: every declared one), give
    each finding its consequence (CONTRACT §0b) and collect a report."""
    from rlconform.conformance import consequence, trainer_config
    from rlconform.conformance.clauses.step import reset_configs, select_configs

    clauses = list(clauses)
    configs = trainer_config.select(target, trainer_configs)
    token = select_configs([c.name for c in configs] if trainer_configs else None)
    from rlconform.conformance.run_record import run_record

    run = run_record(target, run_profile, device=device, seed=seed)
    try:
        _prepare(clauses, target, device)
        results = []
        for clause in clauses:
            if on_start is not None:
                on_start(clause)
            result = run_clause(clause, target, run_profile, device=device, seed=seed)
            results.append(result)
            if on_result is not None:
                on_result(result)
        header = target.describe()
        # how to load the target again (rlconform replay REPORT.json CLAUSE)
        header.setdefault("spec", getattr(target, "load_spec", None) or target.name)
        if getattr(target, "load_framework_path", None):
            header["spec_framework_path"] = target.load_framework_path
        header["profile"] = run_profile.name
        report = RunReport(target=header, clauses=results, bindings=binding_rows(target, results))
        report.run = run
        report.configs = {c.name: c.as_json() for c in configs}
        with phases.engine_pass("grade"):
            consequence.assess(
                report,
                target,
                clauses,
                configs,
                device=device,
                seed=seed,
                examples=consequence.search_examples(run_profile.max_examples),
            )
    finally:
        reset_configs(token)
    return report


def _prepare(clauses: list[Clause], target: Target, device: str) -> None:
    """Let the clauses that will run start their background work (``Clause.prepare``)."""
    for clause in clauses:
        if clause.prepare is None or not all(target.implements(op) for op in clause.ops):
            continue
        if clause.applies is not None and clause.applies(target):
            continue
        with contextlib.suppress(Exception):
            clause.prepare(target, device)


def binding_rows(target: Target, results: Iterable[ClauseResult]) -> list[dict[str, Any]]:
    """One row per (clause, operation) the run called: the framework function(s) behind the
    operation and the trainer path that runs them, from the target's ``bindings``."""
    from rlconform.conformance.registry import load_all

    clauses = load_all()
    rows = []
    for result in results:
        if result.status == "skip":
            continue
        for op in clauses[result.id].ops or _probed_ops(result.id, target):
            binding = target.bindings.get(op)
            if binding is None:
                continue
            functions = binding.get("functions", ())
            rows.append(
                {
                    "clause": result.id,
                    "op": op,
                    "functions": [functions] if isinstance(functions, str) else list(functions),
                    "path": binding.get("path", ""),
                }
            )
    return rows


def _probed_ops(clause_id: str, target: Target) -> list[str]:
    """Operations a clause without fixed ``ops`` calls (adv.invariants, purity.*)."""
    if clause_id == "adv.invariants":
        from rlconform.conformance.clauses.advantage import ESTIMATORS

        return [spec.op for spec in ESTIMATORS.values() if target.implements(spec.op)]
    if clause_id.startswith("purity."):
        from rlconform.conformance.clauses.purity import PROBES

        return [op for op in PROBES if target.implements(op)]
    return []

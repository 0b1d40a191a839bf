"""Result records: one per clause, and the run summary (the JSON report's schema).

JSON clause objects: ``id``, ``status``, ``message``, ``counterexample`` (the original
schema), plus ``severity`` (``nominal`` | ``edge`` | ``hardening``: the mildest CONTRACT
§0a domain where the clause fails or deviates; null when it passes, is skipped, or the
failure is not about a case: a stale entry, a harness error), ``features`` (the feature ids
of that minimal case), ``check`` (the failing assertion), ``deviations`` (each declared
entry: checks, features, rationale, whether and how often it was observed, its severity)
and ``skipped_cases`` (cases the target could not express). ``summary`` keeps a count per
status and gains ``by_severity``: per severity, the number of clauses that fail, error or
deviate at it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from rlconform.conformance.features import DOMAINS, domain_rank

STATUSES = ("pass", "fail", "deviation", "skip", "error")
BROKEN = ("fail", "error", "deviation")


@dataclasses.dataclass
class DeviationResult:
    """One declared deviation entry of a clause, as observed in the run."""

    rationale: str
    checks: list[str]
    declared_features: list[str]
    observed: bool
    count: int = 0
    severity: str | None = None
    features: list[str] = dataclasses.field(default_factory=list)
    observed_message: str = ""
    case: Any = None
    observed_checks: list[str] = dataclasses.field(default_factory=list)
    consequence: str | None = None
    configs: list[str] = dataclasses.field(default_factory=list)
    basis: str = ""
    declared_configs: list[str] = dataclasses.field(default_factory=list)
    # how the failures were excused: "features" (the case without the entry's features
    # passes), "model" (it passes with the entry's profile values), "presence" (structural)
    excused_by: dict[str, int] = dataclasses.field(default_factory=dict)
    declared_model: dict[str, Any] = dataclasses.field(default_factory=dict)
    # a step entry's break between operations (baseline ``composition``)
    declared_composition: bool = False

    @property
    def summary(self) -> str:
        scope = ", ".join(self.checks) or "every check"
        if self.declared_features:
            scope += " on " + ", ".join(self.declared_features)
        if self.declared_configs:
            scope += " under " + ", ".join(self.declared_configs)
        seen = f"observed {self.count}x, {self.severity}" if self.observed else "not observed"
        return f"[{scope}] {self.rationale} ({seen})"

    def as_json(self) -> dict[str, Any]:
        return {
            "checks": list(self.checks),
            "features": list(self.declared_features),
            "rationale": self.rationale,
            "observed": self.observed,
            "count": self.count,
            "severity": self.severity,
            "observed_features": list(self.features),
            "observed_message": self.observed_message,
            "consequence": self.consequence,
            "configs": list(self.configs),
            "consequence_basis": self.basis,
            "excused_by": dict(self.excused_by),
            "model": dict(self.declared_model),
            "declared_configs": list(self.declared_configs),
            "composition": self.declared_composition,
        }


@dataclasses.dataclass
class ClauseResult:
    id: str
    status: str
    message: str = ""
    counterexample: dict[str, Any] | None = None
    traceback: str | None = None
    duration_s: float = 0.0
    title: str = ""
    severity: str | None = None
    features: list[str] = dataclasses.field(default_factory=list)
    check: str | None = None
    deviations: list[DeviationResult] = dataclasses.field(default_factory=list)
    skipped_cases: int = 0
    graded: bool = True
    consequence: str | None = None
    configs: list[str] = dataclasses.field(default_factory=list)
    consequence_basis: str = ""
    # the undeclared failure's own consequence (``consequence`` is the clause's most serious
    # one, declared deviations included)
    failure_consequence: str | None = None
    failure_configs: list[str] = dataclasses.field(default_factory=list)
    failure_basis: str = ""
    # a legitimate profile value under which the minimal case passes (runner.explaining_profile)
    profile_hint: dict[str, Any] = dataclasses.field(default_factory=dict)
    # distinct cases the clause ran (every phase: exploration, grading, replay) and the §0a
    # features they covered
    cases: int = 0
    covered_features: list[str] = dataclasses.field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "status": self.status,
            "message": self.message,
            "counterexample": self.counterexample,
            "severity": self.severity,
            "features": list(self.features),
            "check": self.check,
            "deviations": [d.as_json() for d in self.deviations],
            "skipped_cases": self.skipped_cases,
            "consequence": self.consequence,
            "configs": list(self.configs),
            "consequence_basis": self.consequence_basis,
            "failure_consequence": self.failure_consequence,
            "failure_configs": list(self.failure_configs),
            "failure_basis": self.failure_basis,
            "profile_hint": dict(self.profile_hint),
            "cases": self.cases,
            "covered_features": list(self.covered_features),
        }

    def fails_at(self, fail_on: str, consequences: frozenset[str] | None = None) -> bool:
        """True when this result sets exit code 1 under ``--fail-on fail_on`` and
        ``--fail-on-consequence``: a fail or error at that severity or a more serious one, or
        one no case grades (a stale entry, a harness error, a time-out), whose consequence is
        among ``consequences`` (None: every one); a failure whose consequence could not be
        established always counts."""
        if self.status not in ("fail", "error"):
            return False
        own = self.failure_consequence if self.check is not None else self.consequence
        if consequences is not None and own is not None:
            if own not in consequences:
                return False
        if self.severity is None:
            return True
        return domain_rank(self.severity) <= domain_rank(fail_on)


def cause_features(result: ClauseResult) -> tuple[str, ...]:
    """The features of a result's minimal case in the domain of its severity."""
    from rlconform.conformance.features import FEATURES

    if result.severity is None:
        return tuple(sorted(result.features))
    return tuple(sorted(f for f in result.features if FEATURES[f].domain == result.severity))


@dataclasses.dataclass
class RunReport:
    target: dict[str, Any]
    clauses: list[ClauseResult]
    fail_on: str = "hardening"
    bindings: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    configs: dict[str, Any] = dataclasses.field(default_factory=dict)
    fail_on_consequence: frozenset[str] | None = None
    run: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def summary(self) -> dict[str, int]:
        counts = {status: 0 for status in STATUSES}
        for result in self.clauses:
            counts[result.status] += 1
        return counts

    @property
    def by_severity(self) -> dict[str, dict[str, int]]:
        counts = {domain: {status: 0 for status in BROKEN} for domain in DOMAINS}
        for result in self.clauses:
            if result.status in BROKEN and result.severity in counts:
                counts[result.severity][result.status] += 1
        return counts

    def root_causes(self) -> list[tuple[tuple[str, ...], str | None, list[ClauseResult]]]:
        """Broken clauses grouped by the cause of their severity: the features of their
        minimal case that belong to its severity's domain (a hardening case's NaN padding,
        not the mask holes it also has). ``(features, severity, clauses)``, most serious
        first."""
        groups: dict[tuple[str, ...], list[ClauseResult]] = {}
        for result in self.clauses:
            if result.status in BROKEN and result.graded:
                groups.setdefault(cause_features(result), []).append(result)
        rows = []
        for key, members in groups.items():
            ranks = [domain_rank(r.severity) for r in members if r.severity]
            rows.append((key, DOMAINS[min(ranks)] if ranks else None, members))
        rows.sort(key=lambda row: (domain_rank(row[1]) if row[1] else 3, len(row[0]), row[0]))
        return rows

    @property
    def nothing_ran(self) -> bool:
        """Every clause was skipped: the run certified nothing."""
        return all(r.status == "skip" for r in self.clauses)

    @property
    def exit_code(self) -> int:
        if self.nothing_ran:
            return 1
        fails = (r.fails_at(self.fail_on, self.fail_on_consequence) for r in self.clauses)
        return 1 if any(fails) else 0

    def as_json(self) -> dict[str, Any]:
        summary: dict[str, Any] = dict(self.summary)
        summary["by_severity"] = self.by_severity
        from rlconform.conformance.consequence import by_consequence

        summary["by_consequence"] = by_consequence(self.clauses)
        data = {
            "target": dict(self.target),
            "clauses": [r.as_json() for r in self.clauses],
            "summary": summary,
        }
        if self.configs:
            data["configs"] = {name: dict(cfg) for name, cfg in self.configs.items()}
        if self.bindings:
            data["bindings"] = [dict(row) for row in self.bindings]
        if self.run:
            data["run"] = dict(self.run)
        return data

"""What an audit found: violations per clause, their features and severity, the exit code."""

from __future__ import annotations

import dataclasses
from typing import Any

from rlconform.conformance.features import DOMAINS, domain_of_features, domain_rank


@dataclasses.dataclass(frozen=True)
class Violation:
    """One sample (or the batch, ``row is None``) where the recorded value breaks a clause.

    ``what`` names the recorded field, ``token`` the worst position (None for a scalar),
    ``mismatched`` / ``positions`` how many positions of the sample disagree out of how
    many were compared. ``split_group``: the sample's group is incomplete in this dump
    (a warning, not a violation).
    """

    clause: str
    check: str
    row: int | None
    sample: str
    what: str
    token: int | None
    expected: float | None
    recorded: float | None
    allowed: float | None
    mismatched: int
    positions: int
    features: frozenset[str]
    note: str = ""
    split_group: bool = False

    @property
    def severity(self) -> str:
        return domain_of_features(self.features)

    def describe(self) -> str:
        """One line: the check, where, expected vs recorded (6 significant digits)."""
        what = self.what if self.what == self.check else f"{self.check}: {self.what}"
        where = f" t={self.token}" if self.token is not None else ""
        if self.expected is None:
            values = self.note
        else:
            values = f"expected {self.expected:.6g}, recorded {self.recorded:.6g}"
            if self.allowed is not None and self.recorded is not None:
                diff = abs(self.expected - self.recorded)
                if diff == diff:
                    values += f" (|diff| {diff:.3g} > allowed {self.allowed:.3g})"
            if self.note:
                values += f"; {self.note}"
        count = f" [{self.mismatched} of {self.positions} positions]" if self.positions > 1 else ""
        return f"{what}{where}: {values}{count}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "clause": self.clause,
            "check": self.check,
            "row": self.row,
            "sample": self.sample,
            "what": self.what,
            "token": self.token,
            "expected": self.expected,
            "recorded": self.recorded,
            "allowed": self.allowed,
            "mismatched": self.mismatched,
            "positions": self.positions,
            "features": sorted(self.features),
            "severity": self.severity,
            "note": self.note,
            "split_group": self.split_group,
        }


@dataclasses.dataclass
class ClauseAudit:
    """The audit of one clause: ``pass``, ``fail``, ``skip`` (not checkable from the keys
    present, with the reason) or ``error`` (it could not be checked on this input)."""

    clause: str
    status: str = "pass"
    detail: str = ""
    samples: int = 0
    violations: list[Violation] = dataclasses.field(default_factory=list)
    warnings: list[str] = dataclasses.field(default_factory=list)

    def add(self, violations: list[Violation]) -> None:
        self.violations.extend(violations)
        if any(not v.split_group for v in violations):
            self.status = "fail"

    @property
    def counted(self) -> list[Violation]:
        return [v for v in self.violations if not v.split_group]

    def by_sample(self, split_group: bool = False) -> list[list[Violation]]:
        """The violations grouped by sample: the most ordinary samples first (nominal, then
        edge, then hardening: the ones that change training numbers in normal runs), the
        batch before rows, then by row."""
        groups: dict[int | None, list[Violation]] = {}
        for v in self.violations:
            if v.split_group == split_group:
                groups.setdefault(v.row, []).append(v)

        def order(row: int | None) -> tuple[int, int]:
            return domain_rank(groups[row][0].severity), -1 if row is None else row

        return [groups[row] for row in sorted(groups, key=order)]

    @property
    def severity(self) -> str | None:
        """The mildest domain of any violating sample (CONTRACT §0a), None when clean."""
        counted = self.counted
        if not counted:
            return None
        return DOMAINS[min(domain_rank(v.severity) for v in counted)]

    def as_dict(self, max_report: int) -> dict[str, Any]:
        return {
            "clause": self.clause,
            "status": self.status,
            "detail": self.detail,
            "samples": self.samples,
            "severity": self.severity,
            "violating_samples": len({v.row for v in self.counted}),
            "violations": [_sample_dict(found) for found in self.by_sample()[:max_report]],
            "split_group_warnings": [
                _sample_dict(found) for found in self.by_sample(split_group=True)[:max_report]
            ],
            "warnings": list(self.warnings),
        }


def _sample_dict(found: list[Violation]) -> dict[str, Any]:
    """One violating sample: where, its features and severity, and each failed check."""
    first = found[0]
    return {
        "row": first.row,
        "sample": first.sample,
        "features": sorted(first.features),
        "severity": first.severity,
        "checks": [v.as_dict() for v in found],
    }


@dataclasses.dataclass
class AuditReport:
    source: str
    container: str
    profile: str
    samples: int
    tokens: int
    width: int
    config: dict[str, Any]
    keys: list[str]
    ignored: list[str]
    notes: list[str]
    clauses: list[ClauseAudit]
    seconds: float = 0.0
    fail_on: str = "hardening"

    def failing(self) -> list[ClauseAudit]:
        """Clauses with a violation at the --fail-on severity or a more serious one."""
        limit = domain_rank(self.fail_on)
        return [
            c for c in self.clauses if c.severity is not None and domain_rank(c.severity) <= limit
        ]

    @property
    def exit_code(self) -> int:
        """0 clean, 1 violations (honouring ``fail_on``), 2 a clause could not be checked."""
        if self.failing():
            return 1
        if any(c.status == "error" for c in self.clauses):
            return 2
        return 0

    def by_severity(self) -> dict[str, int]:
        counts = dict.fromkeys(DOMAINS, 0)
        for c in self.clauses:
            if c.severity is not None:
                counts[c.severity] += 1
        return counts

    def as_dict(self, max_report: int) -> dict[str, Any]:
        return {
            "source": self.source,
            "container": self.container,
            "profile": self.profile,
            "samples": self.samples,
            "tokens": self.tokens,
            "width": self.width,
            "config": self.config,
            "keys": self.keys,
            "ignored": self.ignored,
            "notes": self.notes,
            "fail_on": self.fail_on,
            "exit_code": self.exit_code,
            "seconds": round(self.seconds, 3),
            "summary": {
                "pass": sum(c.status == "pass" for c in self.clauses),
                "fail": sum(c.status == "fail" for c in self.clauses),
                "skip": sum(c.status == "skip" for c in self.clauses),
                "error": sum(c.status == "error" for c in self.clauses),
                "by_severity": self.by_severity(),
            },
            "clauses": [c.as_dict(max_report) for c in self.clauses],
        }

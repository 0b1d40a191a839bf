"""Result records: one per clause, and the run summary (the JSON report's schema)."""

from __future__ import annotations

import dataclasses
from typing import Any

STATUSES = ("pass", "fail", "deviation", "skip", "error")


@dataclasses.dataclass
class ClauseResult:
    id: str
    status: str
    message: str = ""
    counterexample: dict[str, Any] | None = None
    traceback: str | None = None
    duration_s: float = 0.0
    title: str = ""

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "status": self.status,
            "message": self.message,
            "counterexample": self.counterexample,
        }


@dataclasses.dataclass
class RunReport:
    target: dict[str, str]
    clauses: list[ClauseResult]

    @property
    def summary(self) -> dict[str, int]:
        counts = {status: 0 for status in STATUSES}
        for result in self.clauses:
            counts[result.status] += 1
        return counts

    @property
    def exit_code(self) -> int:
        return 1 if any(r.status in ("fail", "error") for r in self.clauses) else 0

    def as_json(self) -> dict[str, Any]:
        return {
            "target": dict(self.target),
            "clauses": [r.as_json() for r in self.clauses],
            "summary": self.summary,
        }

"""The JSON report: ``{"target", "clauses": [{"id", "status", "message", "counterexample"}], "summary"}``."""

from __future__ import annotations

import json
from pathlib import Path

from rlconform.conformance.results import RunReport


def render(report: RunReport) -> str:
    return json.dumps(report.as_json(), indent=2, sort_keys=False, allow_nan=False) + "\n"


def write(report: RunReport, path: str | Path) -> None:
    Path(path).write_text(render(report), encoding="utf-8")

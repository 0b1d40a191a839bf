"""What changes training (CONTRACT §0b): the findings a report opens with.

One row per finding (a failing clause, or an observed deviation entry) whose consequence
is ``update``, ``crash`` or ``state``: clause, check, severity, configs, the first diverging
stage (the failing check) and how the consequence was established; then the counts of the
other findings by consequence.
"""

from __future__ import annotations

from typing import Any

from rlconform.conformance.consequence import CONSEQUENCES, TRAINING, rank
from rlconform.conformance.results import BROKEN, RunReport


def findings(report: RunReport) -> list[dict[str, Any]]:
    """Every finding of the run, most serious consequence first."""
    rows = []
    for result in report.clauses:
        if result.status not in BROKEN:
            continue
        if result.status in ("fail", "error") and result.check is not None:
            rows.append(
                {
                    "clause": result.id,
                    "check": result.check,
                    "status": result.status,
                    "severity": result.severity,
                    "consequence": result.failure_consequence,
                    "configs": list(result.failure_configs),
                    "basis": result.failure_basis,
                    "declared": False,
                }
            )
        for entry in result.deviations:
            if entry.observed:
                rows.append(
                    {
                        "clause": result.id,
                        "check": ", ".join(entry.observed_checks or entry.checks) or None,
                        "status": "deviation",
                        "severity": entry.severity,
                        "consequence": entry.consequence,
                        "configs": list(entry.configs),
                        "basis": entry.basis,
                        "declared": True,
                    }
                )
    rows.sort(key=lambda r: (rank(r["consequence"]), r["clause"]))
    return rows


def changes_training(report: RunReport) -> list[dict[str, Any]]:
    return [r for r in findings(report) if r["consequence"] in TRAINING]


def grouped_counts(report: RunReport) -> list[tuple[str, int]]:
    counts: dict[str, int] = {}
    for row in findings(report):
        key = row["consequence"] or "unmeasured"
        counts[key] = counts.get(key, 0) + 1
    order = [*CONSEQUENCES, "unmeasured"]
    return [(k, counts[k]) for k in order if k in counts]


def markdown_lines(report: RunReport) -> list[str]:
    rows = changes_training(report)
    lines = ["## What changes training", ""]
    if not report.configs:
        lines += [
            "The target has no step binding: consequences other than the definitional ones "
            "(metric, perf, purity, crash) are not measured (`unmeasured`).",
            "",
        ]
    if rows:
        lines += [
            "| consequence | clause / check | severity | configs | how established |",
            "|---|---|---|---|---|",
        ]
        for r in rows:
            declared = " (declared)" if r["declared"] else ""
            lines.append(
                f"| {r['consequence']} | `{r['clause']}/{r['check']}`{declared} | "
                f"{r['severity'] or '-'} | {', '.join(r['configs']) or '-'} | {r['basis']} |"
            )
    else:
        lines.append("No finding changes the update, crashes the step or corrupts its state.")
    counts = grouped_counts(report)
    if counts:
        lines += ["", "All findings by consequence: " + ", ".join(f"{k} {n}" for k, n in counts)]
    return lines

"""An audit report as console text, JSON and Markdown."""

from __future__ import annotations

import json
from pathlib import Path

from rlconform.audit.results import AuditReport, ClauseAudit, Violation

_MARK = {"pass": "PASS", "fail": "FAIL", "skip": "SKIP", "error": "ERROR"}


def _sample_lines(found: list[Violation], prefix: str = "") -> list[str]:
    """A violating sample: its name, features and severity, then one line per check."""
    first = found[0]
    features = ", ".join(sorted(first.features)) or "none"
    lines = [f"        - {prefix}{first.sample} · features: {features} · {first.severity}"]
    lines += [f"            {v.describe()}" for v in found]
    return lines


def _clause_lines(c: ClauseAudit, max_report: int) -> list[str]:
    head = f"  {_MARK[c.status]:<5} {c.clause:<32}"
    samples = c.by_sample()
    if c.status == "fail":
        head += f" [{c.severity}] {len(samples)} violating sample(s) of {c.samples}"
    elif c.status == "pass" and c.samples:
        head += f" {c.samples} samples"
    lines = [head.rstrip()]
    if c.detail:
        lines.append(f"        {c.detail}")
    for found in samples[:max_report]:
        lines.extend(_sample_lines(found))
    if len(samples) > max_report:
        lines.append(f"        ... {len(samples) - max_report} more sample(s) (--max-report)")
    for w in c.warnings:
        lines.append(f"        warning: {w}")
    for found in c.by_sample(split_group=True)[:max_report]:
        lines.extend(_sample_lines(found, prefix="(split group, warning) "))
    return lines


def text(report: AuditReport, max_report: int) -> str:
    """The console report."""
    lines = [
        f"rlconform audit {report.source}",
        f"  {report.container} · profile {report.profile} · {report.samples} samples · "
        f"{report.tokens} response tokens (width {report.width})",
    ]
    if report.config:
        config = ", ".join(f"{k}={v!r}" for k, v in report.config.items())
        lines.append(f"  config: {config}")
    lines.append(f"  keys: {', '.join(report.keys)}")
    if report.ignored:
        lines.append(f"  not read by any audited clause: {', '.join(report.ignored)}")
    for note in report.notes:
        lines.append(f"  note: {note}")
    lines.append("")
    for c in report.clauses:
        lines.extend(_clause_lines(c, max_report))
    lines.append("")
    counts = report.by_severity()
    failing = [c for c in report.clauses if c.status == "fail"]
    if failing:
        per = ", ".join(f"{n} {d}" for d, n in counts.items())
        lines.append(
            f"{len(failing)} clause(s) violated ({per}); exit {report.exit_code} "
            f"(--fail-on {report.fail_on})"
        )
    elif any(c.status == "error" for c in report.clauses):
        lines.append(f"some clauses could not be checked; exit {report.exit_code}")
    else:
        checked = sum(c.status == "pass" for c in report.clauses)
        lines.append(f"clean: {checked} clause(s) checked, no violation; exit 0")
    return "\n".join(lines)


def write_json(report: AuditReport, path: str | Path, max_report: int) -> None:
    Path(path).write_text(json.dumps(report.as_dict(max_report), indent=2) + "\n")


def markdown(report: AuditReport, max_report: int) -> str:
    lines = [
        f"# Audit of `{report.source}`",
        "",
        f"Profile `{report.profile}`, {report.samples} samples, {report.tokens} response "
        f"tokens, exit code {report.exit_code} (`--fail-on {report.fail_on}`).",
        "",
        "| clause | status | severity | violating samples | detail |",
        "|---|---|---|---|---|",
    ]
    for c in report.clauses:
        samples = len({v.row for v in c.counted})
        lines.append(
            f"| `{c.clause}` | {c.status} | {c.severity or ''} | {samples or ''} | "
            f"{c.detail.replace('|', '/')} |"
        )
    for c in report.clauses:
        if not c.counted:
            continue
        lines += ["", f"## `{c.clause}` ({c.severity})", ""]
        for found in c.by_sample()[:max_report]:
            first = found[0]
            features = ", ".join(sorted(first.features)) or "none"
            lines.append(f"- {first.sample} (features: {features}; {first.severity})")
            lines += [f"  - {v.describe().replace('|', '/')}" for v in found]
    for note in report.notes:
        lines += ["", f"> note: {note}"]
    return "\n".join(lines) + "\n"


def write_markdown(report: AuditReport, path: str | Path, max_report: int) -> None:
    Path(path).write_text(markdown(report, max_report))

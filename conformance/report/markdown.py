"""Markdown report that fits a CI step summary: header, counts per severity, root causes,
one row per clause, then the counterexamples and the declared deviations."""

from __future__ import annotations

from pathlib import Path

from rlconform.conformance.features import FEATURES
from rlconform.conformance.report import training
from rlconform.conformance.results import BROKEN, RunReport

_ICONS = {
    "pass": "pass",
    "fail": "**FAIL**",
    "deviation": "deviation",
    "skip": "skip",
    "error": "**ERROR**",
}

_MEANING = {
    "nominal": "breaks on ordinary batches",
    "edge": "breaks only on rare but reachable inputs",
    "hardening": "not hardened against inputs a correct upstream never produces",
}


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _header(report: RunReport) -> list[str]:
    target = report.target
    lines = [f"- target: `{target['name']}` version `{target['version']}`"]
    for key, value in target.items():
        if key not in ("name", "version", "profile") and value not in (None, "", {}):
            lines.append(f"- {key.replace('_', ' ')}: `{value}`")
    lines += [
        f"- run profile: `{target['profile']}`",
        "- summary: " + ", ".join(f"{count} {status}" for status, count in report.summary.items()),
        f"- exit status counts failures at severity `{report.fail_on}` or worse (`--fail-on`)",
    ]
    return lines


def _severity_table(report: RunReport) -> list[str]:
    lines = [
        "| severity | meaning | fail | error | deviation |",
        "|---|---|---|---|---|",
    ]
    for domain, counts in report.by_severity.items():
        lines.append(
            f"| {domain} | {_MEANING[domain]} | {counts['fail']} | {counts['error']} | "
            f"{counts['deviation']} |"
        )
    ungraded = [r for r in report.clauses if r.status in ("fail", "error") and not r.severity]
    if ungraded:
        lines.append(
            f"| (not graded) | stale entries, harness errors, time-outs | "
            f"{sum(r.status == 'fail' for r in ungraded)} | "
            f"{sum(r.status == 'error' for r in ungraded)} | 0 |"
        )
    return lines


def _root_causes(report: RunReport) -> list[str]:
    rows = report.root_causes()
    if not rows:
        return []
    lines = [
        "",
        "## Root causes",
        "",
        "Broken clauses grouped by what makes their minimal failing case as severe as it is:",
        "its features (CONTRACT §0a) in the domain of its severity.",
        "",
        "| cause (features) | severity | clauses |",
        "|---|---|---|",
    ]
    for key, severity, members in rows:
        names = ", ".join(
            f"`{r.id}`" + ("" if r.status == "deviation" else f" ({r.status})") for r in members
        )
        described = (
            "; ".join(f"`{f}`: {FEATURES[f].meaning}" for f in key) or "(none: an ordinary case)"
        )
        lines.append(f"| {_cell(described)} | {severity or '-'} | {names} |")
    return lines


def _configs(report: RunReport) -> list[str]:
    if not report.configs:
        return []
    lines = ["", "## Trainer configs", "", "| config | settings | source |", "|---|---|---|"]
    for name, cfg in report.configs.items():
        native = cfg.get("native") or cfg.get("settings", {})
        settings = ", ".join(f"{k}={v}" for k, v in native.items()) or "(shipped defaults)"
        lines.append(f"| `{name}` | {_cell(settings)} | {_cell(cfg.get('source', ''))} |")
    return lines


def render(report: RunReport, title: str | None = None) -> str:
    target = report.target
    lines = [f"# {title or 'rlconform certification: ' + target['name']}", ""]
    lines += _header(report)
    lines += ["", *training.markdown_lines(report)]
    lines += _configs(report)
    lines += ["", *_severity_table(report)]
    lines += _root_causes(report)
    lines += [
        "",
        "## Clauses",
        "",
        "| clause | status | severity | consequence | message |",
        "|---|---|---|---|---|",
    ]
    for result in report.clauses:
        severity = result.severity or ""
        consequence = result.consequence or ("unmeasured" if result.status in BROKEN else "")
        lines.append(
            f"| `{result.id}` | {_ICONS[result.status]} | {severity} | {consequence} | "
            f"{_cell(result.message)} |"
        )
    failing = [r for r in report.clauses if r.status in ("fail", "error") and r.counterexample]
    if failing:
        lines += ["", "## Counterexamples", ""]
        for result in failing:
            repro = result.counterexample.get("reproducer")
            where = f"{result.id}/{result.check}" if result.check else result.id
            grade = (
                f" ({result.severity}: {', '.join(result.features) or 'no feature'})"
                if result.severity
                else ""
            )
            lines += [f"### `{where}`{grade}", "", result.message.splitlines()[0], ""]
            if repro:
                lines += ["```python", repro, "```", ""]
    declared = [r for r in report.clauses if r.deviations and r.status in BROKEN]
    if declared:
        lines += ["", "## Declared deviations", ""]
        lines += [
            "| clause | checks | features | severity | rationale | observed |",
            "|---|---|---|---|---|---|",
        ]
        for result in declared:
            for d in result.deviations:
                seen = f"{d.count}x: {_cell(d.observed_message)}" if d.observed else "not observed"
                lines.append(
                    f"| `{result.id}` | {', '.join(d.checks) or '(whole clause)'} | "
                    f"{', '.join(d.declared_features) or '(any case)'} | {d.severity or '-'} | "
                    f"{_cell(d.rationale)} | {seen} |"
                )
    if report.bindings:
        lines += ["", "## Bindings", "", "What each clause called, and on which trainer path.", ""]
        lines += [
            "| clause | operation | framework function(s) | trainer path |",
            "|---|---|---|---|",
        ]
        for row in report.bindings:
            functions = ", ".join(f"`{f}`" for f in row["functions"])
            lines.append(
                f"| `{row['clause']}` | `{row['op']}` | {functions} | {_cell(row['path'])} |"
            )
    return "\n".join(lines).rstrip() + "\n"


def write(report: RunReport, path: str | Path) -> None:
    Path(path).write_text(render(report), encoding="utf-8")

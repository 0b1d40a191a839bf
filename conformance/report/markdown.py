"""Markdown report that fits a CI step summary: header, counts, one row per clause."""

from __future__ import annotations

from pathlib import Path

from rlconform.conformance.results import RunReport

_ICONS = {
    "pass": "pass",
    "fail": "**FAIL**",
    "deviation": "deviation",
    "skip": "skip",
    "error": "**ERROR**",
}


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def render(report: RunReport, title: str | None = None) -> str:
    target = report.target
    lines = [
        f"# {title or 'rlconform certification: ' + target['name']}",
        "",
        f"- target: `{target['name']}` version `{target['version']}`",
        f"- run profile: `{target['profile']}`",
        "- summary: " + ", ".join(f"{count} {status}" for status, count in report.summary.items()),
        "",
        "| clause | status | message |",
        "|---|---|---|",
    ]
    for result in report.clauses:
        lines.append(f"| `{result.id}` | {_ICONS[result.status]} | {_cell(result.message)} |")
    failing = [r for r in report.clauses if r.status in ("fail", "error") and r.counterexample]
    if failing:
        lines += ["", "## Counterexamples", ""]
        for result in failing:
            repro = result.counterexample.get("reproducer")
            lines += [f"### `{result.id}`", "", result.message.splitlines()[0], ""]
            if repro:
                lines += ["```python", repro, "```", ""]
    return "\n".join(lines).rstrip() + "\n"


def write(report: RunReport, path: str | Path) -> None:
    Path(path).write_text(render(report), encoding="utf-8")

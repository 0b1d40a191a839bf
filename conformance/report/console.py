"""Console output: a progress line per clause while running, then a summary table."""

from __future__ import annotations

from typing import TextIO

from rich.console import Console
from rich.table import Table

from rlconform.conformance.registry import Clause
from rlconform.conformance.results import ClauseResult, RunReport

_STYLES = {
    "pass": "green",
    "fail": "bold red",
    "deviation": "yellow",
    "skip": "dim",
    "error": "bold magenta",
}


class ConsoleReporter:
    """Prints progress as clauses finish and the final table."""

    def __init__(self, stream: TextIO | None = None, total: int = 0):
        self.console = Console(file=stream, highlight=False, soft_wrap=True)
        self.total = total
        self.done = 0

    def header(self, target: dict[str, str], run_profile: str, device: str) -> None:
        self.console.print(
            f"rlconform certify [bold]{target['name']}[/bold] version {target['version']} "
            f"(adapter profile {target['profile']}, run profile {run_profile}, device {device})"
        )

    def on_start(self, clause: Clause) -> None:
        pass

    def on_result(self, result: ClauseResult) -> None:
        self.done += 1
        style = _STYLES[result.status]
        self.console.print(
            f"[{self.done:>3}/{self.total}] {result.id:<34} [{style}]{result.status:<9}[/{style}] "
            f"{result.duration_s:6.2f}s"
        )

    def final(self, report: RunReport) -> None:
        table = Table(title=f"rlconform: {report.target['name']} {report.target['version']}")
        table.add_column("clause")
        table.add_column("status")
        table.add_column("message", overflow="fold")
        for result in report.clauses:
            if result.status == "pass":
                continue
            style = _STYLES[result.status]
            table.add_row(result.id, f"[{style}]{result.status}[/{style}]", result.message)
        if table.row_count:
            self.console.print(table)
        summary = ", ".join(f"{n} {s}" for s, n in report.summary.items() if n)
        self.console.print(f"summary: {summary or 'no clauses'}")

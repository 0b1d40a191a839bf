"""Console output: a progress line per clause while running, then a summary table."""

from __future__ import annotations

import threading
import time
from typing import TextIO

from rich.console import Console
from rich.markup import escape
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

    def __init__(self, stream: TextIO | None = None, total: int = 0, heartbeat_s: float = 10.0):
        self.console = Console(file=stream, highlight=False, soft_wrap=True)
        self.total = total
        self.done = 0
        self.heartbeat_s = heartbeat_s
        self.started = time.monotonic()
        self._beating: tuple[threading.Event, threading.Thread] | None = None

    def header(self, target: dict[str, str], run_profile: str, device: str) -> None:
        self.console.print(
            f"rlconform certify [bold]{escape(target['name'])}[/bold] version "
            f"{escape(str(target['version']))} (adapter profile {escape(str(target['profile']))}, "
            f"run profile {run_profile}, device {device})"
        )
        for key, value in target.items():
            if key not in ("name", "version", "profile") and value not in (None, "", {}):
                self.console.print(f"  {key.replace('_', ' ')}: {escape(str(value))}")

    def on_start(self, clause: Clause) -> None:
        """Start the heartbeat: a line every ``heartbeat_s`` while the clause runs."""
        self._stop_heartbeat()
        stop = threading.Event()
        thread = threading.Thread(target=self._beat, args=(clause.id, stop), daemon=True)
        self._beating = (stop, thread)
        thread.start()

    def _beat(self, clause_id: str, stop: threading.Event) -> None:
        began = time.monotonic()
        while not stop.wait(self.heartbeat_s):
            try:
                self.console.print(
                    f"      {clause_id} still running ({time.monotonic() - began:.0f} s)",
                    style="dim",
                )
            except (BrokenPipeError, ValueError):  # the reader of stdout went away
                return

    def _stop_heartbeat(self) -> None:
        if self._beating is not None:
            stop, thread = self._beating
            stop.set()
            thread.join()
            self._beating = None

    def on_result(self, result: ClauseResult) -> None:
        self._stop_heartbeat()
        self.done += 1
        style = _STYLES[result.status]
        severity = f" ({result.severity})" if result.severity else ""
        self.console.print(
            f"[{self.done:>3}/{self.total}] {result.id:<34} [{style}]{result.status:<9}[/{style}]"
            f"{severity:<12} {result.duration_s:6.2f}s"
        )

    def _print_calls(self, report: RunReport) -> None:
        """For each failing clause, the call into the target that broke it, as Python to
        paste (conformance/call_text.py)."""
        calls = [
            (r.id, r.counterexample["call"])
            for r in report.clauses
            if r.status in ("fail", "error") and r.counterexample and "call" in r.counterexample
        ]
        if not calls:
            return
        spec = report.target.get("spec") or report.target.get("name")
        self.console.print(
            "the calls that broke them (import numpy as np, torch; from "
            "rlconform.adapters.registry import load_target; "
            f"target = load_target({spec!r})):"
        )
        for clause_id, call in calls:
            self.console.print(f"  {clause_id}:", soft_wrap=True)
            self.console.print(f"    {escape(call)}", soft_wrap=True, highlight=False)

    def final(self, report: RunReport) -> None:
        from rlconform.conformance.report import training

        rows = training.changes_training(report)
        if rows:
            self.console.print("[bold]what changes training[/bold] (CONTRACT §0b):")
            for r in rows:
                declared = " (declared)" if r["declared"] else ""
                configs = ", ".join(r["configs"]) or "-"
                self.console.print(
                    f"  {r['consequence']:<7} {r['clause']}/{r['check']}{declared} "
                    f"[{r['severity'] or '-'}] configs: {configs}"
                )
        table = Table(title=f"rlconform: {report.target['name']} {report.target['version']}")
        table.add_column("clause")
        table.add_column("status")
        table.add_column("severity")
        table.add_column("message", overflow="fold")
        for result in report.clauses:
            if result.status == "pass":
                continue
            style = _STYLES[result.status]
            table.add_row(
                result.id,
                f"[{style}]{result.status}[/{style}]",
                result.severity or "",
                escape(result.message),
            )
        if table.row_count:
            self.console.print(table)
        self._print_calls(report)
        self._stop_heartbeat()
        summary = ", ".join(f"{n} {s}" for s, n in report.summary.items() if n)
        self.console.print(f"summary: {summary or 'no clauses'}")
        if report.nothing_ran:
            self.console.print(
                "[red]no clause ran: every selected clause was skipped (the target implements "
                "none of their operations); exit 1[/red]"
            )
        graded = []
        for domain, counts in report.by_severity.items():
            broken = {status: n for status, n in counts.items() if n}
            if broken:
                graded.append(f"{domain}: " + ", ".join(f"{n} {s}" for s, n in broken.items()))
        if graded:
            self.console.print("by severity: " + "; ".join(graded))
        counts = training.grouped_counts(report)
        if counts:
            self.console.print("by consequence: " + ", ".join(f"{n} {k}" for k, n in counts))
        for key, severity, members in report.root_causes():
            names = ", ".join(r.id for r in members)
            self.console.print(
                f"  root cause [{severity or '-'}] {', '.join(key) or 'ordinary case'}: {names}"
            )
        self.console.print(f"total time: {time.monotonic() - self.started:.1f} s")

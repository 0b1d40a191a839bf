"""``rlconform audit PATH``: the console side of an audit (progress bar, report files).

Exit codes: 0 clean; 1 a violation at the ``--fail-on`` severity or a more serious one; 2 an
unreadable, refused or unsupported input (one line on stderr, never a traceback).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rlconform.audit import audit
from rlconform.audit.load import AuditInputError
from rlconform.audit.render import text, write_json, write_markdown

# Show a progress bar (on a terminal) from this many samples on.
PROGRESS_FROM_SAMPLES = 64


@contextmanager
def _progress_bar() -> Iterator[Callable[[int, int], None] | None]:
    if not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    bar = Progress(
        TextColumn("auditing"),
        BarColumn(),
        TextColumn("{task.percentage:>3.0f}%"),
        TimeElapsedColumn(),
        console=Console(file=sys.stderr),
        transient=True,
    )
    task = None

    def update(done: int, total: int) -> None:
        nonlocal task
        if total < PROGRESS_FROM_SAMPLES * 6:
            return
        if task is None:
            bar.start()
            task = bar.add_task("audit", total=total)
        bar.update(task, completed=done)

    try:
        yield update
    finally:
        bar.stop()


def run(args: argparse.Namespace) -> int:
    """Run the audit the parsed ``args`` describe; print the report; return the exit code."""
    if args.max_report < 0:
        raise AuditInputError("--max-report must be >= 0")
    try:
        with _progress_bar() as progress:
            report = audit(
                args.path,
                profile=args.profile,
                config=args.config,
                fail_on=args.fail_on,
                allow_unsafe_pickle=args.allow_unsafe_pickle,
                progress=progress,
            )
    except AuditInputError as exc:
        raise AuditInputError(f"audit: {exc}") from None
    except MemoryError:
        raise AuditInputError(f"audit: {args.path}: out of memory while reading") from None
    except (ValueError, TypeError, RuntimeError, OSError, IndexError, KeyError) as exc:
        first = (str(exc).splitlines() or [""])[0]
        raise AuditInputError(
            f"audit: {args.path}: cannot be audited: {type(exc).__name__}: {first}"
        ) from None
    print(text(report, args.max_report))
    if args.json_path:
        write_json(report, args.json_path, args.max_report)
    if args.markdown_path:
        write_markdown(report, args.markdown_path, args.max_report)
    return report.exit_code

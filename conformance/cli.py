"""The ``rlconform`` command line: ``certify``, ``clauses`` and the fixture/doc tools.

Exit codes of ``certify``: 0 every applicable clause passes or is a declared deviation;
1 at least one ``fail`` or ``error`` at the ``--fail-on`` severity or worse (default
``hardening``: every failure counts); 2 usage or setup problem (one-line message).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Sequence
from typing import Any

from rlconform.adapters.base import SetupError
from rlconform.conformance.features import DOMAINS
from rlconform.conformance.profiles import RUN_PROFILES, get_run_profile


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2, no usage dump
        raise SetupError(f"{self.prog}: {message}")


def _version() -> str:
    from rlconform.conformance.run_record import rlconform_version

    return rlconform_version()


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="rlconform", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"rlconform {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    certify = sub.add_parser("certify", help="certify a target clause by clause")
    certify.add_argument("target", help="registered adapter name or module:attribute")
    certify.add_argument("--profile", default="ci", choices=sorted(RUN_PROFILES))
    certify.add_argument("--only", default=None, help="glob(s) of clause ids, comma-separated")
    certify.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    certify.add_argument("--seed", type=int, default=None)
    certify.add_argument(
        "--max-examples",
        type=_positive_int,
        default=None,
        metavar="N",
        help="hypothesis examples per clause (default: the run profile's; ci 25)",
    )
    certify.add_argument(
        "--timeout",
        type=_positive_float,
        default=None,
        metavar="SECONDS",
        help="time limit per clause; a clause past it is 'error' (default: the run "
        "profile's; ci 120)",
    )
    certify.add_argument("--json", dest="json_path", default=None, metavar="PATH")
    certify.add_argument("--junit", dest="junit_path", default=None, metavar="PATH")
    certify.add_argument("--markdown", dest="markdown_path", default=None, metavar="PATH")
    certify.add_argument(
        "--fail-on",
        default="hardening",
        choices=list(DOMAINS),
        help="exit 1 only for failures at this severity or a more serious one "
        "(nominal: ordinary batches; edge: rare inputs; hardening: every failure)",
    )
    certify.add_argument(
        "--trainer-config",
        dest="trainer_configs",
        action="append",
        default=[],
        metavar="NAME",
        help="run the step clauses under this trainer config of the target (repeatable; "
        "default: every config it declares). Not audit's --config FILE",
    )
    certify.add_argument(
        "--fail-on-consequence",
        default=None,
        metavar="LIST",
        help="exit 1 only for failures whose consequence is in this comma-separated list "
        "(update, crash, state, metric, perf, purity, contained, unreached; default: every "
        "one); a failure whose consequence cannot be established always counts. Composes "
        "with --fail-on",
    )
    certify.add_argument(
        "--require",
        action="append",
        default=[],
        metavar="AREA|GLOB",
        help="clauses that must run: an area (adv) or a glob of clause ids (step.*, "
        "loss.ppo_clip), comma-separated, repeatable; a required clause that is skipped "
        "(the target does not implement it) fails",
    )
    certify.add_argument(
        "--baseline",
        action="append",
        default=[],
        metavar="FILE",
        help="a baseline file (TOML) of declared breaks applied on top of the adapter's own; "
        "repeatable",
    )
    certify.add_argument(
        "--write-baseline",
        default=None,
        metavar="FILE",
        help="write every break this run observes (declared or new) to a baseline file",
    )
    certify.add_argument(
        "--framework-path",
        default=None,
        metavar="PATH",
        help="source checkout of the framework to import (slime, roll)",
    )

    audit = sub.add_parser("audit", help="check a batch recorded from a training step")
    audit.add_argument(
        "path", help="recorded batch: .safetensors, .npz, torch.save file, memmap folder"
    )
    audit.add_argument(
        "--profile",
        default="torchref",
        metavar="ADAPTER|module:attr",
        help="whose legitimate choices apply: a registered adapter (torchref: the contract's "
        "defaults; verl, slime, roll, trl, openrlhf, oracle) or module:attribute of a Profile "
        "or of a target",
    )
    audit.add_argument("--config", default=None, metavar="FILE", help="JSON/TOML/YAML config")
    audit.add_argument("--json", dest="json_path", default=None, metavar="PATH")
    audit.add_argument("--markdown", dest="markdown_path", default=None, metavar="PATH")
    audit.add_argument(
        "--max-report",
        type=int,
        default=5,
        metavar="N",
        help="violating samples listed per clause (default 5)",
    )
    audit.add_argument("--fail-on", default="hardening", choices=list(DOMAINS))
    audit.add_argument(
        "--allow-unsafe-pickle",
        action="store_true",
        help="unpickle a file that needs more than weights_only loading (runs its code)",
    )

    replay = sub.add_parser(
        "replay", help="re-run the minimal case a JSON report holds for one clause"
    )
    replay.add_argument("report", metavar="REPORT.json")
    replay.add_argument("clause", metavar="CLAUSE")
    replay.add_argument("--device", default="cpu")
    clauses = sub.add_parser("clauses", help="list the contract clauses")
    clauses.add_argument("--json", action="store_true", help="print JSON instead of a table")
    contract = sub.add_parser(
        "contract", help="print the contract (CONTRACT.md, shipped with the package) or a section"
    )
    contract.add_argument(
        "section", nargs="?", default=None, help="a section: 0a, §0b, adv, step, 4 ..."
    )
    contract.add_argument("--path", action="store_true", help="print the file's path only")
    fixtures = sub.add_parser("fixtures", help="golden fixture cases")
    fixtures_sub = fixtures.add_subparsers(
        dest="fixtures_command", required=True, parser_class=_Parser
    )
    regenerate = fixtures_sub.add_parser(
        "regenerate", help="rewrite fixtures/cases/*.json from the builders"
    )
    regenerate.add_argument(
        "--check", action="store_true", help="only report files that would change (exit 1)"
    )
    docs = sub.add_parser("docs", help="render the contract reference (one page per area)")
    docs.add_argument("--out", required=True, metavar="DIR")
    docs.add_argument(
        "--reports",
        default="docs/certification",
        metavar="DIR",
        help="folder of committed certification JSON reports (default docs/certification)",
    )
    return parser


def _check_device(device: str) -> None:
    if device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise SetupError(
                "--device cuda: no CUDA device is available (torch.cuda.is_available() is False)"
            )


def _with_limits(run_profile: Any, args: argparse.Namespace) -> Any:
    """The run profile with --max-examples / --timeout applied."""
    import dataclasses

    changes: dict[str, Any] = {}
    if getattr(args, "max_examples", None) is not None:
        changes["max_examples"] = args.max_examples
    if getattr(args, "timeout", None) is not None:
        changes["clause_time_limit_s"] = args.timeout
    return dataclasses.replace(run_profile, **changes) if changes else run_profile


def cmd_certify(args: argparse.Namespace) -> int:
    # Light imports first: a wrong target name or baseline file is refused before torch
    # and the clauses are imported.
    from rlconform.adapters.registry import check_spec, load_target
    from rlconform.conformance import baseline
    from rlconform.conformance.outputs import check_outputs

    run_profile = _with_limits(get_run_profile(args.profile), args)
    check_spec(args.target)
    check_outputs(
        {
            "--json": args.json_path,
            "--junit": args.junit_path,
            "--markdown": args.markdown_path,
            "--write-baseline": args.write_baseline,
        },
        [*args.baseline, *([args.framework_path] if args.framework_path else [])],
        updates={"--write-baseline": args.baseline},
    )
    extra = [baseline.load(path) for path in args.baseline]
    _check_device(args.device)
    fail_on_consequence = _consequences(args.fail_on_consequence)

    from rlconform.conformance.registry import select
    from rlconform.conformance.report import json_report, junit, markdown
    from rlconform.conformance.report.console import ConsoleReporter
    from rlconform.conformance.runner import certify

    target = load_target(args.target, device=args.device, framework_path=args.framework_path)
    for entries in extra:
        target.deviations = baseline.merged(target.deviations, entries)
    clauses = select(args.only)
    if not clauses:
        raise SetupError(
            f"--only {args.only!r} matches no clause{_clause_hint(args.only)} "
            "(see 'rlconform clauses')"
        )
    required = _required(args.require, clauses)
    reporter = ConsoleReporter(total=len(clauses))
    reporter.header(target.describe(), run_profile.name, args.device)
    report = certify(
        target,
        clauses,
        run_profile,
        device=args.device,
        seed=args.seed,
        on_start=reporter.on_start,
        on_result=reporter.on_result,
        trainer_configs=args.trainer_configs or None,
    )
    _enforce_required(report, required)
    report.fail_on = args.fail_on
    report.fail_on_consequence = fail_on_consequence
    if args.baseline:
        report.target["baselines"] = ", ".join(args.baseline)
    reporter.final(report)
    if args.write_baseline:
        return _write_baseline(args, target, clauses, run_profile, report)
    if args.json_path:
        json_report.write(report, args.json_path)
    if args.junit_path:
        junit.write(report, args.junit_path)
    if args.markdown_path:
        markdown.write(report, args.markdown_path)
    return report.exit_code


def _clause_hint(pattern: str) -> str:
    """' (did you mean 'adv.grpo'?)' for a misspelt clause id, else ''."""
    import difflib

    from rlconform.conformance.registry import load_all

    ids = sorted(load_all())
    words = [p.strip() for p in str(pattern).split(",") if p.strip()]
    close = [m for w in words for m in difflib.get_close_matches(w, ids, n=1)]
    return f" (did you mean {', '.join(map(repr, close))}?)" if close else ""


def _required(values: list[str], clauses: list) -> set[str]:
    """The clause ids ``--require`` names (an area name stands for every clause of it);
    a pattern that matches no clause, or only clauses ``--only`` leaves out, is a usage
    error."""
    from rlconform.conformance.registry import AREAS, select

    required: set[str] = set()
    running = {c.id for c in clauses}
    for value in values:
        for pattern in (p.strip() for p in value.split(",") if p.strip()):
            glob = f"{pattern}.*" if pattern in AREAS else pattern
            matched = {c.id for c in select(glob)}
            if not matched:
                raise SetupError(
                    f"--require {pattern!r} matches no clause; an area ({', '.join(AREAS)}) "
                    "or a glob of clause ids (see 'rlconform clauses')"
                )
            outside = sorted(matched - running)
            if outside == sorted(matched):
                raise SetupError(f"--require {pattern!r}: {', '.join(outside)} not in --only")
            required |= matched & running
    return required


def _enforce_required(report, required: set[str]) -> None:
    """A required clause that was skipped fails (ungraded: exit 1 at any --fail-on)."""
    for result in report.clauses:
        if result.id in required and result.status == "skip":
            result.message = f"required (--require) but did not run: {result.message}"
            result.status = "fail"
            result.graded = False


def _consequences(value: str | None) -> frozenset[str] | None:
    """``--fail-on-consequence``'s list, checked against CONTRACT §0b."""
    if value is None:
        return None
    from rlconform.conformance.consequence import CONSEQUENCES

    names = [v.strip() for v in value.split(",") if v.strip()]
    unknown = [n for n in names if n not in CONSEQUENCES]
    if unknown or not names:
        raise SetupError(
            f"--fail-on-consequence {value!r}: unknown {', '.join(unknown) or 'empty list'}; "
            f"expected a comma-separated list of {', '.join(CONSEQUENCES)}"
        )
    return frozenset(names)


def _write_baseline(args, target, clauses, run_profile, report) -> int:
    """Write every observed break, then the reports of the run the new baseline gives."""
    from pathlib import Path

    from rlconform.conformance import baseline
    from rlconform.conformance.report import json_report, junit, markdown
    from rlconform.conformance.runner import discover_breaks

    rows, ungraded = [], []
    by_id = {c.id: c for c in clauses}
    for result in report.clauses:
        if result.status in ("pass", "skip"):
            continue
        if result.status in ("fail", "error") and not result.graded and not result.deviations:
            ungraded.append(result.id)
            continue
        rows += discover_breaks(
            by_id[result.id], target, run_profile, device=args.device, seed=args.seed
        )
    rows = _merged_rows(Path(args.write_baseline), rows, {c.id for c in clauses})
    Path(args.write_baseline).write_text(baseline.render(report.target, rows), encoding="utf-8")
    print(f"wrote {len(rows)} baseline entries to {args.write_baseline}")
    for clause_id in ungraded:
        print(f"not written (no case to scope it by): {clause_id}", file=sys.stderr)
    if args.json_path:
        json_report.write(report, args.json_path)
    if args.junit_path:
        junit.write(report, args.junit_path)
    if args.markdown_path:
        markdown.write(report, args.markdown_path)
    return 1 if ungraded else 0


def _merged_rows(path, rows: list[dict], ran: set[str]) -> list[dict]:
    """The rows to write into an existing baseline ``path``: its entries of clauses this run
    did not select are kept as they are (``--only`` refreshes a subset), and a row this run
    wrote keeps the rationale of the existing entry with the same clause, checks and
    features (a reviewed rationale is never replaced by the observed message)."""
    import tomllib

    from rlconform.conformance import baseline

    if not path.exists():
        return rows
    existing = baseline.load(path)  # validates the file (a SetupError names the entry)
    raw = tomllib.loads(path.read_text(encoding="utf-8")).get("deviation", [])
    reviewed = {
        (clause_id, tuple(e.checks), tuple(sorted(e.features))): e
        for clause_id, entries in existing.items()
        for e in entries
    }
    for row in rows:
        key = (row["clause"], tuple(row["checks"]), tuple(sorted(row["features"])))
        entry = reviewed.get(key)
        if entry is None:
            continue
        row["rationale"] = entry.rationale
        # the scope a reviewer declared (trainer configs, a break between operations)
        # is kept like the rationale: the run does not rediscover it
        if entry.configs and not row.get("configs"):
            row["configs"] = list(entry.configs)
        if entry.composition:
            row["composition"] = True
    # an entry of a clause this run did not select is kept verbatim: its model,
    # fingerprint, configs, composition, severity and observed message included (without
    # its model or fingerprint it would excuse any failure of its check)
    kept = [dict(item) for item in raw if item.get("clause") not in ran]
    for item in kept:
        if isinstance(item.get("model"), dict):
            item["model"] = dict(item["model"])
        if isinstance(item.get("fingerprint"), dict):
            item["fingerprint"] = (item["fingerprint"]["case"], item["fingerprint"]["digest"])
    return kept + rows


def cmd_audit(args: argparse.Namespace) -> int:
    from rlconform.audit.cli import run
    from rlconform.conformance.outputs import check_outputs

    check_outputs(
        {"--json": args.json_path, "--markdown": args.markdown_path},
        [args.path, *([args.config] if args.config else [])],
    )
    return run(args)


def cmd_clauses(args: argparse.Namespace) -> int:
    """The shipped catalogue (conformance/catalogue.py): no torch, no clause module."""
    from rlconform.conformance.catalogue import load

    rows = load()
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{len(rows)} contract clauses")
    for column in ("id", "area", "title"):
        table.add_column(column)
    for row in rows:
        table.add_row(row["id"], row["area"], row["title"])
    Console(soft_wrap=True).print(table)
    return 0


def cmd_contract(args: argparse.Namespace) -> int:
    """The spec a report's "CONTRACT §0a" refers to, from the installed package."""
    from rlconform.conformance.catalogue import CONTRACT, contract_section

    if args.path:
        print(CONTRACT)
        return 0
    text = CONTRACT.read_text(encoding="utf-8")
    section = contract_section(text, args.section)
    if section is None:
        heads = [
            line.lstrip("# ").split(" (")[0]
            for line in text.splitlines()
            if line[:2] in ("##", "# ")
        ]
        raise SetupError(
            f"no section {args.section!r} in CONTRACT.md; sections: {', '.join(heads[1:])}"
        )
    print(section, end="")
    return 0


def cmd_fixtures(args: argparse.Namespace) -> int:
    from rlconform.fixtures.registry import CASES_DIR, regenerate

    changed = regenerate(check=args.check)
    verb = "would change" if args.check else "rewrote"
    for name in changed:
        print(f"{verb} {CASES_DIR / name}")
    if not changed:
        print(f"fixtures up to date in {CASES_DIR}")
    return 1 if (args.check and changed) else 0


def cmd_docs(args: argparse.Namespace) -> int:
    from pathlib import Path

    from rlconform.conformance.docs import write

    written = write(Path(args.out), Path(args.reports))
    print(f"wrote {len(written)} pages to {args.out}")
    return 0


def cmd_replay(args: argparse.Namespace) -> int:
    """Print the call that replays the clause's minimal case, run it: exit 1 while it still
    fails, 0 once it passes."""
    from rlconform.conformance.repro import replay_report

    _check_device(args.device)
    call, failure = replay_report(args.report, args.clause, device=args.device)
    print(call)
    if failure is None:
        print(f"{args.clause}: the case passes now")
        return 0
    print(f"{args.clause}: still fails: {failure}")
    return 1


COMMANDS = {
    "certify": cmd_certify,
    "replay": cmd_replay,
    "audit": cmd_audit,
    "clauses": cmd_clauses,
    "contract": cmd_contract,
    "fixtures": cmd_fixtures,
    "docs": cmd_docs,
}


def main(argv: Sequence[str] | None = None) -> int:
    """In-process entry point: returns the exit code instead of exiting."""
    try:
        args = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
        return COMMANDS[args.command](args)
    except SetupError as exc:
        print(f"rlconform: error: {exc}", file=sys.stderr)
        return 2
    except SystemExit as exc:  # --help
        return int(exc.code or 0)
    except BrokenPipeError:
        return _closed_pipe()


def _closed_pipe() -> int:
    """The reader of stdout went away (``rlconform clauses | head``): stop quietly, as a
    process killed by SIGPIPE would (exit 141), with no traceback at interpreter exit."""
    import os

    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    return 141


def entry() -> None:
    sys.exit(main())

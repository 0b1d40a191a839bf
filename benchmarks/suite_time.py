"""Benchmark: where the test suite's time goes, by test module and by engine phase.

Not a timed test. Runs pytest in this process (default: the fast tier, the README's
``pytest``; ``--tier slow`` for ``pytest -m slow``; any further arguments go to pytest) with
the oracle's functions instrumented, then prints

- per test module: tests, seconds, share of the run;
- per engine pass (explore, shrink, grade) and phase (target calls, oracle, gloo start-up,
  other = hypothesis' generation and the harness), from ``rlconform.conformance.phases``;
- the ratio of the run to a baseline measured in the same run (a fixed pure-Python
  workload: the machine-speed unit), so that a figure from a busier machine stays
  comparable.

    python benchmarks/suite_time.py [--tier fast|slow] [--top 25] [--json PATH] [-- PYTEST ARGS]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict

import pytest
from machine_unit import reference_workload


class _Durations:
    """A pytest plugin that adds up each test's setup, call and teardown by module."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.tests: dict[str, int] = defaultdict(int)
        self.outcomes: dict[str, int] = defaultdict(int)

    def pytest_runtest_logreport(self, report) -> None:  # type: ignore[no-untyped-def]
        module = report.nodeid.split("::", 1)[0]
        self.seconds[module] += report.duration
        if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
            self.tests[module] += 1
            self.outcomes[report.outcome] += 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tier", choices=["fast", "slow"], default="fast")
    parser.add_argument("--top", type=int, default=25, help="modules listed (slowest first)")
    parser.add_argument("--json", default=None, metavar="PATH", help="also write the figures")
    parser.add_argument("pytest_args", nargs="*", help="passed to pytest after --")
    args = parser.parse_args()

    from rlconform.conformance import phases

    baseline = reference_workload()
    phases.instrument_oracle()
    phases.reset()
    plugin = _Durations()
    selection = ["-m", "slow"] if args.tier == "slow" else []
    started = time.perf_counter()
    code = pytest.main(["-q", "-p", "no:randomly", *selection, *args.pytest_args], [plugin])
    wall = time.perf_counter() - started
    engine = phases.snapshot()

    print()
    print(f"baseline (reference workload): {baseline:.3f} s")
    print(
        f"tier {args.tier}: {wall:.1f} s wall ({wall / baseline:.0f} x baseline), "
        f"pytest exit {int(code)}, outcomes {dict(plugin.outcomes)}"
    )
    print()
    print(f"{'module':<52} {'tests':>5} {'seconds':>8} {'share':>6}")
    ranked = sorted(plugin.seconds.items(), key=lambda item: -item[1])
    for module, seconds in ranked[: args.top]:
        print(f"{module:<52} {plugin.tests[module]:>5} {seconds:8.1f} {seconds / wall:6.1%}")
    rest = ranked[args.top :]
    if rest:
        seconds = sum(s for _, s in rest)
        print(f"{f'({len(rest)} more modules)':<52} {'':>5} {seconds:8.1f} {seconds / wall:6.1%}")
    print()
    print(f"{'engine pass':<12} " + " ".join(f"{p:>8}" for p in phases.PHASES) + f" {'total':>8}")
    for pass_name in phases.PASSES:
        row = engine.get(pass_name, {})
        cells = " ".join(f"{row.get(p, 0.0):8.1f}" for p in phases.PHASES)
        print(f"{pass_name:<12} {cells} {sum(row.values()):8.1f}")
    print(
        "(other: hypothesis' generation, the harness and comparisons, pytest itself; "
        "startup: gloo worker processes)"
    )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(
                {
                    "tier": args.tier,
                    "wall_s": wall,
                    "baseline_s": baseline,
                    "modules": {m: {"tests": plugin.tests[m], "seconds": s} for m, s in ranked},
                    "engine": engine,
                },
                handle,
                indent=2,
            )
    return int(code)


if __name__ == "__main__":
    sys.exit(main())

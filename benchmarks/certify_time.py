"""Benchmark: wall time of ``rlconform certify TARGET --profile ci`` per contract area.

Not a timed test. Prints, per area, the seconds spent and the ratio against a baseline
measured in the same run (a fixed reference workload: the machine-speed unit), so that a
figure from a slower or busier machine stays comparable. The budget (default 45 s on the
2-core reference machine) is checked on the total. The last line is the ratio of the whole
run to the same run without the step area and the consequence pass (issue 17: within 2x).

    python benchmarks/certify_time.py torchref [--budget 45] [--repeat 1]
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict

from machine_unit import reference_workload


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("target", nargs="?", default="torchref")
    parser.add_argument("--budget", type=float, default=45.0, help="seconds allowed for the total")
    parser.add_argument("--profile", default="ci")
    args = parser.parse_args()

    from rlconform.adapters.registry import load_target
    from rlconform.conformance.profiles import get_run_profile
    from rlconform.conformance.registry import load_all
    from rlconform.conformance.runner import certify

    baseline = reference_workload()
    started = time.perf_counter()
    target = load_target(args.target)
    setup = time.perf_counter() - started
    certify_started = time.perf_counter()
    report = certify(target, list(load_all().values()), get_run_profile(args.profile))
    wall = time.perf_counter() - certify_started
    per_area: dict[str, float] = defaultdict(float)
    statuses: dict[str, list[str]] = defaultdict(list)
    for result in report.clauses:
        area = result.id.split(".", 1)[0]
        per_area[area] += result.duration_s
        statuses[area].append(result.status)
    # what certify spends outside the clauses: the consequence pass (CONTRACT §0b)
    outside = max(0.0, wall - sum(per_area.values()))
    total = setup + wall
    print(f"baseline (reference workload): {baseline:.3f} s")
    print(f"{'area':<12} {'clauses':>7} {'seconds':>9} {'x baseline':>11}")
    print(f"{'(setup)':<12} {'':>7} {setup:9.2f} {setup / baseline:11.1f}")
    for area, seconds in per_area.items():
        print(f"{area:<12} {len(statuses[area]):>7} {seconds:9.2f} {seconds / baseline:11.1f}")
    print(f"{'(consequence)':<12} {'':>7} {outside:9.2f} {outside / baseline:11.1f}")
    print(f"{'total':<12} {len(report.clauses):>7} {total:9.2f} {total / baseline:11.1f}")
    # issue 17's bound: certify within 2x of the workload before it (no step area, no
    # consequence pass), measured in the same run as the setup and the other areas' clauses
    before = setup + sum(v for area, v in per_area.items() if area != "step")
    print(
        f"step area and consequence: {total / before:.2f}x the other areas' workload "
        f"({total:.1f} s vs {before:.1f} s; issue 17 bound: 2x)"
    )
    verdict = "within" if total <= args.budget else "OVER"
    print(
        f"{verdict} budget: {total:.1f} s of {args.budget:.0f} s ({args.target}, profile {args.profile})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

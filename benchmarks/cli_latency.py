"""Benchmark: how fast the CLI answers what needs no run (``--help``, a usage error,
``clauses``, ``contract``).

Not a timed test. Each command runs in a fresh interpreter (as a user's shell starts it),
``--repeat`` times; the best wall time is printed next to the ratio against a bare
``python -c pass`` measured in the same run (interpreter start-up is the floor no CLI can go
under). The target is under one second for each; the exit code is 1 when one is over
``--budget`` seconds.

    python benchmarks/cli_latency.py [--repeat 5] [--budget 1.0]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

ENTRY = "from rlconform.conformance.cli import entry; entry()"
COMMANDS = {
    "--help": ["--help"],
    "usage error": ["certify", "torchreff"],
    "clauses": ["clauses"],
    "clauses --json": ["clauses", "--json"],
    "contract 0a": ["contract", "0a"],
}


def best_of(argv: list[str], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        subprocess.run(argv, capture_output=True, check=False)
        times.append(time.perf_counter() - started)
    return min(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--budget", type=float, default=1.0, help="seconds allowed per command")
    args = parser.parse_args()
    floor = best_of([sys.executable, "-c", "pass"], args.repeat)
    print(f"{'python -c pass':<16} {floor:6.3f} s   1.0x (baseline)")
    over = []
    for name, argv in COMMANDS.items():
        seconds = best_of([sys.executable, "-c", ENTRY, *argv], args.repeat)
        print(f"{name:<16} {seconds:6.3f} s {seconds / floor:5.1f}x")
        if seconds > args.budget:
            over.append(name)
    if over:
        print(f"over {args.budget} s: {', '.join(over)}")
        return 1
    print(f"every command under {args.budget} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

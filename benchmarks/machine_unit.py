"""The benchmarks' baseline: a fixed pure-Python workload timed in the same run (the
machine-speed unit), so that a figure from a slower or busier machine stays comparable."""

from __future__ import annotations

import time


def reference_workload() -> float:
    """Seconds for a fixed pure-Python workload.

    Pure Python on purpose: the certification is dominated by interpreter work (strategies,
    the oracle, small tensor calls), and a baseline without threads is not distorted by
    thread contention on a loaded machine.
    """
    started = time.perf_counter()
    total = 0.0
    for i in range(3_000_000):
        total += (i % 7) * 0.5
    return time.perf_counter() - started

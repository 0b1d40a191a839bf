"""The gloo runner: results come back, worlds are reused, failures and hangs are bounded, no
worker survives a failure or ``close_worlds``."""

from __future__ import annotations

import multiprocessing
import time

import pytest
import torch

from rlconform.conformance.distributed import (
    DistributedError,
    close_worlds,
    run_gloo,
    world_pids,
)
from rlconform.conformance.errors import ClauseTimeout


def fail_on_rank_one(rank, world_size, payload):
    import torch.distributed as dist

    if rank == 1:
        raise ValueError(payload)
    value = torch.ones(1)
    dist.all_reduce(value)  # rank 0 waits here for a rank that never comes
    return float(value)


def sleep_forever(rank, world_size, payload):
    time.sleep(3600)


def summed_rank(rank, world_size, payload):
    import os

    import torch.distributed as dist

    value = torch.tensor([float(rank + payload)])
    dist.all_reduce(value)
    return float(value), os.getpid()


@pytest.fixture(autouse=True)
def _no_reused_worlds():
    """Each test starts without the worlds earlier tests of this process left running."""
    close_worlds()
    yield
    close_worlds()


def _no_workers_left():
    deadline = time.monotonic() + 5.0
    while multiprocessing.active_children() and time.monotonic() < deadline:
        time.sleep(0.05)
    return not multiprocessing.active_children()


def test_a_raising_rank_fails_fast_with_its_traceback():
    started = time.monotonic()
    with pytest.raises(DistributedError, match="rank 1 raised") as caught:
        run_gloo(fail_on_rank_one, 2, "broken on purpose", timeout_s=30)
    assert "ValueError: broken on purpose" in str(caught.value)
    assert time.monotonic() - started < 25
    assert _no_workers_left()


def test_a_hanging_run_times_out_and_its_workers_are_killed():
    started = time.monotonic()
    with pytest.raises(ClauseTimeout, match="timed out after 2 s"):
        run_gloo(sleep_forever, 2, None, timeout_s=2)
    assert time.monotonic() - started < 10
    assert _no_workers_left()


def test_an_unpicklable_payload_is_refused_before_spawning():
    with pytest.raises(DistributedError, match="picklable"):
        run_gloo(sleep_forever, 2, lambda: None)
    assert _no_workers_left()


def test_a_world_is_reused_across_runs_and_closed_on_request():
    first = run_gloo(summed_rank, 2, 1, timeout_s=60)
    assert [value for value, _ in first] == [3.0, 3.0]  # (0 + 1) + (1 + 1)
    pids = [pid for _, pid in first]
    assert world_pids(2) == pids
    second = run_gloo(summed_rank, 2, 10, timeout_s=60)
    assert [value for value, _ in second] == [21.0, 21.0]
    assert [pid for _, pid in second] == pids, "the second run started new workers"
    close_worlds()
    assert world_pids(2) == []
    assert _no_workers_left()


def test_a_failed_run_stops_its_world_and_the_next_run_starts_a_fresh_one():
    pids = [pid for _, pid in run_gloo(summed_rank, 2, 0, timeout_s=60)]
    with pytest.raises(DistributedError, match="rank 1 raised"):
        run_gloo(fail_on_rank_one, 2, "broken on purpose", timeout_s=30)
    assert world_pids(2) == [] and _no_workers_left()
    again = run_gloo(summed_rank, 2, 0, timeout_s=60)
    assert [value for value, _ in again] == [1.0, 1.0]
    assert not set(pid for _, pid in again) & set(pids)

"""The gloo runner: results come back, failures and hangs are bounded, no worker survives."""

from __future__ import annotations

import multiprocessing
import time

import pytest
import torch

from rlconform.conformance.distributed import DistributedError, run_gloo
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

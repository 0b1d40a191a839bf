"""Run a check on real ``torch.distributed`` processes (gloo backend, 127.0.0.1).

``run_gloo(fn, world_size, payload)`` spawns ``world_size`` processes, joins them in one
gloo process group on a free localhost port, runs ``fn(rank, world_size, payload)`` in each
and returns every rank's result. The run is bounded: past ``timeout_s`` the workers are
killed and ``ClauseTimeout`` is raised. Workers never outlive the call: they are
terminated (then killed) on any failure, and each one exits by itself if its parent dies.
``fn`` must be a module-level function and ``payload`` picklable (targets built by
``with_overrides`` are, when their replacement functions are module-level).
"""

from __future__ import annotations

import datetime
import math
import os
import pickle
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable
from multiprocessing.connection import wait
from typing import Any

from rlconform.conformance.errors import ClauseTimeout

DEFAULT_TIMEOUT_S = 60.0
# After one rank fails, how long to wait for the others' reports (to name the first failure).
_FAILURE_GRACE_S = 1.0


class DistributedError(RuntimeError):
    """A gloo worker could not be started, crashed, or raised outside the check's own handling."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run_gloo(
    fn: Callable[[int, int, Any], Any],
    world_size: int,
    payload: Any,
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> list[Any]:
    """Run ``fn(rank, world_size, payload)`` on ``world_size`` gloo ranks; results in rank order."""
    import torch.multiprocessing as mp

    try:
        job = pickle.dumps((fn, payload))
    except Exception as exc:
        raise DistributedError(
            f"cannot send the check to gloo workers (function and target must be picklable): {exc}"
        ) from exc
    spawn = mp.get_context("spawn")
    port = free_port()
    deadline = time.monotonic() + timeout_s
    workers: list[Any] = []
    readers: list[Any] = []
    finished = False
    try:
        for rank in range(world_size):
            reader, writer = spawn.Pipe(duplex=False)
            worker = spawn.Process(
                target=_worker_main,
                args=(rank, world_size, port, job, writer, timeout_s, os.getpid()),
                name=f"rlconform-gloo-rank{rank}",
                daemon=True,
            )
            worker.start()
            writer.close()
            workers.append(worker)
            readers.append(reader)
        results = _collect(workers, readers, deadline, timeout_s)
        finished = True
        return results
    finally:
        _stop(workers, grace_s=5.0 if finished else 0.0)
        for reader in readers:
            reader.close()


def _collect(
    workers: list[Any], readers: list[Any], deadline: float, timeout_s: float
) -> list[Any]:
    """Every rank's result; on failure, the rank that failed first (others often fail after)."""
    results: dict[int, Any] = {}
    failures: list[tuple[float, int, str]] = []
    pending = set(range(len(workers)))
    failure_deadline = math.inf
    while pending:
        now = time.monotonic()
        if now >= failure_deadline:
            break
        if now >= deadline:
            raise ClauseTimeout(
                f"gloo run with world size {len(workers)} timed out after {timeout_s:g} s "
                f"(ranks still running: {sorted(pending)}); its workers were killed"
            )
        watched = [readers[r] for r in pending] + [workers[r].sentinel for r in pending]
        wait(watched, timeout=max(0.0, min(deadline, failure_deadline) - now))
        for rank in sorted(pending):
            if readers[rank].poll():
                try:
                    status, value = readers[rank].recv()
                except EOFError:
                    status, value = "crashed", None
            elif workers[rank].exitcode is not None:
                status, value = "crashed", None
            else:
                continue
            pending.discard(rank)
            if status == "ok":
                results[rank] = value
                continue
            if not failures:
                failure_deadline = time.monotonic() + _FAILURE_GRACE_S
            if status == "raised":
                failures.append((value[0], rank, f"gloo rank {rank} raised:\n{value[1]}"))
            else:
                code = workers[rank].exitcode
                failures.append((time.time(), rank, f"gloo rank {rank} exited with code {code}"))
    if failures:
        failures.sort()
        first = failures[0][2]
        later = [rank for _, rank, _ in failures[1:]]
        if later:
            first += f"\n(ranks {later} failed after it)"
        raise DistributedError(first)
    return [results[rank] for rank in range(len(workers))]


def _stop(workers: list[Any], grace_s: float) -> None:
    """Join workers for up to ``grace_s``; terminate, then kill, any that still run."""
    end = time.monotonic() + grace_s
    for worker in workers:
        worker.join(timeout=max(0.0, end - time.monotonic()))
    for worker in workers:
        if worker.is_alive():
            worker.terminate()
    for worker in workers:
        worker.join(timeout=2.0)
        if worker.is_alive():
            worker.kill()
            worker.join()


def _watch_parent(parent_pid: int, hard_deadline: float) -> None:
    while True:
        if os.getppid() != parent_pid or time.monotonic() > hard_deadline:
            os._exit(3)
        time.sleep(0.2)


def _worker_main(
    rank: int,
    world_size: int,
    port: int,
    job: bytes,
    writer: Any,
    timeout_s: float,
    parent_pid: int,
) -> None:
    threading.Thread(
        target=_watch_parent, args=(parent_pid, time.monotonic() + timeout_s + 10.0), daemon=True
    ).start()
    try:
        import torch
        import torch.distributed as dist

        torch.set_num_threads(1)
        fn, payload = pickle.loads(job)
        dist.init_process_group(
            "gloo",
            init_method=f"tcp://127.0.0.1:{port}",
            rank=rank,
            world_size=world_size,
            timeout=datetime.timedelta(seconds=timeout_s),
        )
        try:
            report = ("ok", fn(rank, world_size, payload))
        except BaseException:
            # Stamped before leaving the group: the other ranks fail only after that.
            report = ("raised", (time.time(), traceback.format_exc()))
        dist.destroy_process_group()
    except BaseException:
        report = ("raised", (time.time(), traceback.format_exc()))
    writer.send(report)
    writer.close()
    # The result is delivered; skip the slow interpreter teardown of torch.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)

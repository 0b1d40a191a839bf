"""Run a check on real ``torch.distributed`` processes (gloo backend, 127.0.0.1).

``run_gloo(fn, world_size, payload)`` runs ``fn(rank, world_size, payload)`` on each rank of
a gloo world of ``world_size`` processes joined in one process group on a free localhost
port, and returns every rank's result. A world is started once per size and process and
reused for every later run of that size (starting one costs seconds: each rank imports
torch and the target's framework); ``prestart(world_size, fn, payload)`` starts one in the
background and runs ``fn`` there once as a warm-up whose results are dropped (a target's
first calls import its framework), so that the start-up overlaps other work; ``close_worlds()`` stops them, as does the
interpreter's exit. The run is bounded: past ``timeout_s`` the world's workers are killed and
``ClauseTimeout`` is raised. A world whose run failed in any way (a rank raised, crashed or
timed out: its collectives may be out of step) is stopped at once and never reused, so no
worker outlives a failure; each worker also exits by itself if its parent dies. ``fn`` must
be a module-level function and ``payload`` picklable (targets built by ``with_overrides``
are, when their replacement functions are module-level).
"""

from __future__ import annotations

import atexit
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

from rlconform.conformance import phases
from rlconform.conformance.errors import ClauseTimeout

DEFAULT_TIMEOUT_S = 60.0
# After one rank fails, how long to wait for the others' reports (to name the first failure).
_FAILURE_GRACE_S = 1.0
# The process group's own timeout for one collective (a run's bound is the parent's deadline).
_COLLECTIVE_TIMEOUT_S = 600.0


class DistributedError(RuntimeError):
    """A gloo worker could not be started, crashed, or raised outside the check's own handling."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class _World:
    """``world_size`` worker processes in one gloo process group, serving runs one at a time."""

    def __init__(self, world_size: int) -> None:
        import torch.multiprocessing as mp

        spawn = mp.get_context("spawn")
        self.world_size = world_size
        self.workers: list[Any] = []
        self.conns: list[Any] = []
        self.warming = False  # a warm-up job was sent and its replies are not read yet
        port = free_port()
        with phases.phase("startup"):
            try:
                for rank in range(world_size):
                    parent_end, child_end = spawn.Pipe(duplex=True)
                    worker = spawn.Process(
                        target=_serve,
                        args=(rank, world_size, port, child_end, os.getpid()),
                        name=f"rlconform-gloo{world_size}-rank{rank}",
                        daemon=True,
                    )
                    worker.start()
                    child_end.close()
                    self.workers.append(worker)
                    self.conns.append(parent_end)
            except BaseException:
                self.close(grace_s=0.0)
                raise

    @property
    def pids(self) -> list[int]:
        return [worker.pid for worker in self.workers]

    def alive(self) -> bool:
        return all(worker.is_alive() for worker in self.workers)

    def send(self, job: bytes) -> None:
        for conn in self.conns:
            conn.send_bytes(job)

    def run(self, job: bytes, timeout_s: float) -> list[Any]:
        self.send(job)
        return _collect(self.workers, self.conns, time.monotonic() + timeout_s, timeout_s)

    def warmed(self, timeout_s: float) -> bool:
        """Read the warm-up's replies (if one was sent): True when every rank is ready."""
        if not self.warming:
            return True
        self.warming = False
        try:
            with phases.phase("startup"):
                _collect(self.workers, self.conns, time.monotonic() + timeout_s, timeout_s)
        except (ClauseTimeout, DistributedError):
            return False
        return True

    def close(self, grace_s: float = 5.0) -> None:
        for conn in self.conns:
            try:
                conn.send_bytes(b"")  # the stop message
            except (OSError, ValueError):
                pass
        _stop(self.workers, grace_s)
        for conn in self.conns:
            conn.close()
        self.workers, self.conns = [], []


_WORLDS: dict[int, _World] = {}


def close_worlds() -> None:
    """Stop every reused gloo world of this process."""
    while _WORLDS:
        _, world = _WORLDS.popitem()
        world.close()


atexit.register(close_worlds)


def prestart(world_size: int, fn: Callable[[int, int, Any], Any], payload: Any) -> None:
    """Start the reused world of ``world_size`` now, in the background, with a warm-up run
    of ``fn(rank, world_size, payload)`` whose results are dropped. Never raises, never
    decides a result: a world whose warm-up failed is replaced by a fresh one in the
    ``run_gloo`` that needs it."""
    if world_size in _WORLDS:
        return
    try:
        job = pickle.dumps((fn, payload))
        world = _World(world_size)
        world.send(job)
    except Exception:
        return
    world.warming = True
    _WORLDS[world_size] = world


def world_pids(world_size: int) -> list[int]:
    """The worker pids of this process's reused world of ``world_size`` (none: [])."""
    world = _WORLDS.get(world_size)
    return world.pids if world is not None else []


def run_gloo(
    fn: Callable[[int, int, Any], Any],
    world_size: int,
    payload: Any,
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> list[Any]:
    """Run ``fn(rank, world_size, payload)`` on ``world_size`` gloo ranks; results in rank order."""
    try:
        job = pickle.dumps((fn, payload))
    except Exception as exc:
        raise DistributedError(
            f"cannot send the check to gloo workers (function and target must be picklable): {exc}"
        ) from exc
    world = _WORLDS.pop(world_size, None)
    if world is not None and not (world.warmed(timeout_s) and world.alive()):
        world.close(grace_s=0.0)
        world = None
    if world is None:
        world = _World(world_size)
    try:
        results = world.run(job, timeout_s)
    except BaseException:
        world.close(grace_s=0.0)
        raise
    _WORLDS[world_size] = world
    return results


def _collect(workers: list[Any], conns: list[Any], deadline: float, timeout_s: float) -> list[Any]:
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
        watched = [conns[r] for r in pending] + [workers[r].sentinel for r in pending]
        wait(watched, timeout=max(0.0, min(deadline, failure_deadline) - now))
        for rank in sorted(pending):
            if conns[rank].poll():
                try:
                    status, value = conns[rank].recv()
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


def _watch_parent(parent_pid: int) -> None:
    while True:
        if os.getppid() != parent_pid:
            os._exit(3)
        time.sleep(0.2)


def _serve(rank: int, world_size: int, port: int, conn: Any, parent_pid: int) -> None:
    """A worker: join the group, then run each job it is sent until the stop message."""
    threading.Thread(target=_watch_parent, args=(parent_pid,), daemon=True).start()
    try:
        import torch
        import torch.distributed as dist

        torch.set_num_threads(1)
        dist.init_process_group(
            "gloo",
            init_method=f"tcp://127.0.0.1:{port}",
            rank=rank,
            world_size=world_size,
            timeout=datetime.timedelta(seconds=_COLLECTIVE_TIMEOUT_S),
        )
    except BaseException:
        failed = ("raised", (time.time(), traceback.format_exc()))
        job = conn.recv_bytes()
        if job:
            conn.send(failed)
        _leave()
    while True:
        try:
            job = conn.recv_bytes()
        except EOFError:
            break
        if not job:
            break
        try:
            fn, payload = pickle.loads(job)
            report = ("ok", fn(rank, world_size, payload))
        except BaseException:
            report = ("raised", (time.time(), traceback.format_exc()))
        try:
            conn.send(report)
        except Exception:
            conn.send(("raised", (time.time(), traceback.format_exc())))
        if report[0] != "ok":
            break  # the parent stops this world: its collectives may be out of step
    _leave()


def _leave() -> None:
    # Skip the slow interpreter teardown of torch (and gloo's, whose peers may be gone).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)

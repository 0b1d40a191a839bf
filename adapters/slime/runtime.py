"""The single-process runtime slime's functions expect around them: process groups and the
metrics tracker. No math: these only stand for what a one-rank slime job would provide.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Iterator
from typing import Any

import torch.distributed as dist

_SINGLE_RANK_GROUP: Any = None


def single_rank_group() -> Any:
    """A one-rank gloo group for slime's unconditional collectives (``all_reduce`` in
    ``distributed_masked_whiten`` and ``reduce_train_step_metrics``).

    Stands for slime's data-parallel group when the batch lives on one rank; built on a
    private HashStore, so no default process group is initialised.
    """
    global _SINGLE_RANK_GROUP
    if _SINGLE_RANK_GROUP is None:
        _SINGLE_RANK_GROUP = dist.ProcessGroupGloo(dist.HashStore(), 0, 1)
    return _SINGLE_RANK_GROUP


@contextlib.contextmanager
def one_rank_job() -> Iterator[None]:
    """A default process group of one gloo rank for the duration of the block.

    ``train_metric_utils.gather_and_reduce_log_dict`` asks ``dist.get_rank()`` of the
    default group; the group is destroyed afterwards, so nothing else in the process sees
    an initialised ``torch.distributed``. An already initialised group is used as it is.
    """
    if dist.is_initialized():
        yield
        return
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


@contextlib.contextmanager
def recorded_tracker() -> Iterator[list[dict[str, Any]]]:
    """The metrics slime reports, as the tracker would receive them.

    slime's loggers end in ``slime.observability.logging_utils.log(args, metrics,
    step_key)`` (wandb / tensorboard). For the block that sink is a recorder: the metric
    values are slime's, only where they go changes (a shim for the tracker, which no
    math reads).
    """
    sink = importlib.import_module("slime.observability.logging_utils")
    seen: list[dict[str, Any]] = []
    original = sink.log

    def record(args: Any, metrics: dict[str, Any], step_key: str) -> None:
        seen.append(dict(metrics))

    sink.log = record
    try:
        yield seen
    finally:
        sink.log = original

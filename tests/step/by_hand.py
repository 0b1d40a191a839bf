"""Helpers for reproducing a framework's step findings by hand: one-group batches of plain
samples, one step of a target under a named config next to the oracle's, and the check that
the reference targets pass under a framework's configs."""

from __future__ import annotations

from typing import Any

import torch

from rlconform.conformance.clauses import step as step_clauses
from rlconform.oracle import step as oracle


class Layout:
    """The dtype and device a step batch is built with (float32 on CPU, as a CI run)."""

    dtype = torch.float32
    device = "cpu"


def sample(
    uid: str,
    mask: list[int],
    reward: float,
    group: str = "g0",
    *,
    delta: float = 0.0,
    **rows: list[float],
) -> dict[str, Any]:
    """A sample whose old, ref and current log-probs are -1 (current -1 + delta), entropies
    and values 0; ``rows`` replaces any of these per-token rows."""
    n = len(mask)
    base = {
        "uid": uid,
        "group": group,
        "mask": mask,
        "reward": reward,
        "old": [-1.0] * n,
        "ref": [-1.0] * n,
        "logp": [-1.0 + delta] * n,
        "entropy": [0.0] * n,
        "values": [0.0] * n,
        "vpreds": [0.0] * n,
    }
    base.update(rows)
    return base


def case(samples: list[dict[str, Any]], shards: list[int], pad: float = 0.0) -> dict[str, Any]:
    return {"samples": samples, "shards": shards, "pad_value": pad, "extra_pad": 0}


def config_named(target: Any, name: str) -> Any:
    return {c.name: c for c in target.trainer_configs()}[name]


def run(target: Any, name: str, the_case: dict[str, Any]) -> tuple[Any, Any, dict[str, Any]]:
    """(the target's StepOutput, the batch it ran on, the oracle's step) under config
    ``name``, the case as that config's step sees it (``case_under``)."""
    config = config_named(target, name)
    the_case = step_clauses.case_under(the_case, config)
    batch = step_clauses.build_batch(Layout, the_case, config.resolved["critic"])
    output = target.train_step(batch, config)
    want = oracle.train_step(the_case["samples"], config.resolved, choices=target.profile.choices())
    return output, batch, want


def reference_passes(reference: Any, configs: list[Any], clause_id: str) -> None:
    """torchref / the oracle pass ``clause_id`` under ``configs`` (a framework's finding is
    never the contract's own)."""
    from rlconform.adapters.base import with_overrides
    from tests.conftest import certify_one

    target = with_overrides(reference, trainer_configs=lambda self: configs)
    result = certify_one(target, clause_id)
    assert result.status == "pass", result.message

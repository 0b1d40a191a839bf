"""What a target's ``train_step`` receives and returns (CONTRACT §2 `step`).

``train_step(batch: StepBatch, config: TrainerConfig, state: dict | None = None) -> StepOutput``
runs the trainer's own chain for one optimizer step on ``batch`` under ``config``: reward
placement, KL in reward, advantages and returns, per-token losses, aggregation over the
micro-batches ``batch.micro_batches`` gives (the trainer's denominators), backward. The
model is outside: ``log_probs`` and ``entropy`` (and ``vpreds`` with a critic) are leaf
tensors with ``requires_grad``; the harness reads their ``.grad`` after the call, so the
target must call ``backward`` on each micro-batch's loss as its trainer does (gradients
accumulate into the leaves) and return the loss it back-propagated.

Layout: responses right-padded to ``width``; ``response_mask`` is 1 for t < L_i,
``loss_mask`` 1 on action tokens (0 at tool tokens and padding). Padding and mask-0
positions of every float field hold whatever the case puts there (finite garbage, NaN in
the hardening domain).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch


@dataclasses.dataclass
class StepBatch:
    """One rollout mini-batch in the canonical padded layout."""

    uids: list[Any]
    index: list[Any]  # group id per sample
    response_mask: torch.Tensor  # (B, T) 1 for t < L_i
    loss_mask: torch.Tensor  # (B, T) 1 on action tokens
    scores: torch.Tensor  # (B,) outcome reward per sample
    old_log_probs: torch.Tensor
    ref_log_probs: torch.Tensor
    log_probs: torch.Tensor  # leaf, requires_grad
    entropy: torch.Tensor  # leaf, requires_grad
    micro_batches: list[list[int]]  # consecutive sample indices, in the order the trainer runs them
    values: torch.Tensor | None = None  # critic values at rollout time
    vpreds: torch.Tensor | None = None  # leaf, requires_grad: the critic's current values


@dataclasses.dataclass
class StepOutput:
    """What one step produced. ``loss``: the actor loss back-propagated, summed over
    micro-batches; ``value_loss`` likewise for the critic. ``stages``: the intermediate
    results the chain exposes, each (B, T): ``token_rewards``, ``advantages``, ``returns``,
    ``per_token_loss`` (leave out what the trainer does not expose). ``metrics``: logged
    values under the trainer's own names. ``state``: what the trainer carries to the next
    step, under contract names (``kl_coef``), and ``carry``: anything opaque the target wants
    back on the next call (its controller object)."""

    loss: Any
    stages: dict[str, torch.Tensor] = dataclasses.field(default_factory=dict)
    metrics: dict[str, float] = dataclasses.field(default_factory=dict)
    state: dict[str, float] = dataclasses.field(default_factory=dict)
    value_loss: Any = None
    carry: Any = None

"""Plumbing shared by the OpenRLHF bindings: configs, the bypassed experience maker, and the
per-token loss that ``PolicyLoss`` / ``ValueLoss`` aggregate.

Nothing here computes. OpenRLHF's per-token tensors are (B, A) over the action (response)
tokens, right-padded, with ``action_mask`` 1 on the tokens the policy produced: the
canonical (B, T) layout with ``response_mask`` as the action mask, so tensors pass through
unchanged (the mask as the bool tensor ``Experience.action_mask`` holds).
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Iterator
from typing import Any

import torch

from rlconform.adapters.base import Inexpressible
from rlconform.adapters.openrlhf.runtime import OpenRLHFRuntime

# Trainer defaults (``openrlhf/cli/train_ppo_ray.py``) of the options the bound code reads.
REWARD_CLIP_RANGE = (-10.0, 10.0)  # --reward.clip_range
GROUP_ESTIMATORS = ("rloo", "reinforce_baseline", "group_norm", "dr_grpo")


def action_mask(response_mask: torch.Tensor) -> torch.Tensor:
    """The canonical action mask as ``Experience.action_mask`` holds it (a BoolTensor)."""
    return response_mask.bool()


class OpenRLHFCommon:
    """Helpers every binding mixin uses (set up by ``OpenRLHFTarget.__init__``)."""

    runtime: OpenRLHFRuntime

    # ------------------------------------------------------------------ per-token losses

    @contextlib.contextmanager
    def per_token_loss(self) -> Iterator[None]:
        """Inside the block, ``PolicyLoss.forward`` and ``ValueLoss.forward`` return the
        per-token loss matrix they pass to ``aggregate_loss`` instead of its scalar.

        Both look ``aggregate_loss`` up in ``openrlhf.models.loss`` at call time; it is
        replaced by the identity on its ``loss`` argument for the block, so everything the
        forward computes before and after it (ratio, clipping, IS coefficient, ValueLoss's
        0.5) is OpenRLHF's own. The aggregation itself is bound on its own (`agg.*`).
        """
        module = self.runtime.loss
        real = module.aggregate_loss

        def keep_per_token(loss: torch.Tensor, loss_mask: torch.Tensor, *a: Any, **k: Any):
            return loss

        module.aggregate_loss = keep_per_token
        try:
            yield
        finally:
            module.aggregate_loss = real

    # ------------------------------------------------------------------ experience maker

    def args(
        self,
        *,
        estimator: str,
        gamma: float = 1.0,
        lambd: float = 1.0,
        n_samples_per_prompt: int = 1,
        clip_range: tuple[float, float] | None = REWARD_CLIP_RANGE,
    ) -> types.SimpleNamespace:
        """The hierarchical trainer config ``compute_advantages_and_returns`` reads: the
        trainer's defaults, the estimator and the case's gamma / lambda / group size. No
        length penalty (``reward.overlong_buffer_len`` / ``stop_properly_penalty_coef``
        unset, their defaults) and advantage whitening with std (``no_std_norm`` False)."""
        ns = types.SimpleNamespace
        return ns(
            algo=ns(
                advantage=ns(estimator=estimator, gamma=gamma, lambd=lambd, no_std_norm=False),
                kl=ns(use_loss=False, estimator="k1", init_coef=0.01, target=None),
            ),
            rollout=ns(n_samples_per_prompt=n_samples_per_prompt),
            reward=ns(
                clip_range=clip_range, overlong_buffer_len=None, stop_properly_penalty_coef=None
            ),
        )

    def experience_maker(self, args: types.SimpleNamespace, kl_coef: float) -> Any:
        """``RemoteExperienceMaker`` without its Ray actor groups: the advantage step reads
        only ``strategy.args``, ``advantage_estimator`` and ``kl_ctl.value``."""
        cls = self.runtime.experience_maker.RemoteExperienceMaker
        maker = object.__new__(cls)
        maker.strategy = types.SimpleNamespace(args=args)
        maker.args = args
        maker.advantage_estimator = args.algo.advantage.estimator
        maker.kl_ctl = self.runtime.kl_controller.FixedKLController(kl_coef)
        return maker

    def experience(self, **fields: Any) -> Any:
        return self.runtime.experience.Experience(**fields)


def group_positions(index: Any, batch_size: int, estimator: str) -> tuple[list[int], int]:
    """``Experience.index`` for rows given in canonical order, and the group size.

    OpenRLHF sorts the rewards of a step by ``Experience.index`` (the sample's position in
    prompt order) and groups them by ``reshape(-1, n_samples_per_prompt)``: samples of a
    prompt must be adjacent in that order and every prompt has the same number of them.
    Row i gets the position that puts its group's rows next to each other, groups in order
    of first appearance; rewards come back in row order (``[indices].split``).
    """
    labels = index.tolist() if hasattr(index, "tolist") else list(index)
    if len(labels) != batch_size:
        raise ValueError(f"index has {len(labels)} labels for {batch_size} rows")
    first: dict[Any, int] = {}
    for label in labels:
        first.setdefault(label, len(first))
    order = sorted(range(batch_size), key=lambda i: (first[labels[i]], i))
    positions = [0] * batch_size
    for position, row in enumerate(order):
        positions[row] = position
    sizes = sorted({labels.count(label) for label in first})
    if len(sizes) > 1:
        raise Inexpressible(
            "groups of unequal size "
            f"{sizes}: OpenRLHF groups rewards by reshape(-1, n_samples_per_prompt)"
        )
    n = sizes[0] if sizes else 2
    if n == 1 and estimator in GROUP_ESTIMATORS:
        raise Inexpressible(
            f"groups of one sample: train_ppo_ray asserts n_samples_per_prompt > 1 for {estimator}"
        )
    return positions, n

"""AReaL bindings of `adv.grpo` and `adv.gae`: ``PPOActor._compute_advantages``.

AReaL has no separate GRPO estimator: its GRPO is ``reward_norm`` with group-level mean and
std (``Normalization``, groups of ``group_size`` consecutive samples) followed by
``_compute_advantages``'s GAE loop with ``discount = gae_lambda = 1`` and no critic
(values 0), which carries the normalised outcome reward (placed at ``seqlens - 2``, the
prediction of the last token) back over the loss-mask tokens. The binding runs
``_compute_advantages`` itself on the padded rollout batch (``layout.Padded``), with
``kl_ctl = 0`` (the KL reward is bound on its own), no reward bias / scaling change, the
default ``reward_clip`` (20), and ``adv_norm`` off.

`adv.gae` is the same function with a critic's ``values`` in the batch (the PPO trainer's
``critic.compute_values`` writes them, column t the value of the state after token t, i.e.
rolled coordinates), ``discount`` = gamma, ``gae_lambda`` = lambda, and ``adv_norm`` =
``NormConfig()`` (batch mean and unbiased batch std: the whitening the clause asks for).
AReaL's value after a sample's last token is ``values[:, W - 1]`` for a row whose sequence
fills the padded width W (``seq_no_eos_mask``: AReaL's test for "truncated") and 0 for
every other row; the binding writes the critic's value at the position after each
sample's last token (the case's bootstrap value, 0 when the case gives none) and lets
AReaL decide which rows use it.

The trainer feeds groups of ``n_samples`` consecutive samples: rows are reordered so each
group's rows are adjacent (outputs come back in row order); unequal group sizes cannot be
written as ``group_size`` and are ``Inexpressible``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import torch

from rlconform.adapters.areal.layout import Padded
from rlconform.adapters.base import Inexpressible


def _outcome(token_level_rewards: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """The (B,) outcome reward AReaL's ``rewards`` field holds, read off token scores that
    sit on each row's last action token (anything else is not one outcome per sample)."""
    scores = []
    for i, row in enumerate(token_level_rewards.tolist()):
        actions = [j for j, m in enumerate(response_mask[i].tolist()) if m]
        last = actions[-1] if actions else None
        elsewhere = [j for j, v in enumerate(row) if v != 0.0 and j != last]
        if elsewhere:
            raise Inexpressible(
                f"row {i}: a score at column {elsewhere[0]}, not on the last action token "
                "(AReaL's reward is one outcome per sample)"
            )
        scores.append(row[last] if last is not None else 0.0)
    return torch.tensor(scores, dtype=torch.float32)


def _group_order(index: Sequence[Any], batch: int) -> tuple[list[int], int]:
    labels = index.tolist() if hasattr(index, "tolist") else list(index)
    if len(labels) != batch:
        raise ValueError(f"index has {len(labels)} labels for {batch} rows")
    first: dict[Any, int] = {}
    for label in labels:
        first.setdefault(label, len(first))
    order = sorted(range(batch), key=lambda i: (first[labels[i]], i))
    sizes = {labels.count(label) for label in first}
    if len(sizes) > 1:
        raise Inexpressible(
            f"groups of sizes {sorted(sizes)}: AReaL's reward_norm groups group_size "
            "consecutive samples (one size per step)"
        )
    return order, (sizes.pop() if sizes else 1)


def _rollout_batch(padded: Padded, **fields: torch.Tensor) -> dict[str, torch.Tensor]:
    """The padded rollout batch ``_compute_advantages`` reads (token ids and log-probs are
    placeholders it does not use with ``kl_ctl = 0``), plus ``fields``."""
    batch = len(padded.lengths)
    return {
        "input_ids": torch.ones((batch, padded.width), dtype=torch.long),
        "attention_mask": padded.attention_mask,
        "loss_mask": padded.loss_mask,
        "logprobs": torch.zeros((batch, padded.width), dtype=torch.float32),
        **fields,
    }


class AdvantageBindings:
    runtime: Any

    def _ppo_actor(self, **options: Any) -> Any:
        cli = self.runtime.cli_args
        config = cli.PPOActorConfig(experiment_name="rlconform", trial_name="rlconform", **options)
        self.runtime.actor.logger.setLevel(logging.WARNING)
        return self.runtime.actor.PPOActor(config, engine=None)

    @torch.no_grad()
    def advantage_grpo(
        self,
        token_level_rewards: torch.Tensor,
        response_mask: torch.Tensor,
        index: Sequence[Any],
        epsilon: float = 1e-6,
        norm_by_std: bool = True,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """adv.grpo: ``reward_norm`` = NormConfig(mean_level="group", std_level="group" or
        None, group_size, eps=epsilon), then ``_compute_advantages``."""
        batch, columns = response_mask.shape
        order, group = _group_order(index, batch)
        scores = _outcome(token_level_rewards, response_mask)
        norm = self.runtime.cli_args.NormConfig(
            mean_level="group",
            std_level="group" if norm_by_std else None,
            group_size=group,
            eps=epsilon,
        )
        actor = self._ppo_actor(
            reward_norm=norm, adv_norm=None, kl_ctl=0.0, discount=1.0, gae_lambda=1.0
        )
        mask = response_mask[order]
        padded = Padded.of(mask)
        out = actor._compute_advantages(_rollout_batch(padded, rewards=scores[order]))
        advantages = padded.response(out["advantages"], columns)
        returns = padded.response(out["returns"], columns)
        back = [0] * batch
        for position, row in enumerate(order):
            back[row] = position
        return advantages[back], returns[back]


def _gae_values(
    padded: Padded, values: torch.Tensor, bootstrap_value: torch.Tensor | None
) -> torch.Tensor:
    """The critic's values in rolled coordinates: response token j at column j, the value
    after the last token (``bootstrap_value``, else 0) at column L_i, 0 beyond."""
    out = padded.rolled(values.detach().to(torch.float32))
    if bootstrap_value is not None:
        for i, n in enumerate(padded.lengths):
            out[i, n] = float(bootstrap_value[i])
    return out


class GaeBindings(AdvantageBindings):
    @torch.no_grad()
    def advantage_gae(
        self,
        token_level_rewards: torch.Tensor,
        values: torch.Tensor,
        response_mask: torch.Tensor,
        gamma: float,
        lam: float,
        bootstrap_value: torch.Tensor | None = None,
        terminated: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """adv.gae: ``_compute_advantages`` with the critic's ``values``, ``discount`` =
        gamma, ``gae_lambda`` = lam, ``adv_norm`` = NormConfig() (batch whitening), no
        reward normalisation, ``kl_ctl`` = 0. ``terminated`` is not an input AReaL has: it
        infers "truncated" from a sequence filling the padded width."""
        batch, columns = response_mask.shape
        if batch == 0:
            raise Inexpressible("an empty batch: AReaL's batched_call needs a trajectory")
        scores = _outcome(token_level_rewards, response_mask)
        actor = self._ppo_actor(
            reward_norm=None,
            adv_norm=self.runtime.cli_args.NormConfig(),
            kl_ctl=0.0,
            discount=float(gamma),
            gae_lambda=float(lam),
        )
        padded = Padded.of(response_mask)
        data = _rollout_batch(
            padded, values=_gae_values(padded, values, bootstrap_value), rewards=scores
        )
        out = actor._compute_advantages(data)
        return padded.response(out["advantages"], columns), padded.response(out["returns"], columns)

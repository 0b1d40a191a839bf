"""ROLL bindings for the CONTRACT area `adv`: the rlvr pipeline and the agentic pipeline.

ROLL has two trainers that compute advantages, each in its own order:

- rlvr (``roll/pipeline/rlvr/rlvr_pipeline.py``): ``reward_postprocess`` (response-level
  normalisation by ``reshape(-1, num_return_sequences)``: groups of one size, contiguous),
  ``compute_token_reward`` (the reward on the last response token), ``compute_advantage``
  (GAE, or the discounted reward-to-go of "reinforce" / "grpo", optionally whitened) with
  ``response_mask=final_response_mask``. Its responses are single-turn: no mask holes.
- agentic (``roll/pipeline/agentic/agentic_pipeline.py``): ``compute_response_level_rewards``
  (``agentic_reward_norm``: ``group_by`` the trajectory group, so groups may differ in
  size), ``compute_token_reward``, ``agentic_compute_advantage`` (the same estimators plus
  ``agentic_reinforce``) on the multi-turn ``response_mask``, whose mask-0 tokens inside a
  response are the environment's observations.

A case goes to the path that can carry it: responses with mask holes, or groups of
different sizes, exist only in the agentic pipeline and go there; every other case goes to
the rlvr pipeline (both functions run the same estimator code on such a case).
"""

from __future__ import annotations

import types
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from rlconform.adapters.base import Inexpressible, Unsupported
from rlconform.adapters.roll.common import RollCommon
from rlconform.adapters.roll.layout import RollLayout, response_lengths

#: Where ``Target.bindings`` says each path lives.
RLVR = "rlvr pipeline"
AGENTIC = "agentic pipeline"


def has_holes(response_mask: torch.Tensor, lengths: torch.Tensor | None = None) -> bool:
    """True when some response (of ``lengths``, default: up to its last action token) has a
    mask-0 token."""
    if lengths is None:
        lengths = response_lengths(response_mask)
    j = torch.arange(response_mask.shape[-1], device=response_mask.device)
    inside = j < lengths.unsqueeze(-1)
    return bool((inside & ~response_mask.bool()).any())


def _group_order(index: Any, batch_size: int) -> tuple[list[int], list[Any], bool]:
    """The row order that makes every group contiguous (ROLL's rlvr pipeline reorders the
    batch by prompt id before normalising), the labels, and whether all groups have one size."""
    labels = index.tolist() if hasattr(index, "tolist") else list(index)
    if len(labels) != batch_size:
        raise ValueError(f"index has {len(labels)} labels for {batch_size} rows")
    first: dict[Any, int] = {}
    for label in labels:
        first.setdefault(label, len(first))
    order = sorted(range(batch_size), key=lambda i: first[labels[i]])
    sizes = {labels.count(label) for label in first}
    return order, labels, len(sizes) <= 1


class AdvantageBindings(RollCommon):
    """`adv` estimators ROLL has: gae, reinforce (REINFORCE++ with whitening), grpo (and
    Dr. GRPO without std), and the group-mean baseline. No rloo / remax / opo."""

    #: adv_estimator the agentic path runs for adv.reinforce_pp ("reinforce", as every
    #: agentic example configures; ``load_agentic_reinforce`` switches it).
    agentic_reinforce_estimator = "reinforce"

    def _agentic(self) -> types.ModuleType:
        if self.runtime.agentic is None:
            raise RuntimeError(f"roll.pipeline.agentic.utils: {self.runtime.agentic_error}")
        return self.runtime.agentic

    # ------------------------------------------------------------------ plumbing

    def _reward_layout(self, rewards: torch.Tensor, response_mask: torch.Tensor) -> RollLayout:
        """The layout of a batch whose responses run at least to their last action token
        and to their last rewarded token (a response may end in mask-0 tokens, e.g. a tool
        observation, that carry the reward)."""
        rewarded = torch.nan_to_num(rewards, nan=1.0) != 0
        lengths = torch.maximum(response_lengths(response_mask), response_lengths(rewarded))
        width = self._layout(response_mask).width
        return RollLayout.build(lengths, response_mask.shape[-1], None, width)

    def _advantage(
        self,
        token_level_rewards: torch.Tensor,
        response_mask: torch.Tensor,
        estimator: str,
        gamma: float,
        lam: float,
        whiten: bool,
        values: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """compute_advantage (rlvr) or agentic_compute_advantage (holes) on ROLL's grid."""
        layout = self._reward_layout(token_level_rewards, response_mask)
        tensors = {
            "token_level_rewards": layout.tokens_to_roll(token_level_rewards, fill=0.0),
            **self._sequence_fields(layout, response_mask),
        }
        if values is not None:
            values = values.to(token_level_rewards.dtype)
            tensors["values"] = layout.tokens_to_roll(values, fill=0.0)
        data = self._proto(tensors)
        kwargs = dict(
            gamma=gamma,
            lambd=lam,
            adv_estimator=estimator,
            advantage_clip=None,
            whiten_advantages=whiten,
            whiten_rewards=False,
            pipeline_config=None,
        )
        if has_holes(response_mask, layout.lengths) or estimator == "agentic_reinforce":
            # The agentic pipeline passes no response_mask: the function reads the multi-turn
            # data.batch["response_mask"][:, 1:] (holes are the environment's tokens).
            data = self._agentic().agentic_compute_advantage(data, **kwargs)
        else:
            final_mask = layout.tokens_to_roll(response_mask, fill=0).to(token_level_rewards.dtype)
            data = self.F.compute_advantage(data, response_mask=final_mask, **kwargs)
        return (
            layout.tokens_from_roll(data.batch["advantages"]),
            layout.tokens_from_roll(data.batch["returns"]),
        )

    def _outcome(
        self,
        token_level_rewards: torch.Tensor,
        response_mask: torch.Tensor,
        index: Any,
        norm_std: bool,
        estimator: str,
        whiten: bool,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Outcome-reward estimators: the response-level score, group-normalised, placed on
        the last response token, then ROLL's reward-to-go with gamma 1."""
        batch_size = token_level_rewards.shape[0]
        order, labels, equal = _group_order(index, batch_size)
        lengths = self._reward_layout(token_level_rewards, response_mask).lengths
        if has_holes(response_mask, lengths) or not equal:
            return self._agentic_outcome(
                token_level_rewards, response_mask, labels, norm_std, estimator, whiten
            )
        perm = torch.tensor(order, dtype=torch.long, device=token_level_rewards.device)
        rewards, mask = token_level_rewards[perm], response_mask[perm]
        n_sample = batch_size // max(len(set(labels)), 1) if batch_size else 1
        layout = self._reward_layout(rewards, mask)
        # ROLL's input is the response-level reward of each sample: its token rewards summed
        # over the response (the canonical rewards are 0 at padding).
        scores = layout.tokens_to_roll(rewards, fill=0.0).sum(-1)
        config = self._config(
            adv_estimator=estimator,
            norm_mean_type="group",
            norm_std_type="group" if norm_std else None,
            reward_clip=None,
            add_token_level_kl=False,
            kl_penalty="kl",
            num_return_sequences=max(n_sample, 1),
        )
        data = self._proto(
            {
                "response_level_rewards": scores,
                **self._no_kl(layout, rewards.dtype),
                **self._sequence_fields(layout, mask),
            }
        )
        data, _ = self.F.reward_postprocess(data, config, {})
        data, _ = self.F.compute_token_reward(
            data, config, self.kl_controller_module.FixedKLController(kl_coef=0.0)
        )
        final_mask = layout.tokens_to_roll(mask, fill=0).to(rewards.dtype)
        data = self.F.compute_advantage(
            data,
            gamma=1.0,
            lambd=1.0,
            adv_estimator=estimator,
            advantage_clip=None,
            whiten_advantages=whiten,
            whiten_rewards=False,
            response_mask=final_mask,
            pipeline_config=config,
        )
        inverse = torch.argsort(perm)
        return (
            layout.tokens_from_roll(data.batch["advantages"])[inverse],
            layout.tokens_from_roll(data.batch["returns"])[inverse],
        )

    def _no_kl(self, layout: RollLayout, dtype: torch.dtype) -> dict[str, torch.Tensor]:
        """``compute_token_reward`` always reads both log-prob fields; the pipeline fills the
        reference with the old log-probs when no reference model runs, so the KL is 0."""
        zeros = torch.zeros((layout.batch_size, layout.width - 1), dtype=dtype)
        return {"old_log_probs": zeros, "ref_log_probs": zeros.clone()}

    def _agentic_outcome(
        self,
        token_level_rewards: torch.Tensor,
        response_mask: torch.Tensor,
        labels: list[Any],
        norm_std: bool,
        estimator: str,
        whiten: bool,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """compute_response_level_rewards (agentic_reward_norm grouped by traj_group_id) ->
        compute_token_reward -> agentic_compute_advantage(gamma 1)."""
        agentic = self._agentic()
        layout = self._reward_layout(token_level_rewards, response_mask)
        norm = agentic.RewardNormalizationConfig(
            grouping="traj_group_id",
            norm_mean_type="group",
            norm_std_type="group" if norm_std else None,
        )
        config = self._config(
            adv_estimator=estimator,
            reward_normalization=norm,
            reward_clip=None,
            add_token_level_kl=False,
            kl_penalty="kl",
        )
        data = self._proto(
            {
                # The agentic pipeline's token scores; the function sums them per sample.
                "scores": layout.tokens_to_roll(token_level_rewards, fill=0.0),
                **self._no_kl(layout, token_level_rewards.dtype),
                **self._sequence_fields(layout, response_mask),
            }
        )
        data.non_tensor_batch["traj_group_id"] = np.array([str(x) for x in labels], dtype=object)
        data, _ = agentic.compute_response_level_rewards(batch=data, pipeline_config=config)
        data, _ = self.F.compute_token_reward(
            data, config, self.kl_controller_module.FixedKLController(kl_coef=0.0)
        )
        data = agentic.agentic_compute_advantage(
            data=data,
            gamma=1.0,
            lambd=1.0,
            adv_estimator=estimator,
            advantage_clip=None,
            whiten_advantages=whiten,
            whiten_rewards=False,
            pipeline_config=config,
        )
        return (
            layout.tokens_from_roll(data.batch["advantages"]),
            layout.tokens_from_roll(data.batch["returns"]),
        )

    # ------------------------------------------------------------------ estimators

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
        """adv.gae -> ``compute_advantage`` / ``agentic_compute_advantage`` with
        ``adv_estimator="gae"`` and ``whiten_advantages=True``. ROLL has no bootstrap value
        (the value after the grid's last column is 0; profile ``truncated_bootstrap`` false)."""
        if terminated is not None and not bool(terminated.bool().all()):
            raise Inexpressible("ROLL's GAE takes no bootstrap value for a truncated sample")
        return self._advantage(
            token_level_rewards,
            response_mask,
            "gae",
            gamma,
            lam,
            whiten=bool(self.profile.get("roll_whiten_advantages", True)),
            values=values,
        )

    def advantage_reinforce_pp(
        self, token_level_rewards: torch.Tensor, response_mask: torch.Tensor, gamma: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """adv.reinforce_pp -> adv_estimator "reinforce" with ``whiten_advantages=True``
        (discounted reward-to-go over every grid position, whitened over the batch); on the
        agentic path ``agentic_reinforce_estimator``."""
        estimator = "reinforce"
        lengths = self._reward_layout(token_level_rewards, response_mask).lengths
        if has_holes(response_mask, lengths) or self.agentic_reinforce_estimator != "reinforce":
            estimator = self.agentic_reinforce_estimator
        return self._advantage(token_level_rewards, response_mask, estimator, gamma, 1.0, True)

    def advantage_grpo(
        self,
        token_level_rewards: torch.Tensor,
        response_mask: torch.Tensor,
        index: Sequence[Any],
        epsilon: float = 1e-6,
        norm_by_std: bool = True,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """adv.grpo -> adv_estimator "grpo" (group mean and std, eps 1e-6 fixed). Dr. GRPO
        (``norm_by_std=False``) -> adv_estimator "reinforce" with norm_mean_type "group" and
        no std type, gamma 1: under "grpo" ``reward_postprocess`` overwrites both norm types
        with "group", so ROLL's Dr. GRPO is the group-centred "reinforce" configuration."""
        if abs(float(epsilon) - 1e-6) > 1e-18:
            raise Unsupported(f"ROLL's reward normalisation has a fixed eps 1e-6, not {epsilon}")
        estimator = "grpo" if norm_by_std else "reinforce"
        return self._outcome(
            token_level_rewards, response_mask, index, norm_by_std, estimator, False
        )

    def advantage_reinforce_pp_baseline(
        self, token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: Sequence[Any]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """adv.reinforce_pp_baseline -> norm_mean_type "group" (no std), "reinforce"
        reward-to-go with gamma 1, ``whiten_advantages=True``."""
        return self._outcome(token_level_rewards, response_mask, index, False, "reinforce", True)


__all__ = ["AGENTIC", "RLVR", "AdvantageBindings", "has_holes"]

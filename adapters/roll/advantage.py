"""ROLL bindings for the CONTRACT area `adv` (``roll.utils.functionals``).

ROLL's estimators run in its pipeline order (``roll/pipeline/rlvr/rlvr_pipeline.py``):
``reward_postprocess`` (response-level normalisation: group for GRPO), then
``compute_token_reward`` (reward on the last response token; the KL term is off here), then
``compute_advantage`` (GAE, or the discounted reward-to-go of "reinforce" / "grpo",
optionally whitened). Each binding drives that chain on ROLL's (B, L - 1) grid.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from rlconform.adapters.roll.common import RollCommon
from rlconform.adapters.roll.layout import RollLayout


def _group_order(index: Any, batch_size: int) -> tuple[list[int], int]:
    """The row order that makes every group contiguous (ROLL's pipeline reorders the batch
    by prompt id before normalising) and the common group size ROLL needs (its
    ``num_return_sequences``); unequal groups raise NotImplementedError."""
    labels = index.tolist() if hasattr(index, "tolist") else list(index)
    if len(labels) != batch_size:
        raise ValueError(f"index has {len(labels)} labels for {batch_size} rows")
    first: dict[Any, int] = {}
    for label in labels:
        first.setdefault(label, len(first))
    order = sorted(range(batch_size), key=lambda i: first[labels[i]])
    sizes = {labels.count(label) for label in first}
    if len(sizes) > 1:
        raise NotImplementedError(
            f"ROLL normalises groups by reshape(-1, num_return_sequences): unequal group "
            f"sizes {sorted(sizes)} cannot be expressed"
        )
    return order, (sizes.pop() if sizes else 1)


class AdvantageBindings(RollCommon):
    """`adv` estimators ROLL has: gae, reinforce (REINFORCE++ with whitening), grpo (and
    Dr. GRPO without std), and the group-mean baseline. No rloo / remax / opo."""

    # ------------------------------------------------------------------ plumbing

    def _advantage(
        self,
        layout: RollLayout,
        token_level_rewards: torch.Tensor,
        response_mask: torch.Tensor,
        estimator: str,
        gamma: float,
        lam: float,
        whiten: bool,
        values: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        tensors = {
            "token_level_rewards": token_level_rewards,
            **self._sequence_fields(layout, response_mask),
        }
        if values is not None:
            tensors["values"] = values
        data = self._proto(tensors)
        final_mask = layout.tokens_to_roll(response_mask, fill=0).to(token_level_rewards.dtype)
        data = self.F.compute_advantage(
            data,
            gamma=gamma,
            lambd=lam,
            adv_estimator=estimator,
            advantage_clip=None,
            whiten_advantages=whiten,
            whiten_rewards=False,
            response_mask=final_mask,
            pipeline_config=None,
        )
        advantages = layout.tokens_from_roll(data.batch["advantages"])
        returns = layout.tokens_from_roll(data.batch["returns"])
        return advantages, returns

    def _outcome(
        self,
        token_level_rewards: torch.Tensor,
        response_mask: torch.Tensor,
        index: Any,
        norm_mean_type: str,
        norm_std_type: str | None,
        estimator: str,
        whiten: bool,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Outcome-reward estimators: response-level reward -> reward_postprocess ->
        compute_token_reward -> compute_advantage(gamma=1), rows grouped as ROLL needs."""
        batch_size = token_level_rewards.shape[0]
        order, n_sample = _group_order(index, batch_size)
        perm = torch.tensor(order, dtype=torch.long, device=token_level_rewards.device)
        rewards, mask = token_level_rewards[perm], response_mask[perm]
        # The canonical input is token rewards; ROLL's input is the response-level reward,
        # which the contract defines as their sum over action tokens.
        scores = torch.where(mask.bool(), rewards, torch.zeros_like(rewards)).sum(-1)
        layout = self._layout(mask)
        config = self._config(
            adv_estimator=estimator,
            norm_mean_type=norm_mean_type,
            norm_std_type=norm_std_type,
            reward_clip=None,
            add_token_level_kl=False,
            kl_penalty="kl",
            num_return_sequences=n_sample,
        )
        zeros = torch.zeros(
            (batch_size, layout.width - 1), dtype=rewards.dtype, device=rewards.device
        )
        data = self._proto(
            {
                "response_level_rewards": scores,
                # compute_token_reward always reads both; the pipeline fills ref with old
                # when there is no reference model, so the KL term is exactly 0.
                "old_log_probs": zeros,
                "ref_log_probs": zeros.clone(),
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
        advantages = layout.tokens_from_roll(data.batch["advantages"])
        returns = layout.tokens_from_roll(data.batch["returns"])
        inverse = torch.argsort(perm)
        return advantages[inverse], returns[inverse]

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
        """adv.gae -> ``compute_advantage(adv_estimator="gae", whiten_advantages=True)``.
        ROLL has no bootstrap for truncated samples (the value after the last token is 0)."""
        if terminated is not None and not bool(terminated.bool().all()):
            raise NotImplementedError("ROLL's GAE has no bootstrap value for truncated samples")
        layout = self._layout(response_mask)
        return self._advantage(
            layout,
            layout.tokens_to_roll(token_level_rewards, fill=0.0),
            response_mask,
            "gae",
            gamma,
            lam,
            whiten=bool(self.profile.get("roll_whiten_advantages", True)),
            values=layout.tokens_to_roll(values.to(token_level_rewards.dtype), fill=0.0),
        )

    def advantage_reinforce_pp(
        self, token_level_rewards: torch.Tensor, response_mask: torch.Tensor, gamma: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """adv.reinforce_pp -> ``compute_advantage(adv_estimator="reinforce",
        whiten_advantages=True)`` (discounted reward-to-go, whitened over the batch)."""
        layout = self._layout(response_mask)
        return self._advantage(
            layout,
            layout.tokens_to_roll(token_level_rewards, fill=0.0),
            response_mask,
            "reinforce",
            gamma,
            1.0,
            whiten=True,
        )

    def advantage_grpo(
        self,
        token_level_rewards: torch.Tensor,
        response_mask: torch.Tensor,
        index: Sequence[Any],
        epsilon: float = 1e-6,
        norm_by_std: bool = True,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """adv.grpo -> adv_estimator "grpo" (group mean and std, eps 1e-6 fixed in
        ``reward_norm``); Dr. GRPO (``norm_by_std=False``) -> norm_mean_type "group" without
        a std type under the same "reinforce"/"grpo" reward-to-go."""
        if abs(float(epsilon) - 1e-6) > 1e-18:
            raise NotImplementedError(f"ROLL's reward_norm has a fixed eps 1e-6, not {epsilon}")
        if norm_by_std:
            return self._outcome(
                token_level_rewards, response_mask, index, "group", "group", "grpo", False
            )
        return self._outcome(
            token_level_rewards, response_mask, index, "group", None, "reinforce", False
        )

    def advantage_reinforce_pp_baseline(
        self, token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: Sequence[Any]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """adv.reinforce_pp_baseline -> norm_mean_type "group" (no std), "reinforce"
        reward-to-go with gamma 1, ``whiten_advantages=True``."""
        return self._outcome(
            token_level_rewards, response_mask, index, "group", None, "reinforce", True
        )

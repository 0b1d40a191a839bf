"""Advantages: ``GRPOTrainer._generate_and_score_completions``, the code that turns the
reward functions' scores into advantages (``multi_objective_aggregation`` and
``scale_rewards``), run on the case's completions and scores."""

from __future__ import annotations

from typing import Any

import torch

from rlconform.adapters.base import Inexpressible
from rlconform.adapters.trl import layout


class AdvantageBindings:
    """``advantage_grpo`` (sum_then_normalize, scale_rewards group / none) and
    ``advantage_gdpo`` (normalize_then_sum, one reward function per component)."""

    shell: Any
    profile: Any

    def advantage_grpo(
        self,
        token_level_rewards: torch.Tensor,
        response_mask: torch.Tensor,
        index: Any,
        epsilon: float = 1e-4,
        norm_by_std: bool = True,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        self._own_epsilon(epsilon)
        scores = _outcome_scores(token_level_rewards, response_mask)
        return self._score(
            scores.reshape(-1, 1),
            response_mask,
            index,
            scale_rewards="group" if norm_by_std else "none",
            multi_objective_aggregation="sum_then_normalize",
        )

    def advantage_gdpo(
        self,
        reward_components: torch.Tensor,
        response_mask: torch.Tensor,
        index: Any,
        weights: Any,
        epsilon: float = 1e-4,
        norm_by_std: bool = True,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        self._own_epsilon(epsilon)
        if not norm_by_std:
            raise Inexpressible(
                "TRL's normalize_then_sum always divides each component by its group std "
                "(scale_rewards does not apply to it)"
            )
        return self._score(
            reward_components,
            response_mask,
            index,
            multi_objective_aggregation="normalize_then_sum",
            reward_weights=[float(w) for w in weights],
        )

    # -- plumbing -----------------------------------------------------------------------

    def _own_epsilon(self, epsilon: float) -> None:
        if epsilon != self.profile.grpo_eps:
            raise Inexpressible(
                f"TRL adds {self.profile.grpo_eps} to the std; epsilon={epsilon} is not a parameter"
            )

    def _score(
        self,
        rewards_per_func: torch.Tensor,
        response_mask: torch.Tensor,
        index: Any,
        **config: Any,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        labels = list(index)
        if not labels:
            raise Inexpressible("TRL scores a generation batch of at least one group")
        grouping = layout.group_order(labels)
        if grouping is None:
            raise Inexpressible(
                "TRL's groups all hold num_generations completions; this batch has groups "
                "of different sizes"
            )
        order, size = grouping
        args = self.shell.config(
            num_generations=size,
            per_device_train_batch_size=len(labels),
            **config,
        )
        masks = layout.completions(response_mask)
        permuted = torch.tensor(order, dtype=torch.long)
        tool_masks = masks.tool_masks
        output, _ = self.shell.generate_and_score(
            args,
            lengths=[masks.lengths[i] for i in order],
            tool_masks=None if tool_masks is None else [tool_masks[i] for i in order],
            rewards_per_func=rewards_per_func.detach().to("cpu", torch.float32)[permuted],
            reward_names=[f"reward_{k}" for k in range(rewards_per_func.shape[1])],
        )
        advantages = layout.unpermute(output["advantages"], order)
        tokens = layout.on_actions(advantages.to(rewards_per_func.dtype), response_mask)
        return tokens, tokens.clone()


def _outcome_scores(rewards: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """The one score per completion TRL's reward functions return, from the canonical token
    rewards: the contract's score_i, the sum of the row's token rewards over the response
    (tool-output tokens included; token rewards are 0 at padding). TRL never sees token
    rewards, so this is the layout conversion, summed in float64 and cast back."""
    return rewards.detach().to(torch.float64).sum(dim=1).to(rewards.dtype)

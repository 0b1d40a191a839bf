"""OpenRLHF bindings for the CONTRACT area `adv`: ``RemoteExperienceMaker.
compute_advantages_and_returns``, the trainer's advantage step, run on one ``Experience``.

That step takes one reward per sample (``Experience.rewards``) and the per-token KL
(``Experience.kl``); it subtracts the estimator's group baseline from the rewards, builds
token rewards with ``compute_reward(r, kl_ctl.value, kl, action_mask, reward.clip_range)``
(r on the last action token, ``-kl_ctl.value * kl`` on every token), runs GAE
(``get_advantages_and_returns``) or the discounted return (``get_cumulative_returns``), and
whitens over the batch for gae / reinforce / reinforce_baseline. Estimators:

- ``gae`` (adv.gae), ``reinforce`` (adv.reinforce_pp: REINFORCE++),
  ``reinforce_baseline`` (adv.reinforce_pp_baseline), ``group_norm`` (adv.grpo),
  ``dr_grpo`` (adv.grpo with norm_by_std off: Dr. GRPO), ``rloo`` (adv.rloo).

Two ways the canonical token rewards enter, both exact in floating point:

- Outcome estimators (group baselines): the reward is the sample's score, the sum of its
  token rewards over the response (CONTRACT adv), and the KL is 0.
- Token-reward estimators (gae, reinforce): OpenRLHF's dense token rewards are its
  ``-kl_coef * kl`` term, so the row enters as r = 0, ``kl_ctl.value = 1`` and
  ``kl = -token_rewards``: ``compute_reward`` returns the row bit for bit (negation and
  multiplication by 1 are exact) and the returns are computed from it as in training.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from rlconform.adapters.base import Inexpressible
from rlconform.adapters.openrlhf.common import (
    REWARD_CLIP_RANGE,
    OpenRLHFCommon,
    action_mask,
    group_positions,
)

OPENRLHF_GROUP_EPS = 1e-9  # group_norm: (r - mean) / (std + 1e-9)


class AdvantageBindings(OpenRLHFCommon):
    """`adv` estimators OpenRLHF has: gae, reinforce, reinforce_baseline, group_norm,
    dr_grpo and rloo (no remax, opo, pass@k, gpg, optimal token baseline, gdpo)."""

    def _advantage_step(
        self,
        estimator: str,
        response_mask: torch.Tensor,
        *,
        rewards: torch.Tensor,
        kl: torch.Tensor,
        kl_coef: float,
        positions: list[int],
        n_samples_per_prompt: int,
        values: torch.Tensor | None = None,
        gamma: float = 1.0,
        lambd: float = 1.0,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        args = self.args(
            estimator=estimator,
            gamma=gamma,
            lambd=lambd,
            n_samples_per_prompt=n_samples_per_prompt,
            clip_range=REWARD_CLIP_RANGE,
        )
        maker = self.experience_maker(args, kl_coef)
        experience = self.experience(
            action_mask=action_mask(response_mask),
            rewards=rewards,
            kl=kl,
            values=values,
            index=positions,
            info={},
        )
        (experience,) = maker.compute_advantages_and_returns([experience])
        return experience.advantages, experience.returns

    def _outcome(
        self,
        estimator: str,
        token_level_rewards: torch.Tensor,
        response_mask: torch.Tensor,
        index: Sequence[Any],
    ) -> tuple[torch.Tensor, torch.Tensor]:
        positions, n = group_positions(index, token_level_rewards.shape[0], estimator)
        # The canonical input is token rewards; OpenRLHF's is the sample's reward, which the
        # contract defines as their sum over the response (reward padding is 0).
        return self._advantage_step(
            estimator,
            response_mask,
            rewards=token_level_rewards.sum(-1),
            kl=torch.zeros_like(token_level_rewards),
            kl_coef=0.0,
            positions=positions,
            n_samples_per_prompt=n,
        )

    def _token_rewards(
        self,
        estimator: str,
        token_level_rewards: torch.Tensor,
        response_mask: torch.Tensor,
        values: torch.Tensor | None,
        gamma: float,
        lambd: float,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        batch = token_level_rewards.shape[0]
        return self._advantage_step(
            estimator,
            response_mask,
            rewards=torch.zeros(
                batch, dtype=token_level_rewards.dtype, device=token_level_rewards.device
            ),
            kl=-token_level_rewards,
            kl_coef=1.0,
            positions=list(range(batch)),
            n_samples_per_prompt=1,
            values=values,
            gamma=gamma,
            lambd=lambd,
        )

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
        """adv.gae: estimator ``gae`` (``get_advantages_and_returns`` + whitening)."""
        if terminated is not None and not bool(terminated.bool().all()):
            raise Inexpressible(
                "a truncated sample's bootstrap value: OpenRLHF's get_advantages_and_returns "
                "ends every sample with next value 0 (it has no bootstrap input)"
            )
        return self._token_rewards("gae", token_level_rewards, response_mask, values, gamma, lam)

    def advantage_reinforce_pp(
        self, token_level_rewards: torch.Tensor, response_mask: torch.Tensor, gamma: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """adv.reinforce_pp: estimator ``reinforce`` (``get_cumulative_returns`` + whitening)."""
        return self._token_rewards(
            "reinforce", token_level_rewards, response_mask, None, gamma, 1.0
        )

    def advantage_grpo(
        self,
        token_level_rewards: torch.Tensor,
        response_mask: torch.Tensor,
        index: Sequence[Any],
        epsilon: float = 1e-6,
        norm_by_std: bool = True,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """adv.grpo: estimator ``group_norm`` ((r - mean) / (std + 1e-9)); with norm_by_std
        off, ``dr_grpo`` (r - mean)."""
        if norm_by_std and epsilon != OPENRLHF_GROUP_EPS:
            raise Inexpressible(
                f"epsilon {epsilon!r}: OpenRLHF's group_norm divides by std + 1e-9 (fixed)"
            )
        estimator = "group_norm" if norm_by_std else "dr_grpo"
        return self._outcome(estimator, token_level_rewards, response_mask, index)

    def advantage_rloo(
        self, token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: Sequence[Any]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """adv.rloo: estimator ``rloo`` (r minus the mean of the group's other rewards)."""
        return self._outcome("rloo", token_level_rewards, response_mask, index)

    def advantage_reinforce_pp_baseline(
        self, token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: Sequence[Any]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """adv.reinforce_pp_baseline: estimator ``reinforce_baseline`` (r - group mean,
        returns, whitening)."""
        return self._outcome("reinforce_baseline", token_level_rewards, response_mask, index)

"""verl bindings for the CONTRACT area `adv`: the estimators of ``ADV_ESTIMATOR_REGISTRY``
(GAE through the trainer's ``compute_advantage`` dispatcher).

Group labels become verl's ``uid`` column (a numpy object array); per-estimator options go
where verl reads them (a function argument or the ``AlgoConfig``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from rlconform.adapters.verl.imports import import_verl_module


def _estimator(name: str) -> Any:
    from verl.trainer.ppo.core_algos import get_adv_estimator_fn

    return get_adv_estimator_fn(name)


def _algo_config(**fields: Any) -> Any:
    from verl.trainer.config import AlgoConfig

    return AlgoConfig(**fields)


def _uids(index: Sequence[Any]) -> np.ndarray:
    labels = index.tolist() if hasattr(index, "tolist") else list(index)
    return np.array(labels, dtype=object)


def _attention_span(response_mask: torch.Tensor) -> torch.Tensor:
    """The response half of verl's attention mask: 1 up to the last action token, tool
    observations (mask holes) included."""
    reached_from_right = response_mask.to(torch.int64).flip(-1).cummax(-1).values
    return reached_from_right.flip(-1)


class AdvantageOps:
    """`adv` operations through verl's advantage estimators."""

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
        """adv.gae: ``ray_trainer.compute_advantage(data, "gae", gamma, lam, config)``.

        verl's GAE has no bootstrap input (the value after the last token is always 0), so
        ``bootstrap_value`` and ``terminated`` have nowhere to go.
        """
        from verl import DataProto

        trainer = import_verl_module("verl.trainer.ppo.ray_trainer")
        data = DataProto.from_dict(
            tensors={
                "token_level_rewards": token_level_rewards,
                "values": values,
                "response_mask": response_mask,
            }
        )
        data = trainer.compute_advantage(
            data, "gae", gamma=gamma, lam=lam, config=_algo_config(gamma=gamma, lam=lam)
        )
        return data.batch["advantages"], data.batch["returns"]

    def advantage_grpo(
        self,
        token_level_rewards: torch.Tensor,
        response_mask: torch.Tensor,
        index: Sequence[Any],
        epsilon: float = 1e-6,
        norm_by_std: bool = True,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """adv.grpo: registry ``grpo`` (``compute_grpo_outcome_advantage``)."""
        return _estimator("grpo")(
            token_level_rewards=token_level_rewards,
            response_mask=response_mask,
            index=_uids(index),
            epsilon=epsilon,
            norm_adv_by_std_in_grpo=norm_by_std,
        )

    def advantage_rloo(
        self, token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: Sequence[Any]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """adv.rloo: registry ``rloo``."""
        return _estimator("rloo")(
            token_level_rewards=token_level_rewards,
            response_mask=response_mask,
            index=_uids(index),
            config=_algo_config(),
        )

    def advantage_reinforce_pp(
        self, token_level_rewards: torch.Tensor, response_mask: torch.Tensor, gamma: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """adv.reinforce_pp: registry ``reinforce_plus_plus`` (reads gamma from the config)."""
        return _estimator("reinforce_plus_plus")(
            token_level_rewards=token_level_rewards,
            response_mask=response_mask,
            config=_algo_config(gamma=gamma),
        )

    def advantage_reinforce_pp_baseline(
        self, token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: Sequence[Any]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """adv.reinforce_pp_baseline: registry ``reinforce_plus_plus_baseline``."""
        return _estimator("reinforce_plus_plus_baseline")(
            token_level_rewards=token_level_rewards,
            response_mask=response_mask,
            index=_uids(index),
            config=_algo_config(),
        )

    def advantage_remax(
        self,
        token_level_rewards: torch.Tensor,
        reward_baselines: torch.Tensor,
        response_mask: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """adv.remax: registry ``remax``."""
        return _estimator("remax")(
            token_level_rewards=token_level_rewards,
            reward_baselines=reward_baselines,
            response_mask=response_mask,
            config=_algo_config(),
        )

    def advantage_opo(
        self, token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: Sequence[Any]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """adv.opo: registry ``opo``."""
        return _estimator("opo")(
            token_level_rewards=token_level_rewards,
            response_mask=response_mask,
            index=_uids(index),
            config=_algo_config(),
        )

    def advantage_grpo_passk(
        self,
        token_level_rewards: torch.Tensor,
        response_mask: torch.Tensor,
        index: Sequence[Any],
        epsilon: float = 1e-6,
        norm_by_std: bool = True,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """adv.grpo_passk: registry ``grpo_passk`` (reads the std flag from the config)."""
        return _estimator("grpo_passk")(
            token_level_rewards=token_level_rewards,
            response_mask=response_mask,
            index=_uids(index),
            epsilon=epsilon,
            config=_algo_config(norm_adv_by_std_in_grpo=norm_by_std),
        )

    def advantage_gpg(
        self,
        token_level_rewards: torch.Tensor,
        response_mask: torch.Tensor,
        index: Sequence[Any],
        f_norm: float = 1.0,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """adv.gpg: registry ``gpg``."""
        return _estimator("gpg")(
            token_level_rewards=token_level_rewards,
            response_mask=response_mask,
            index=_uids(index),
            f_norm=f_norm,
            config=_algo_config(),
        )

    def advantage_optimal_token_baseline(
        self,
        token_level_rewards: torch.Tensor,
        response_mask: torch.Tensor,
        index: Sequence[Any],
        old_log_probs: torch.Tensor,
        sum_pi_squared: torch.Tensor,
        rollout_is_weights: torch.Tensor | None = None,
        epsilon: float = 1e-8,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """adv.optimal_token_baseline: registry ``optimal_token_baseline``."""
        return _estimator("optimal_token_baseline")(
            token_level_rewards=token_level_rewards,
            response_mask=response_mask,
            index=_uids(index),
            old_log_probs=old_log_probs,
            sum_pi_squared=sum_pi_squared,
            rollout_is_weights=rollout_is_weights,
            epsilon=epsilon,
        )

    def advantage_gdpo(
        self,
        reward_components: torch.Tensor,
        response_mask: torch.Tensor,
        index: Sequence[Any],
        weights: Sequence[float] | None = None,
        epsilon: float = 1e-6,
        norm_by_std: bool = True,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """adv.gdpo: registry ``gdpo`` with one ``non_tensor_batch`` key per reward component
        and a one-token-prompt batch, where verl places each component itself."""
        rows, components = reward_components.shape
        keys = [f"reward_component_{k}" for k in range(components)]
        prompt = torch.ones((rows, 1), dtype=torch.int64, device=response_mask.device)
        batch = {
            "prompts": prompt,
            "attention_mask": torch.cat([prompt, _attention_span(response_mask)], dim=-1),
        }
        non_tensor_batch = {
            key: reward_components[:, k].detach().cpu().numpy() for k, key in enumerate(keys)
        }
        config = _algo_config(
            gdpo_reward_keys=keys,
            gdpo_reward_weights=None if weights is None else list(weights),
            norm_adv_by_std_in_grpo=norm_by_std,
        )
        return _estimator("gdpo")(
            token_level_rewards=torch.zeros_like(response_mask, dtype=reward_components.dtype),
            response_mask=response_mask,
            index=_uids(index),
            epsilon=epsilon,
            norm_adv_by_std_in_grpo=norm_by_std,
            config=config,
            non_tensor_batch=non_tensor_batch,
            batch=batch,
        )

"""verl bindings for the CONTRACT area `kl`: ``core_algos.kl_penalty``, the trainer's
``apply_kl_penalty`` and the KL controllers."""

from __future__ import annotations

import torch

from rlconform.adapters.verl.imports import import_verl_module


class KLOps:
    """`kl` operations through verl's KL functions."""

    def kl_penalty(
        self, logprob: torch.Tensor, ref_logprob: torch.Tensor, mode: str
    ) -> torch.Tensor:
        """kl.estimators / kl.straight_through: ``core_algos.kl_penalty`` (a trailing "+" is
        verl's straight-through form)."""
        from verl.trainer.ppo.core_algos import kl_penalty

        return kl_penalty(logprob, ref_logprob, mode)

    def apply_kl_in_reward(
        self,
        token_scores: torch.Tensor,
        old_logprob: torch.Tensor,
        ref_logprob: torch.Tensor,
        response_mask: torch.Tensor,
        beta: float,
        mode: str,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """kl.in_reward: ``ray_trainer.apply_kl_penalty`` with a fixed controller at ``beta``;
        the metric is its ``actor/reward_kl_penalty``."""
        from verl import DataProto
        from verl.trainer.ppo.core_algos import FixedKLController

        trainer = import_verl_module("verl.trainer.ppo.ray_trainer")
        data = DataProto.from_dict(
            tensors={
                "token_level_scores": token_scores,
                "old_log_probs": old_logprob,
                "ref_log_prob": ref_logprob,
                "response_mask": response_mask,
            }
        )
        data, metrics = trainer.apply_kl_penalty(data, FixedKLController(beta), kl_penalty=mode)
        return data.batch["token_level_rewards"], torch.as_tensor(
            metrics["actor/reward_kl_penalty"]
        )

    def kl_controller_update(
        self,
        kind: str,
        value: float,
        current_kl: float,
        n_steps: int,
        target_kl: float,
        horizon: float,
    ) -> float:
        """kl.adaptive_controller: ``get_kl_controller(KLControlConfig)`` then one ``update``."""
        from verl.trainer.config.algorithm import KLControlConfig
        from verl.trainer.ppo.core_algos import get_kl_controller

        config = KLControlConfig(type=kind, kl_coef=value, target_kl=target_kl, horizon=horizon)
        controller = get_kl_controller(config)
        controller.update(current_kl, n_steps)
        return float(controller.value)

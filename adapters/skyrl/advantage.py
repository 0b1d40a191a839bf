"""SkyRL bindings of `adv.grpo`, `adv.rloo`, `adv.reinforce_pp` and `adv.gae`: the trainer's
own ``RayPPOTrainer.compute_advantages_and_returns`` (step 6 of ``RayPPOTrainer.train``),
which calls ``ppo_utils.compute_advantages_and_returns`` (the estimator registry) with
``response_mask``, ``metadata["uids"]``, the critic's ``values`` and the algorithm config's
``gamma`` / ``lambd`` / ``grpo_norm_by_std``.

The method runs on a trainer object built without ``__init__`` (which starts Ray, the
inference engines and the dataloaders): it reads only ``cfg`` (a default
``SkyRLTrainConfig`` with the estimator's fields set) and writes ``all_metrics``. The batch
is SkyRL's ``TrainingInputBatch`` in SkyRL's layout (``layout.RightAligned``); outcome-only
training (``generator.step_wise_trajectories`` False, the default).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from rlconform.adapters.base import Inexpressible
from rlconform.adapters.skyrl.layout import RightAligned

# The trainer calls the estimators without an epsilon: the registry functions' default.
ESTIMATOR_EPSILON = 1e-6


def _labels(index: Sequence[Any], batch: int) -> list[Any]:
    labels = index.tolist() if hasattr(index, "tolist") else list(index)
    if len(labels) != batch:
        raise ValueError(f"index has {len(labels)} labels for {batch} rows")
    return labels


class AdvantageBindings:
    runtime: Any

    def _config(self, **algorithm: Any) -> Any:
        """A default ``SkyRLTrainConfig`` with ``trainer.algorithm`` fields set."""
        cfg = self.runtime.config.SkyRLTrainConfig()
        for key, value in algorithm.items():
            if not hasattr(cfg.trainer.algorithm, key):
                raise AttributeError(f"SkyRL's AlgorithmConfig has no field {key!r}")
            setattr(cfg.trainer.algorithm, key, value)
        return cfg

    def _standin_trainer(self, cfg: Any) -> Any:
        """``RayPPOTrainer`` without ``__init__`` (module docstring): what the methods
        bound here read."""
        trainer = object.__new__(self.runtime.trainer.RayPPOTrainer)
        trainer.cfg = cfg
        trainer.all_metrics = {}
        trainer.reward_kl_controller = None
        return trainer

    @torch.no_grad()
    def _estimate(
        self,
        estimator: str,
        token_level_rewards: torch.Tensor,
        action_mask: torch.Tensor,
        index: Sequence[Any] | None,
        values: torch.Tensor | None = None,
        **algorithm: Any,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        batch = action_mask.shape[0]
        layout = RightAligned.of(action_mask)
        labels = _labels(index, batch) if index is not None else [str(i) for i in range(batch)]
        rewards = layout.to_skyrl(token_level_rewards)
        response_mask = layout.response_mask()
        data = self.runtime.training_batch.TrainingInputBatch(
            {
                "rewards": rewards,
                "response_mask": response_mask,
                "loss_mask": layout.loss_mask(action_mask),
                "values": layout.to_skyrl(values) if values is not None else None,
            }
        )
        lengths = list(layout.lengths)
        data.metadata = {
            "uids": labels,
            "avg_response_length": sum(lengths) / max(len(lengths), 1),
            "pad_size": 0,
        }
        cfg = self._config(advantage_estimator=estimator, **algorithm)
        out = self._standin_trainer(cfg).compute_advantages_and_returns(data)
        return layout.to_canonical(out["advantages"]), layout.to_canonical(out["returns"])

    def advantage_grpo(
        self,
        token_level_rewards: torch.Tensor,
        response_mask: torch.Tensor,
        index: Sequence[Any],
        epsilon: float = 1e-6,
        norm_by_std: bool = True,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """adv.grpo: ``advantage_estimator="grpo"``, ``grpo_norm_by_std``."""
        if epsilon != ESTIMATOR_EPSILON:
            raise Inexpressible(
                f"epsilon {epsilon!r}: SkyRL's trainer calls the GRPO estimator with its "
                f"default epsilon {ESTIMATOR_EPSILON}"
            )
        return self._estimate(
            "grpo", token_level_rewards, response_mask, index, grpo_norm_by_std=norm_by_std
        )

    def advantage_rloo(
        self,
        token_level_rewards: torch.Tensor,
        response_mask: torch.Tensor,
        index: Sequence[Any],
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """adv.rloo: ``advantage_estimator="rloo"``."""
        return self._estimate("rloo", token_level_rewards, response_mask, index)

    def advantage_reinforce_pp(
        self,
        token_level_rewards: torch.Tensor,
        response_mask: torch.Tensor,
        gamma: float,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """adv.reinforce_pp: ``advantage_estimator="reinforce++"``, ``gamma``."""
        return self._estimate(
            "reinforce++", token_level_rewards, response_mask, None, gamma=float(gamma)
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
        """adv.gae: ``advantage_estimator="gae"``, ``gamma``, ``lambd`` (every response ends
        with next value 0: SkyRL's GAE takes no bootstrap value)."""
        if bootstrap_value is not None:
            raise Inexpressible("SkyRL's GAE takes no bootstrap value (next value 0 at the end)")
        return self._estimate(
            "gae",
            token_level_rewards,
            response_mask,
            None,
            values=values,
            gamma=float(gamma),
            lambd=float(lam),
        )

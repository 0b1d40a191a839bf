"""SkyRL bindings of `kl.estimators`, `kl.in_reward` and `kl.adaptive_controller`.

``compute_approx_kl`` is the estimator of both KL paths: the policy worker's KL loss
(``use_kl_loss``, the default) and the trainer's ``apply_reward_kl_penalty``
(``use_kl_in_reward``), each with ``loss_mask``. The estimator binding passes no mask (the
elementwise values the contract compares); the reward binding runs
``RayPPOTrainer.apply_reward_kl_penalty`` itself on a stand-in trainer (``advantage.py``),
with the fixed controller's coefficient as beta, and reads the ``avg_kl`` metric it logs.
The controllers are ``FixedKLController`` / ``AdaptiveKLController`` as
``get_kl_controller`` builds them, updated as the trainer updates them
(``update(current=avg_kl, n_steps=batch size)``).
"""

from __future__ import annotations

from typing import Any

import torch

from rlconform.adapters.base import Unsupported
from rlconform.adapters.skyrl.layout import RightAligned

# contract estimator names -> SkyRL's kl_estimator_type choices
ESTIMATORS = {
    "kl": "k1",
    "k1": "k1",
    "abs": "abs",
    "mse": "k2",
    "k2": "k2",
    "low_var_kl": "k3",
    "k3": "k3",
}


def _estimator(mode: str) -> str:
    if mode not in ESTIMATORS:
        raise Unsupported(f"SkyRL's compute_approx_kl has no {mode!r} estimator (k1, abs, k2, k3)")
    return ESTIMATORS[mode]


class KLBindings:
    runtime: Any

    def kl_penalty(
        self, logprob: torch.Tensor, ref_logprob: torch.Tensor, mode: str
    ) -> torch.Tensor:
        """kl.estimators: ``compute_approx_kl(logprob, ref, kl_estimator_type=...)``."""
        return self.runtime.ppo_utils.compute_approx_kl(
            logprob, ref_logprob, loss_mask=None, kl_estimator_type=_estimator(mode)
        )

    def apply_kl_in_reward(
        self,
        token_scores: torch.Tensor,
        old_logprob: torch.Tensor,
        ref_logprob: torch.Tensor,
        response_mask: torch.Tensor,
        beta: float,
        mode: str,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """kl.in_reward: ``apply_reward_kl_penalty`` with ``use_kl_in_reward``,
        ``kl_loss_coef = beta`` and the fixed controller; the metric is its ``avg_kl``."""
        estimator = _estimator(mode)
        layout = RightAligned.of(response_mask)
        data = self.runtime.training_batch.TrainingInputBatch(
            {
                "rewards": layout.to_skyrl(token_scores),
                "loss_mask": layout.loss_mask(response_mask),
                "response_mask": layout.response_mask(),
                "action_log_probs": layout.to_skyrl(old_logprob),
                "base_action_log_probs": layout.to_skyrl(ref_logprob),
            }
        )
        data.metadata = {}
        cfg = self._config(
            use_kl_in_reward=True,
            use_kl_loss=False,
            kl_loss_coef=float(beta),
            kl_estimator_type=estimator,
        )
        trainer = self._standin_trainer(cfg)
        trainer.reward_kl_controller = self.runtime.ppo_utils.get_kl_controller(
            cfg.trainer.algorithm
        )
        out = trainer.apply_reward_kl_penalty(data)
        metric = torch.tensor(out.metadata["metrics"]["avg_kl"], dtype=torch.float64)
        return layout.to_canonical(out["rewards"]), metric

    def kl_controller_update(
        self,
        kind: str,
        value: float,
        current_kl: float,
        n_steps: int,
        target_kl: float,
        horizon: float,
    ) -> float:
        """kl.adaptive_controller: the controller ``get_kl_controller`` builds for
        ``kl_ctrl.type`` = ``kind``, at coefficient ``value``, updated once."""
        if kind not in ("fixed", "adaptive"):
            raise Unsupported(f"SkyRL's kl_ctrl.type has no {kind!r} controller")
        algorithm = self._config(kl_loss_coef=float(value)).trainer.algorithm
        algorithm.kl_ctrl.type = kind
        algorithm.kl_ctrl.kl_target = target_kl
        algorithm.kl_ctrl.horizon = horizon
        controller = self.runtime.ppo_utils.get_kl_controller(algorithm)
        controller.update(current=current_kl, n_steps=n_steps)
        return float(controller.value)

"""verl bindings for the CONTRACT area `adv`: every estimator through the trainer's own
advantage call, with the arguments the trainer passes.

0.9.x (v1 trainer): ``_compute_advantage`` calls
``v1.utils.compute_advantage_for_multi_trajectories(data, batch_keys, adv_estimator, gamma,
lam, num_repeat, norm_adv_by_std_in_grpo, config)``; for GRPO only each session's last
output enters ``compute_advantage`` and its advantage (read at the first action token) is
broadcast to the session's rows. Each sample here is one session with one output: its key is
``{uid}_{session}_0``, the agent loop's ``{uid}_{session_id}_{index}``. Older lines call
``ray_trainer.compute_advantage`` directly (``Release.advantage_entry``).

``compute_advantage`` forwards ``gamma`` and ``lam`` to GAE and ``norm_adv_by_std_in_grpo``
to the loop GRPO only; every other estimator gets ``config`` (the ``AlgoConfig``) and the
batch fields. Arguments the trainer never passes (an ``epsilon`` other than verl's default,
GPG's ``f_norm``) have no setting: such cases raise ``Unsupported``. Options verl reads from
the config go there (RF++'s gamma, pass@k's and GDPO's std flag, GDPO's reward keys); the
trainer settings choose ``grpo`` / ``rloo`` or their vectorized registry entries.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from rlconform.adapters.base import Inexpressible, Unsupported
from rlconform.adapters.verl.imports import import_verl_module

_DEFAULT_EPSILON = {"grpo": 1e-6, "grpo_vectorized": 1e-6, "grpo_passk": 1e-6, "gdpo": 1e-6}


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


def _needs_default(name: str, epsilon: float, default: float | None = None) -> None:
    expected = _DEFAULT_EPSILON.get(name, default)
    if expected is not None and epsilon != expected:
        raise Unsupported(
            f"verl's trainer passes no epsilon to {name!r}: only its default {expected} runs"
        )


class AdvantageOps:
    """`adv` operations through the trainer's advantage call (module docstring)."""

    def _trainer_advantage(
        self,
        estimator: str,
        tensors: dict[str, torch.Tensor],
        index: Sequence[Any] | None = None,
        non_tensors: dict[str, np.ndarray] | None = None,
        gamma: float = 1.0,
        lam: float = 1.0,
        norm_by_std: bool = True,
        config: Any = None,
        v0: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The trainer's advantage call (``v0``: ``RayPPOTrainer``'s, whatever the line)."""
        from verl import DataProto

        rows = next(iter(tensors.values())).shape[0]
        uids = _uids(index) if index is not None else np.array([f"u{i}" for i in range(rows)])
        data = DataProto.from_dict(
            tensors=dict(tensors), non_tensors={"uid": uids, **(non_tensors or {})}
        )
        kwargs = {
            "adv_estimator": estimator,
            "gamma": gamma,
            "lam": lam,
            "num_repeat": 1,
            "norm_adv_by_std_in_grpo": norm_by_std,
            "config": _algo_config() if config is None else config,
        }
        if self.release.advantage_entry == "multi_trajectories" and not v0:
            v1 = import_verl_module("verl.trainer.ppo.v1.utils")
            keys = [f"{uid}_{session}_0" for session, uid in enumerate(uids.tolist())]
            data = v1.compute_advantage_for_multi_trajectories(data, batch_keys=keys, **kwargs)
        else:
            trainer = import_verl_module("verl.trainer.ppo.ray_trainer")
            data = trainer.compute_advantage(data, **kwargs)
        return data.batch["advantages"], data.batch["returns"]

    def _outcome(
        self,
        name: str,
        token_level_rewards: torch.Tensor,
        response_mask: torch.Tensor,
        index: Sequence[Any] | None,
        **options: Any,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        tensors = {"token_level_rewards": token_level_rewards, "response_mask": response_mask}
        return self._trainer_advantage(name, tensors, index, **options)

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
        """adv.gae: ``compute_advantage(data, "gae", gamma, lam, config)``. verl's GAE has no
        bootstrap input (the value after the last token is 0): a truncated sample with a
        bootstrap value cannot be expressed (profile ``truncated_bootstrap`` is False)."""
        if terminated is not None and not bool(terminated.all()):
            raise Inexpressible("verl's GAE takes no bootstrap value for a truncated sample")
        tensors = {
            "token_level_rewards": token_level_rewards,
            "values": values,
            "response_mask": response_mask,
        }
        return self._trainer_advantage("gae", tensors, gamma=gamma, lam=lam)

    def advantage_grpo(
        self,
        token_level_rewards: torch.Tensor,
        response_mask: torch.Tensor,
        index: Sequence[Any],
        epsilon: float = 1e-6,
        norm_by_std: bool = True,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """adv.grpo: ``grpo`` (``grpo_vectorized`` under the alternate settings, which the
        dispatcher hands only the config)."""
        name = "grpo_vectorized" if self.settings.vectorized_estimators else "grpo"
        _needs_default(name, epsilon)
        return self._outcome(
            name,
            token_level_rewards,
            response_mask,
            index,
            norm_by_std=norm_by_std,
            config=_algo_config(norm_adv_by_std_in_grpo=norm_by_std),
        )

    def advantage_rloo(
        self, token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: Sequence[Any]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """adv.rloo: ``rloo`` (``rloo_vectorized`` under the alternate settings)."""
        name = "rloo_vectorized" if self.settings.vectorized_estimators else "rloo"
        return self._outcome(name, token_level_rewards, response_mask, index)

    def advantage_reinforce_pp(
        self, token_level_rewards: torch.Tensor, response_mask: torch.Tensor, gamma: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """adv.reinforce_pp: ``reinforce_plus_plus`` (reads gamma from the config)."""
        return self._outcome(
            "reinforce_plus_plus",
            token_level_rewards,
            response_mask,
            None,
            gamma=gamma,
            config=_algo_config(gamma=gamma),
        )

    def advantage_reinforce_pp_baseline(
        self, token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: Sequence[Any]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """adv.reinforce_pp_baseline: ``reinforce_plus_plus_baseline``."""
        return self._outcome(
            "reinforce_plus_plus_baseline", token_level_rewards, response_mask, index
        )

    def advantage_remax(
        self,
        token_level_rewards: torch.Tensor,
        reward_baselines: torch.Tensor,
        response_mask: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """adv.remax: ``remax`` (the batch's ``reward_baselines``)."""
        tensors = {
            "token_level_rewards": token_level_rewards,
            "reward_baselines": reward_baselines,
            "response_mask": response_mask,
        }
        return self._trainer_advantage("remax", tensors)

    def advantage_opo(
        self, token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: Sequence[Any]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """adv.opo: ``opo``."""
        return self._outcome("opo", token_level_rewards, response_mask, index)

    def advantage_grpo_passk(
        self,
        token_level_rewards: torch.Tensor,
        response_mask: torch.Tensor,
        index: Sequence[Any],
        epsilon: float = 1e-6,
        norm_by_std: bool = True,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """adv.grpo_passk: ``grpo_passk`` (reads the std flag from the config)."""
        _needs_default("grpo_passk", epsilon)
        return self._outcome(
            "grpo_passk",
            token_level_rewards,
            response_mask,
            index,
            norm_by_std=norm_by_std,
            config=_algo_config(norm_adv_by_std_in_grpo=norm_by_std),
        )

    def advantage_gpg(
        self,
        token_level_rewards: torch.Tensor,
        response_mask: torch.Tensor,
        index: Sequence[Any],
        f_norm: float = 1.0,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """adv.gpg: ``gpg``; the dispatcher passes no ``f_norm`` (verl's default 1.0)."""
        if f_norm != 1.0:
            raise Unsupported("verl's trainer passes no f_norm to 'gpg': only 1.0 runs")
        return self._outcome("gpg", token_level_rewards, response_mask, index)

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
        """adv.optimal_token_baseline: ``optimal_token_baseline`` with the batch's
        ``old_log_probs``, ``sum_pi_squared`` and (optional) ``rollout_is_weights``."""
        _needs_default("optimal_token_baseline", epsilon, default=1e-8)
        tensors = {
            "token_level_rewards": token_level_rewards,
            "response_mask": response_mask,
            "old_log_probs": old_log_probs,
            "sum_pi_squared": sum_pi_squared,
        }
        if rollout_is_weights is not None:
            tensors["rollout_is_weights"] = rollout_is_weights
        return self._trainer_advantage("optimal_token_baseline", tensors, index)

    def advantage_gdpo(
        self,
        reward_components: torch.Tensor,
        response_mask: torch.Tensor,
        index: Sequence[Any],
        weights: Sequence[float] | None = None,
        epsilon: float = 1e-6,
        norm_by_std: bool = True,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """adv.gdpo: ``gdpo``. On the ``RayPPOTrainer`` path the batch carries one
        ``non_tensor_batch`` key per reward component and the prompt / attention mask, where
        verl places each component itself (a one-token prompt here). The v1 trainer's
        ``_compute_advantage`` fetches only uid, response_mask, rm_scores and the log-prob /
        value fields from the TransferQueue: the components never reach GDPO there, so the
        v1 binding hands it exactly that batch (the alternate settings take the v0 path)."""
        _needs_default("gdpo", epsilon)
        config = _algo_config(
            gdpo_reward_keys=[f"reward_component_{k}" for k in range(reward_components.shape[1])],
            gdpo_reward_weights=None if weights is None else list(weights),
            norm_adv_by_std_in_grpo=norm_by_std,
        )
        if self.release.advantage_entry == "multi_trajectories" and not self.settings.gdpo_v0:
            tensors = {
                "token_level_rewards": torch.zeros_like(
                    response_mask, dtype=reward_components.dtype
                ),
                "response_mask": response_mask,
            }
            return self._trainer_advantage(
                "gdpo", tensors, index, norm_by_std=norm_by_std, config=config
            )
        rows, components = reward_components.shape
        keys = [f"reward_component_{k}" for k in range(components)]
        prompt = torch.ones((rows, 1), dtype=torch.int64, device=response_mask.device)
        tensors = {
            "token_level_rewards": torch.zeros_like(response_mask, dtype=reward_components.dtype),
            "response_mask": response_mask,
            "prompts": prompt,
            "attention_mask": torch.cat([prompt, _attention_span(response_mask)], dim=-1),
        }
        non_tensors = {
            key: reward_components[:, k].detach().cpu().numpy() for k, key in enumerate(keys)
        }
        return self._trainer_advantage(
            "gdpo", tensors, index, non_tensors, norm_by_std=norm_by_std, config=config, v0=True
        )

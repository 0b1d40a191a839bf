"""Oracle-target operations for `adv`: padded tensors -> ragged lists -> oracle -> padded.

Each row is handed over at full width: padding is just more mask-0 positions, whose
rewards the protocol keeps at 0 (a hole's reward is credited, a zero one changes nothing),
and whose values and log-probs the oracle never reads. Rows come back at full width.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from rlconform.adapters.oracle_target._convert import binary_rows, pad_like
from rlconform.conformance.harness import to_float_list
from rlconform.oracle import advantage as oracle


def _labels(index: Any) -> list[Any]:
    return index.tolist() if hasattr(index, "tolist") else list(index)


def _pair(
    result: tuple[list[list[float]], list[list[float]]], like: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    advantages, returns = result
    return pad_like(advantages, like), pad_like(returns, like)


class AdvantageOps:
    """`adv` operations that delegate to `rlconform.oracle.advantage`."""

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
        n = response_mask.shape[0]
        if bootstrap_value is None or terminated is None:
            done, boot = [True] * n, [0.0] * n
        else:
            done, boot = [bool(x) for x in terminated.tolist()], to_float_list(bootstrap_value)
        result = oracle.gae(
            to_float_list(token_level_rewards),
            to_float_list(values),
            binary_rows(response_mask),
            done,
            boot,
            gamma=gamma,
            lam=lam,
            whiten_degenerate=self.profile.get("whiten_degenerate", "zeros"),
            whiten_std_eps=self.profile.get("whiten_std_eps"),
            discount_at_holes=bool(self.profile.get("discount_at_holes", False)),
        )
        return _pair(result, token_level_rewards)

    def advantage_grpo(
        self,
        token_level_rewards: torch.Tensor,
        response_mask: torch.Tensor,
        index: Sequence[Any],
        epsilon: float = 1e-6,
        norm_by_std: bool = True,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        result = oracle.grpo(
            to_float_list(token_level_rewards),
            binary_rows(response_mask),
            _labels(index),
            epsilon=epsilon,
            norm_by_std=norm_by_std,
            std_ddof=self.profile.get("grpo_std_ddof", 1),
            singleton=self.profile.get("grpo_singleton", "mean0_std1"),
        )
        return _pair(result, token_level_rewards)

    def advantage_rloo(
        self, token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: Sequence[Any]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        result = oracle.rloo(
            to_float_list(token_level_rewards),
            binary_rows(response_mask),
            _labels(index),
            singleton=self.profile.get("rloo_singleton", "score"),
        )
        return _pair(result, token_level_rewards)

    def advantage_reinforce_pp(
        self, token_level_rewards: torch.Tensor, response_mask: torch.Tensor, gamma: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        result = oracle.reinforce_pp(
            to_float_list(token_level_rewards),
            binary_rows(response_mask),
            gamma=gamma,
            whiten_degenerate=self.profile.get("whiten_degenerate", "zeros"),
            whiten_std_eps=self.profile.get("whiten_std_eps"),
            discount_at_holes=bool(self.profile.get("discount_at_holes", False)),
        )
        return _pair(result, token_level_rewards)

    def advantage_reinforce_pp_baseline(
        self, token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: Sequence[Any]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        result = oracle.reinforce_pp_baseline(
            to_float_list(token_level_rewards),
            binary_rows(response_mask),
            _labels(index),
            singleton_baseline=self.profile.get("singleton_baseline", "zero"),
            whiten_degenerate=self.profile.get("whiten_degenerate", "zeros"),
            whiten_std_eps=self.profile.get("whiten_std_eps"),
        )
        return _pair(result, token_level_rewards)

    def advantage_remax(
        self,
        token_level_rewards: torch.Tensor,
        reward_baselines: torch.Tensor,
        response_mask: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        result = oracle.remax(
            to_float_list(token_level_rewards),
            binary_rows(response_mask),
            to_float_list(reward_baselines),
        )
        return _pair(result, token_level_rewards)

    def advantage_opo(
        self, token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: Sequence[Any]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        result = oracle.opo(
            to_float_list(token_level_rewards),
            binary_rows(response_mask),
            _labels(index),
            singleton_baseline=self.profile.get("singleton_baseline", "zero"),
        )
        return _pair(result, token_level_rewards)

    def advantage_grpo_passk(
        self,
        token_level_rewards: torch.Tensor,
        response_mask: torch.Tensor,
        index: Sequence[Any],
        epsilon: float = 1e-6,
        norm_by_std: bool = True,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        result = oracle.grpo_passk(
            to_float_list(token_level_rewards),
            binary_rows(response_mask),
            _labels(index),
            epsilon=epsilon,
            norm_by_std=norm_by_std,
            std_ddof=self.profile.get("grpo_std_ddof", 1),
        )
        return _pair(result, token_level_rewards)

    def advantage_gpg(
        self,
        token_level_rewards: torch.Tensor,
        response_mask: torch.Tensor,
        index: Sequence[Any],
        f_norm: float = 1.0,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        result = oracle.gpg(
            to_float_list(token_level_rewards),
            binary_rows(response_mask),
            _labels(index),
            f_norm=f_norm,
            alpha_rule=self.profile.get("gpg_alpha", "informative"),
            singleton_baseline=self.profile.get("singleton_baseline", "zero"),
        )
        return _pair(result, token_level_rewards)

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
        result = oracle.optimal_token_baseline(
            to_float_list(token_level_rewards),
            binary_rows(response_mask),
            _labels(index),
            to_float_list(old_log_probs),
            to_float_list(sum_pi_squared),
            None if rollout_is_weights is None else to_float_list(rollout_is_weights),
            epsilon=epsilon,
        )
        return _pair(result, token_level_rewards)

    def advantage_gdpo(
        self,
        reward_components: torch.Tensor,
        response_mask: torch.Tensor,
        index: Sequence[Any],
        weights: Sequence[float] | None = None,
        epsilon: float = 1e-6,
        norm_by_std: bool = True,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        components = to_float_list(reward_components)
        k = reward_components.shape[-1]
        result = oracle.gdpo(
            components,
            binary_rows(response_mask),
            _labels(index),
            [1.0] * k if weights is None else [float(w) for w in weights],
            epsilon=epsilon,
            norm_by_std=norm_by_std,
            std_ddof=self.profile.get("grpo_std_ddof", 1),
            singleton=self.profile.get("grpo_singleton", "mean0_std1"),
            whiten_degenerate=self.profile.get("whiten_degenerate", "zeros"),
            whiten_std_eps=self.profile.get("whiten_std_eps"),
        )
        like = torch.empty(
            response_mask.shape, dtype=reward_components.dtype, device=response_mask.device
        )
        return _pair(result, like)

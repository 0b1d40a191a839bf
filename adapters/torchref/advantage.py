"""torchref operations for the CONTRACT area `adv` (vectorized torch, any device).

Every estimator takes (B, T) right-padded tensors and ``response_mask`` = 1 on action
tokens (0 at holes and padding), like verl's ``response_mask``. Token rewards are read over
the whole row (CONTRACT reward credit: holes included; the protocol keeps padding rewards 0);
the return-based estimators credit a hole's reward to the preceding action token. Values,
log-probs and the like at mask-0 positions are never used (they may be NaN) and both outputs
are 0 there. Group labels (``index``) are a list or numpy array of hashable labels, as
verl's ``uid`` array. Profile ``discount_at_holes`` (default False): holes count as
discount steps.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

WHITEN_EPS = 1e-8


def _actions(response_mask: torch.Tensor) -> torch.Tensor:
    return response_mask.bool()


def _on_actions(x: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    """x at action tokens, exactly 0 elsewhere (NaN or inf there never leaks)."""
    return torch.where(actions, x, torch.zeros((), dtype=x.dtype, device=x.device))


def _scores(rewards: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    """score_i = sum of the sample's token rewards over its response (holes included)."""
    return rewards.sum(-1)


def _credited(rewards: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    """Each reward moved onto the nearest preceding action token (the first one when none
    precedes); rows without an action token have nowhere to carry it: all zeros."""
    width = rewards.shape[-1]
    if width == 0 or rewards.shape[0] == 0:
        return torch.zeros_like(rewards)
    cols = torch.arange(width, device=rewards.device).expand(rewards.shape)
    last = torch.where(actions, cols, torch.full_like(cols, -1)).cummax(dim=-1).values
    first = actions.to(torch.int64).argmax(dim=-1, keepdim=True).expand(rewards.shape)
    carrier = torch.where(last >= 0, last, first)
    return _on_actions(torch.zeros_like(rewards).scatter_add_(-1, carrier, rewards), actions)


def _discounts(t: int, following: torch.Tensor, factor: float, at_holes: bool) -> torch.Tensor:
    """factor ** (steps from column t to each row's next action token ``following``;
    -1 = none: one step), or ``factor`` when holes are not steps."""
    if not at_holes:
        return torch.full(following.shape, factor, dtype=torch.float64, device=following.device)
    steps = torch.where(following >= 0, following - t, torch.ones_like(following))
    return torch.tensor(factor, dtype=torch.float64, device=following.device) ** steps


def _group_ids(index: Any, device: torch.device) -> tuple[torch.Tensor, int]:
    """Dense group ids 0..G-1 in order of first appearance of each label."""
    labels = index.tolist() if hasattr(index, "tolist") else list(index)
    first_seen: dict[Any, int] = {}
    ids = [first_seen.setdefault(label, len(first_seen)) for label in labels]
    return torch.tensor(ids, dtype=torch.long, device=device), len(first_seen)


def _group_sum(values: torch.Tensor, ids: torch.Tensor, n_groups: int) -> torch.Tensor:
    out = torch.zeros((n_groups, *values.shape[1:]), dtype=values.dtype, device=values.device)
    return out.index_add_(0, ids, values)


def _group_mean_std(
    scores: torch.Tensor, ids: torch.Tensor, n_groups: int, ddof: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-sample group mean, std (two-pass, ``ddof``) and group size."""
    count = _group_sum(torch.ones_like(scores), ids, n_groups)[ids]
    mean = _group_sum(scores, ids, n_groups)[ids] / count
    squares = _group_sum((scores - mean) ** 2, ids, n_groups)[ids]
    std = torch.sqrt(squares / (count - ddof).clamp_min(1))
    return mean, std, count


def _group_baseline(
    scores: torch.Tensor, ids: torch.Tensor, n_groups: int, singleton: str
) -> torch.Tensor:
    """Group mean; a group of one: 0 (``"zero"``) or its own score (``"self"``)."""
    mean, _, count = _group_mean_std(scores, ids, n_groups, ddof=0)
    if singleton == "zero":
        return torch.where(count > 1, mean, torch.zeros_like(mean))
    if singleton == "self":
        return torch.where(count > 1, mean, scores)
    raise ValueError(f"unknown singleton_baseline {singleton!r}")


def _group_normalized(
    scores: torch.Tensor,
    ids: torch.Tensor,
    n_groups: int,
    *,
    epsilon: float,
    norm_by_std: bool,
    ddof: int,
    singleton: str,
) -> torch.Tensor:
    mean, std, count = _group_mean_std(scores, ids, n_groups, ddof)
    if singleton == "mean0_std1":
        mean = torch.where(count > 1, mean, torch.zeros_like(mean))
        std = torch.where(count > 1, std, torch.ones_like(std))
    elif singleton != "zero":
        raise ValueError(f"unknown grpo_singleton {singleton!r}")
    advantages = (scores - mean) / (std + epsilon) if norm_by_std else scores - mean
    if singleton == "zero":
        advantages = torch.where(count > 1, advantages, torch.zeros_like(advantages))
    return advantages


def _whiten(
    x: torch.Tensor, actions: torch.Tensor, degenerate: str, std_eps: float | None = None
) -> torch.Tensor:
    """(x - mean) / sqrt(var + 1e-8) over all action tokens; unbiased two-pass variance.
    ``std_eps`` (profile ``whiten_std_eps``): (x - mean) / (std + std_eps) instead."""
    n = int(actions.sum())
    if n <= 1:
        if degenerate == "raise":
            raise ValueError(f"whitening needs at least 2 action tokens in the batch, got {n}")
        if degenerate != "zeros":
            raise ValueError(f"unknown whiten_degenerate {degenerate!r}")
        return torch.zeros_like(x)
    x = _on_actions(x, actions)
    mean = x.sum() / n
    centred = _on_actions(x - mean, actions)
    var = (centred * centred).sum() / (n - 1)
    if std_eps is None:
        return _on_actions(centred * torch.rsqrt(var + WHITEN_EPS), actions)
    return _on_actions(centred / (torch.sqrt(var) + std_eps), actions)


def _reverse_cumsum(x: torch.Tensor) -> torch.Tensor:
    return torch.flip(torch.cumsum(torch.flip(x, dims=[-1]), dim=-1), dims=[-1])


def _outputs(per_sample: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    advantages = _on_actions(per_sample.unsqueeze(-1).expand(actions.shape), actions)
    return advantages, advantages.clone()


class AdvantageOps:
    """Vectorized `adv` operations in the canonical padded layout; each returns
    ``(advantages, returns)``, both (B, T) in the rewards' dtype."""

    @torch.no_grad()
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
        """adv.gae. ``terminated`` (B,) bool, None = every sample terminated; a truncated
        sample bootstraps from ``bootstrap_value`` (B,) after its last action token."""
        actions = _actions(response_mask)
        rewards = _credited(token_level_rewards, actions)
        values = _on_actions(values.to(rewards.dtype), actions)
        next_value = torch.zeros(rewards.shape[0], dtype=rewards.dtype, device=rewards.device)
        if bootstrap_value is not None and terminated is not None:
            boot = bootstrap_value.to(device=rewards.device, dtype=rewards.dtype)
            next_value = torch.where(terminated.to(rewards.device).bool(), next_value, boot)
        next_adv = torch.zeros_like(next_value)
        raw = torch.zeros_like(rewards)
        following = torch.full(next_value.shape, -1, dtype=torch.int64, device=rewards.device)
        at_holes = bool(self.profile.get("discount_at_holes", False))
        for t in reversed(range(rewards.shape[-1])):
            acting = actions[:, t]
            g = _discounts(t, following, gamma, at_holes).to(rewards.dtype)
            gl = _discounts(t, following, gamma * lam, at_holes).to(rewards.dtype)
            adv_t = rewards[:, t] + g * next_value - values[:, t] + gl * next_adv
            raw[:, t] = torch.where(acting, adv_t, torch.zeros_like(adv_t))
            next_value = torch.where(acting, values[:, t], next_value)
            next_adv = torch.where(acting, adv_t, next_adv)
            following = torch.where(acting, torch.full_like(following, t), following)
        returns = _on_actions(raw + values, actions)
        degenerate = self.profile.get("whiten_degenerate", "zeros")
        return _whiten(raw, actions, degenerate, self.profile.get("whiten_std_eps")), returns

    @torch.no_grad()
    def advantage_grpo(
        self,
        token_level_rewards: torch.Tensor,
        response_mask: torch.Tensor,
        index: Sequence[Any],
        epsilon: float = 1e-6,
        norm_by_std: bool = True,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """adv.grpo (Dr. GRPO with ``norm_by_std=False``)."""
        actions = _actions(response_mask)
        scores = _scores(token_level_rewards, actions)
        ids, n_groups = _group_ids(index, scores.device)
        per_sample = _group_normalized(
            scores,
            ids,
            n_groups,
            epsilon=epsilon,
            norm_by_std=norm_by_std,
            ddof=self.profile.get("grpo_std_ddof", 1),
            singleton=self.profile.get("grpo_singleton", "mean0_std1"),
        )
        return _outputs(per_sample, actions)

    @torch.no_grad()
    def advantage_rloo(
        self, token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: Sequence[Any]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """adv.rloo: score minus the mean of the other samples of the group."""
        actions = _actions(response_mask)
        scores = _scores(token_level_rewards, actions)
        ids, n_groups = _group_ids(index, scores.device)
        count = _group_sum(torch.ones_like(scores), ids, n_groups)[ids]
        others = (_group_sum(scores, ids, n_groups)[ids] - scores) / (count - 1).clamp_min(1)
        singleton = self.profile.get("rloo_singleton", "score")
        if singleton not in ("score", "zero"):
            raise ValueError(f"unknown rloo_singleton {singleton!r}")
        alone = scores if singleton == "score" else torch.zeros_like(scores)
        return _outputs(torch.where(count > 1, scores - others, alone), actions)

    @torch.no_grad()
    def advantage_reinforce_pp(
        self, token_level_rewards: torch.Tensor, response_mask: torch.Tensor, gamma: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """adv.reinforce_pp: discounted return over action tokens, then batch-whitened."""
        actions = _actions(response_mask)
        rewards = _credited(token_level_rewards, actions)
        returns = torch.zeros_like(rewards)
        running = torch.zeros(rewards.shape[0], dtype=rewards.dtype, device=rewards.device)
        following = torch.full(running.shape, -1, dtype=torch.int64, device=rewards.device)
        at_holes = bool(self.profile.get("discount_at_holes", False))
        for t in reversed(range(rewards.shape[-1])):
            g = _discounts(t, following, gamma, at_holes).to(rewards.dtype)
            running = torch.where(actions[:, t], rewards[:, t] + g * running, running)
            returns[:, t] = running
            following = torch.where(actions[:, t], torch.full_like(following, t), following)
        returns = _on_actions(returns, actions)
        degenerate = self.profile.get("whiten_degenerate", "zeros")
        return (
            _whiten(returns, actions, degenerate, self.profile.get("whiten_std_eps")),
            returns,
        )

    @torch.no_grad()
    def advantage_reinforce_pp_baseline(
        self, token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: Sequence[Any]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """adv.reinforce_pp_baseline: score - group mean, broadcast, batch-whitened."""
        actions = _actions(response_mask)
        scores = _scores(token_level_rewards, actions)
        ids, n_groups = _group_ids(index, scores.device)
        baseline = _group_baseline(
            scores, ids, n_groups, self.profile.get("singleton_baseline", "zero")
        )
        centred, _ = _outputs(scores - baseline, actions)
        advantages = _whiten(
            centred,
            actions,
            self.profile.get("whiten_degenerate", "zeros"),
            self.profile.get("whiten_std_eps"),
        )
        return advantages, advantages.clone()

    @torch.no_grad()
    def advantage_remax(
        self,
        token_level_rewards: torch.Tensor,
        reward_baselines: torch.Tensor,
        response_mask: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """adv.remax: reverse cumulative reward minus the greedy baseline reward."""
        actions = _actions(response_mask)
        returns = _on_actions(_reverse_cumsum(_credited(token_level_rewards, actions)), actions)
        baselines = reward_baselines.to(device=returns.device, dtype=returns.dtype).unsqueeze(-1)
        return _on_actions(returns - baselines, actions), returns

    @torch.no_grad()
    def advantage_opo(
        self, token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: Sequence[Any]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """adv.opo: length-weighted group baseline sum(L_j s_j) / sum(L_j)."""
        actions = _actions(response_mask)
        scores = _scores(token_level_rewards, actions)
        lengths = actions.sum(-1).to(scores.dtype)
        ids, n_groups = _group_ids(index, scores.device)
        total_length = _group_sum(lengths, ids, n_groups)[ids]
        weighted = _group_sum(lengths * scores, ids, n_groups)[ids]
        baseline = weighted / total_length.clamp_min(1)
        singleton = self.profile.get("singleton_baseline", "zero")
        if singleton not in ("zero", "self"):
            raise ValueError(f"unknown singleton_baseline {singleton!r}")
        if singleton == "zero":
            count = _group_sum(torch.ones_like(scores), ids, n_groups)[ids]
            baseline = torch.where(count > 1, baseline, torch.zeros_like(baseline))
        return _outputs(scores - baseline, actions)

    @torch.no_grad()
    def advantage_grpo_passk(
        self,
        token_level_rewards: torch.Tensor,
        response_mask: torch.Tensor,
        index: Sequence[Any],
        epsilon: float = 1e-6,
        norm_by_std: bool = True,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """adv.grpo_passk: the group's best sample gets s_max - s_second (/(std+eps))."""
        actions = _actions(response_mask)
        scores = _scores(token_level_rewards, actions)
        ids, n_groups = _group_ids(index, scores.device)
        mean, std, count = _group_mean_std(
            scores, ids, n_groups, self.profile.get("grpo_std_ddof", 1)
        )
        if bool((count < 2).any()):
            raise ValueError("pass@k needs at least 2 samples per group")
        group_max = torch.full((n_groups,), -torch.inf, dtype=scores.dtype, device=scores.device)
        group_max = group_max.scatter_reduce(0, ids, scores, reduce="amax")
        positions = torch.arange(scores.shape[0], device=scores.device)
        at_max = torch.where(scores == group_max[ids], positions, scores.shape[0])
        best = torch.full((n_groups,), scores.shape[0], device=scores.device).scatter_reduce(
            0, ids, at_max, reduce="amin"
        )
        is_best = positions == best[ids]
        rest = torch.where(is_best, torch.full_like(scores, -torch.inf), scores)
        second = torch.full_like(group_max, -torch.inf).scatter_reduce(0, ids, rest, reduce="amax")[
            ids
        ]
        value = scores - second
        if norm_by_std:
            value = value / (std + epsilon)
        return _outputs(torch.where(is_best, value, torch.zeros_like(value)), actions)

    @torch.no_grad()
    def advantage_gpg(
        self,
        token_level_rewards: torch.Tensor,
        response_mask: torch.Tensor,
        index: Sequence[Any],
        f_norm: float = 1.0,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """adv.gpg: alpha (score - group mean) / f_norm, alpha = B / max(B_valid, 1)."""
        actions = _actions(response_mask)
        scores = _scores(token_level_rewards, actions)
        ids, n_groups = _group_ids(index, scores.device)
        rule = self.profile.get("gpg_alpha", "informative")
        if rule == "informative":
            high = torch.full((n_groups,), -torch.inf, dtype=scores.dtype, device=scores.device)
            low = torch.full((n_groups,), torch.inf, dtype=scores.dtype, device=scores.device)
            high = high.scatter_reduce(0, ids, scores, reduce="amax")
            low = low.scatter_reduce(0, ids, scores, reduce="amin")
            valid = int((high > low)[ids].sum())
        elif rule == "nonzero_score":
            valid = int(torch.count_nonzero(scores))
        elif rule == "one":
            valid = scores.shape[0]
        else:
            raise ValueError(f"unknown gpg_alpha {rule!r}")
        alpha = scores.shape[0] / max(valid, 1)
        baseline = _group_baseline(
            scores, ids, n_groups, self.profile.get("singleton_baseline", "zero")
        )
        return _outputs(alpha * (scores - baseline) / f_norm, actions)

    @torch.no_grad()
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
        """adv.optimal_token_baseline: returns minus a per-column group baseline."""
        actions = _actions(response_mask)
        returns = _on_actions(_reverse_cumsum(_credited(token_level_rewards, actions)), actions)
        weight = (
            1.0
            - 2.0 * torch.exp(old_log_probs.to(returns.dtype))
            + sum_pi_squared.to(returns.dtype)
        )
        if rollout_is_weights is not None:
            weight = weight * rollout_is_weights.to(returns.dtype) ** 2
        cumulative = _on_actions(torch.cumsum(_on_actions(weight, actions), dim=-1), actions)
        ids, n_groups = _group_ids(index, returns.device)
        active = _group_sum(actions.to(returns.dtype), ids, n_groups)[ids]
        numerator = _group_sum(returns * cumulative, ids, n_groups)[ids]
        denominator = _group_sum(cumulative, ids, n_groups)[ids] + epsilon
        baseline = torch.where(active >= 2, numerator / denominator, torch.zeros_like(numerator))
        return _on_actions(returns - baseline, actions), returns

    @torch.no_grad()
    def advantage_gdpo(
        self,
        reward_components: torch.Tensor,
        response_mask: torch.Tensor,
        index: Sequence[Any],
        weights: Sequence[float] | None = None,
        epsilon: float = 1e-6,
        norm_by_std: bool = True,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """adv.gdpo: (B, K) per-sample reward components, each group-normalised, summed
        with ``weights`` (default ones), broadcast and batch-whitened."""
        actions = _actions(response_mask)
        components = reward_components.to(response_mask.device)
        ids, n_groups = _group_ids(index, components.device)
        weights = [1.0] * components.shape[-1] if weights is None else list(weights)
        total = torch.zeros(components.shape[0], dtype=components.dtype, device=components.device)
        for k, weight in enumerate(weights):
            total = total + weight * _group_normalized(
                components[:, k],
                ids,
                n_groups,
                epsilon=epsilon,
                norm_by_std=norm_by_std,
                ddof=self.profile.get("grpo_std_ddof", 1),
                singleton=self.profile.get("grpo_singleton", "mean0_std1"),
            )
        broadcast, _ = _outputs(total, actions)
        advantages = _whiten(
            broadcast,
            actions,
            self.profile.get("whiten_degenerate", "zeros"),
            self.profile.get("whiten_std_eps"),
        )
        return advantages, advantages.clone()

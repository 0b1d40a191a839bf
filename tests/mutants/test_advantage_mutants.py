"""Broken advantage estimators must fail on their adv.* clause (and only where intended)."""

from __future__ import annotations

import pytest
import torch

from rlconform.adapters.base import with_overrides
from rlconform.adapters.torchref import advantage as ref
from tests.conftest import assert_caught, certify_one


def _scores_and_groups(rewards, response_mask, index):
    actions = response_mask.bool()
    scores = torch.where(actions, rewards, 0.0).sum(-1)
    ids, n_groups = ref._group_ids(index, scores.device)
    return actions, scores, ids, n_groups


# adv.grpo ------------------------------------------------------------------------------


def grpo_population_std(self, rewards, response_mask, index, epsilon=1e-6, norm_by_std=True):
    """ddof 0 where the profile says 1."""
    actions, scores, ids, n_groups = _scores_and_groups(rewards, response_mask, index)
    per_sample = ref._group_normalized(
        scores,
        ids,
        n_groups,
        epsilon=epsilon,
        norm_by_std=norm_by_std,
        ddof=0,
        singleton="mean0_std1",
    )
    return ref._outputs(per_sample, actions)


def grpo_cancelling_variance(self, rewards, response_mask, index, epsilon=1e-6, norm_by_std=True):
    """var = (E[s^2] - mean^2) n/(n-1) in float32: CONTRACT §4's +-0.005 instead of +-0.62."""
    actions, scores, ids, n_groups = _scores_and_groups(rewards, response_mask, index)
    count = ref._group_sum(torch.ones_like(scores), ids, n_groups)[ids]
    mean = ref._group_sum(scores, ids, n_groups)[ids] / count
    mean_square = ref._group_sum(scores * scores, ids, n_groups)[ids] / count
    var = (mean_square - mean * mean).clamp_min(0) * count / (count - 1).clamp_min(1)
    std = torch.where(count > 1, var.sqrt(), torch.ones_like(var))
    mean = torch.where(count > 1, mean, torch.zeros_like(mean))
    per_sample = (scores - mean) / (std + epsilon) if norm_by_std else scores - mean
    return ref._outputs(per_sample, actions)


def grpo_leaks_across_groups(self, rewards, response_mask, index, epsilon=1e-6, norm_by_std=True):
    """Statistics over the whole batch instead of per group."""
    return self.advantage_grpo(rewards, response_mask, ["batch"] * len(index), epsilon, norm_by_std)


def test_grpo_population_std_is_caught(torchref):
    result = assert_caught(with_overrides(torchref, advantage_grpo=grpo_population_std), "adv.grpo")
    assert "uid=" in result.message
    assert "reproducer" in result.counterexample


def test_grpo_cancelling_variance_is_caught(torchref):
    broken = with_overrides(torchref, advantage_grpo=grpo_cancelling_variance)
    assert_caught(broken, "adv.grpo")


def test_grpo_leaking_across_groups_is_caught(torchref):
    broken = with_overrides(torchref, advantage_grpo=grpo_leaks_across_groups)
    assert_caught(broken, "adv.grpo")
    assert_caught(broken, "adv.invariants")


# adv.gae -------------------------------------------------------------------------------


def gae_not_skipping_holes(
    self, rewards, values, response_mask, gamma, lam, bootstrap_value=None, terminated=None
):
    """Runs the recursion over every response column up to the last action token, so tool
    observations count as steps (their rewards and values enter delta)."""
    actions = response_mask.bool()
    columns = torch.arange(actions.shape[-1], device=actions.device)
    last = (
        torch.where(actions, columns, -1).amax(-1, keepdim=True) if actions.shape[-1] else columns
    )
    span = columns <= last
    rewards = torch.where(span, rewards, 0.0)
    values = torch.where(span, values, 0.0)
    next_value = torch.zeros(rewards.shape[0], dtype=rewards.dtype)
    if bootstrap_value is not None and terminated is not None:
        next_value = torch.where(terminated, next_value, bootstrap_value)
    next_adv = torch.zeros_like(next_value)
    raw = torch.zeros_like(rewards)
    for t in reversed(range(rewards.shape[-1])):
        step = span[:, t]
        adv_t = rewards[:, t] + gamma * next_value - values[:, t] + gamma * lam * next_adv
        raw[:, t] = torch.where(step, adv_t, 0.0)
        next_value = torch.where(step, values[:, t], next_value)
        next_adv = torch.where(step, adv_t, next_adv)
    returns = torch.where(actions, raw + values, 0.0)
    return ref._whiten(raw, actions, "zeros"), returns


def gae_bootstraps_terminated(
    self, rewards, values, response_mask, gamma, lam, bootstrap_value=None, terminated=None
):
    """Ignores the terminated flag: every sample bootstraps."""
    if terminated is not None:
        terminated = torch.zeros_like(terminated)
    return self.advantage_gae(
        rewards, values, response_mask, gamma, lam, bootstrap_value, terminated
    )


def gae_whitens_over_padding(
    self, rewards, values, response_mask, gamma, lam, bootstrap_value=None, terminated=None
):
    """Whitening statistics over every (B, T) position, padding and holes counted as 0."""
    _, returns = self.advantage_gae(
        rewards, values, response_mask, gamma, lam, bootstrap_value, terminated
    )
    actions = response_mask.bool()
    raw = torch.where(actions, returns - values, 0.0)
    if raw.numel() < 2:
        return torch.zeros_like(raw), returns
    whitened = (raw - raw.mean()) * torch.rsqrt(raw.var() + 1e-8)
    return torch.where(actions, whitened, 0.0), returns


def gae_padding_not_remasked(
    self, rewards, values, response_mask, gamma, lam, bootstrap_value=None, terminated=None
):
    """verl-like: whitened advantages are not re-masked, padding holds (0 - mean) / std."""
    advantages, returns = self.advantage_gae(
        rewards, values, response_mask, gamma, lam, bootstrap_value, terminated
    )
    return torch.where(response_mask.bool(), advantages, -0.8769), returns


def test_gae_not_skipping_mask_holes_is_caught(torchref):
    assert_caught(with_overrides(torchref, advantage_gae=gae_not_skipping_holes), "adv.gae")


def test_gae_bootstrapping_a_terminated_sample_is_caught(torchref):
    assert_caught(with_overrides(torchref, advantage_gae=gae_bootstraps_terminated), "adv.gae")


def test_gae_whitening_over_padding_is_caught(torchref):
    assert_caught(with_overrides(torchref, advantage_gae=gae_whitens_over_padding), "adv.gae")


def test_gae_unmasked_padding_fails_invariants_only(torchref):
    broken = with_overrides(torchref, advantage_gae=gae_padding_not_remasked)
    assert certify_one(broken, "adv.gae").status == "pass"
    result = assert_caught(broken, "adv.invariants")
    assert "advantage_gae" in result.message and result.check == "gae_zero_off_actions"


# adv.rloo ------------------------------------------------------------------------------


def rloo_including_self(self, rewards, response_mask, index):
    """Baseline = group mean including the sample itself."""
    actions, scores, ids, n_groups = _scores_and_groups(rewards, response_mask, index)
    baseline = ref._group_baseline(scores, ids, n_groups, "zero")
    return ref._outputs(scores - baseline, actions)


def test_rloo_baseline_including_itself_is_caught(torchref):
    assert_caught(with_overrides(torchref, advantage_rloo=rloo_including_self), "adv.rloo")


# adv.reinforce_pp ----------------------------------------------------------------------


def reinforce_pp_resets_at_holes(self, rewards, response_mask, gamma):
    """Treats a tool observation as the end of the episode."""
    actions = response_mask.bool()
    rewards = torch.where(actions, rewards, 0.0)
    returns = torch.zeros_like(rewards)
    running = torch.zeros(rewards.shape[0], dtype=rewards.dtype)
    for t in reversed(range(rewards.shape[-1])):
        running = torch.where(actions[:, t], rewards[:, t] + gamma * running, 0.0)
        returns[:, t] = running
    return ref._whiten(returns, actions, "zeros"), returns


def reinforce_pp_returns_on_holes(self, rewards, response_mask, gamma):
    """Writes the carried return on tool-observation tokens too (slime-like)."""
    advantages, returns = self.advantage_reinforce_pp(rewards, response_mask, gamma)
    actions = response_mask.bool()
    inside = torch.cumsum(actions.flip(-1).long(), -1).flip(-1) > 0
    carried = torch.zeros_like(returns)
    running = torch.zeros(returns.shape[0], dtype=returns.dtype)
    for t in reversed(range(returns.shape[-1])):
        running = torch.where(actions[:, t], returns[:, t], running)
        carried[:, t] = torch.where(inside[:, t], running, 0.0)
    return advantages, carried


def test_reinforce_pp_resetting_at_holes_is_caught(torchref):
    broken = with_overrides(torchref, advantage_reinforce_pp=reinforce_pp_resets_at_holes)
    assert_caught(broken, "adv.reinforce_pp")


def test_reinforce_pp_returns_on_holes_fail_invariants_only(torchref):
    broken = with_overrides(torchref, advantage_reinforce_pp=reinforce_pp_returns_on_holes)
    assert certify_one(broken, "adv.reinforce_pp").status == "pass"
    assert_caught(broken, "adv.invariants")


# adv.reinforce_pp_baseline -------------------------------------------------------------


def reinforce_pp_baseline_sequence_weighted(self, rewards, response_mask, index):
    """Whitening statistics per sequence instead of per action token."""
    actions, scores, ids, n_groups = _scores_and_groups(rewards, response_mask, index)
    centred = scores - ref._group_baseline(scores, ids, n_groups, "zero")
    has_actions = actions.any(-1)
    if int(has_actions.sum()) < 2:
        zeros = torch.zeros(actions.shape, dtype=rewards.dtype)
        return zeros, zeros.clone()
    kept = centred[has_actions]
    per_sample = (centred - kept.mean()) * torch.rsqrt(kept.var() + 1e-8)
    return ref._outputs(per_sample, actions)


def test_reinforce_pp_baseline_sequence_weighted_stats_are_caught(torchref):
    broken = with_overrides(
        torchref, advantage_reinforce_pp_baseline=reinforce_pp_baseline_sequence_weighted
    )
    assert_caught(broken, "adv.reinforce_pp_baseline")


# adv.remax -----------------------------------------------------------------------------


def remax_forward_cumsum(self, rewards, reward_baselines, response_mask):
    """Cumulative sum in the wrong direction."""
    actions = response_mask.bool()
    returns = torch.where(actions, torch.cumsum(torch.where(actions, rewards, 0.0), -1), 0.0)
    return torch.where(actions, returns - reward_baselines.unsqueeze(-1), 0.0), returns


def test_remax_forward_cumsum_is_caught(torchref):
    assert_caught(with_overrides(torchref, advantage_remax=remax_forward_cumsum), "adv.remax")


# adv.opo -------------------------------------------------------------------------------


def opo_unweighted(self, rewards, response_mask, index):
    """Plain group mean instead of the length-weighted one."""
    actions, scores, ids, n_groups = _scores_and_groups(rewards, response_mask, index)
    return ref._outputs(scores - ref._group_baseline(scores, ids, n_groups, "zero"), actions)


def test_opo_unweighted_baseline_is_caught(torchref):
    assert_caught(with_overrides(torchref, advantage_opo=opo_unweighted), "adv.opo")


# adv.grpo_passk ------------------------------------------------------------------------


def passk_against_mean(self, rewards, response_mask, index, epsilon=1e-6, norm_by_std=True):
    """The best sample is compared with the group mean, not the runner-up."""
    actions, scores, ids, n_groups = _scores_and_groups(rewards, response_mask, index)
    advantages, _ = self.advantage_grpo_passk(rewards, response_mask, index, epsilon, norm_by_std)
    mean, std, _ = ref._group_mean_std(scores, ids, n_groups, 1)
    value = (scores - mean) / (std + epsilon) if norm_by_std else scores - mean
    best = (advantages != 0).any(-1)
    return ref._outputs(torch.where(best, value, 0.0), actions)


def test_passk_against_mean_is_caught(torchref):
    assert_caught(
        with_overrides(torchref, advantage_grpo_passk=passk_against_mean), "adv.grpo_passk"
    )


# adv.gpg -------------------------------------------------------------------------------


def gpg_without_alpha(self, rewards, response_mask, index, f_norm=1.0):
    """alpha = 1 where the profile's rule gives B / B_valid."""
    actions, scores, ids, n_groups = _scores_and_groups(rewards, response_mask, index)
    return ref._outputs(
        (scores - ref._group_baseline(scores, ids, n_groups, "zero")) / f_norm, actions
    )


def test_gpg_without_alpha_is_caught(torchref):
    assert_caught(with_overrides(torchref, advantage_gpg=gpg_without_alpha), "adv.gpg")


# adv.optimal_token_baseline ------------------------------------------------------------


def otb_lone_sample_baseline(
    self,
    rewards,
    response_mask,
    index,
    old_log_probs,
    sum_pi_squared,
    rollout_is_weights=None,
    epsilon=1e-8,
):
    """A lone active sample becomes its own baseline (its tail advantage collapses to ~0)."""
    actions = response_mask.bool()
    _, returns = self.advantage_optimal_token_baseline(
        rewards, response_mask, index, old_log_probs, sum_pi_squared, rollout_is_weights, epsilon
    )
    weight = 1.0 - 2.0 * torch.exp(old_log_probs) + sum_pi_squared
    if rollout_is_weights is not None:
        weight = weight * rollout_is_weights**2
    cumulative = torch.where(actions, torch.cumsum(torch.where(actions, weight, 0.0), -1), 0.0)
    ids, n_groups = ref._group_ids(index, returns.device)
    numerator = ref._group_sum(returns * cumulative, ids, n_groups)[ids]
    denominator = ref._group_sum(cumulative, ids, n_groups)[ids] + epsilon
    return torch.where(actions, returns - numerator / denominator, 0.0), returns


def test_otb_lone_sample_baseline_is_caught(torchref):
    broken = with_overrides(torchref, advantage_optimal_token_baseline=otb_lone_sample_baseline)
    assert_caught(broken, "adv.optimal_token_baseline")


# adv.gdpo ------------------------------------------------------------------------------


def gdpo_sum_then_normalise(
    self, reward_components, response_mask, index, weights=None, epsilon=1e-6, norm_by_std=True
):
    """GRPO on the weighted sum of components (plain GRPO), not per component."""
    weights = torch.tensor(weights if weights is not None else [1.0] * reward_components.shape[-1])
    total = (reward_components * weights.to(reward_components.dtype)).sum(-1, keepdim=True)
    return self.advantage_gdpo(total, response_mask, index, [1.0], epsilon, norm_by_std)


def test_gdpo_sum_then_normalise_is_caught(torchref):
    assert_caught(with_overrides(torchref, advantage_gdpo=gdpo_sum_then_normalise), "adv.gdpo")


# whole area ----------------------------------------------------------------------------

ADV_CLAUSES = (
    "adv.gae",
    "adv.grpo",
    "adv.rloo",
    "adv.reinforce_pp",
    "adv.reinforce_pp_baseline",
    "adv.remax",
    "adv.opo",
    "adv.grpo_passk",
    "adv.gpg",
    "adv.optimal_token_baseline",
    "adv.gdpo",
    "adv.invariants",
)


@pytest.mark.parametrize("clause_id", ADV_CLAUSES)
def test_reference_targets_pass(torchref, oracle_target, clause_id):
    for target in (torchref, oracle_target):
        result = certify_one(target, clause_id)
        assert result.status == "pass", f"{target.name} {clause_id}: {result.message}"


def test_subset_target_skips_missing_estimators(torchref):
    only_grpo = with_overrides(
        torchref, **{spec: None for spec in ("advantage_gae", "advantage_rloo")}
    )
    assert certify_one(only_grpo, "adv.gae").status == "skip"
    assert certify_one(only_grpo, "adv.invariants").status == "pass"

"""The corrections of CONTRACT.md's revision (reward credit, weights off action tokens, KL
clamp order, profile keys ...): each implementation of the pre-correction reading fails on
the clause it touches, graded at the severity the correction concerns."""

from __future__ import annotations

import dataclasses

import torch

from rlconform.adapters.base import with_overrides
from rlconform.adapters.torchref import TorchRef
from tests.conftest import assert_caught, assert_graded, certify_one


def _with_profile(target, **extra):
    variant = TorchRef()
    variant.profile = dataclasses.replace(target.profile, extra={**target.profile.extra, **extra})
    return variant


# ---- reward credit across mask holes ----------------------------------------------------


def grpo_scores_over_action_tokens(
    self, rewards, response_mask, index, epsilon=1e-6, norm_by_std=True
):
    """score_i = sum over action tokens only: a reward on a tool token is lost."""
    masked = torch.where(response_mask.bool(), rewards, torch.zeros_like(rewards))
    return type(self).advantage_grpo(self, masked, response_mask, index, epsilon, norm_by_std)


def gae_dropping_hole_rewards(self, rewards, values, response_mask, gamma, lam, **kwargs):
    """GAE that only reads rewards at action tokens (verl 0.9.1's recursion drops them)."""
    masked = torch.where(response_mask.bool(), rewards, torch.zeros_like(rewards))
    return type(self).advantage_gae(self, masked, values, response_mask, gamma, lam, **kwargs)


def test_scores_over_action_tokens_only_fail_on_hole_rewards(torchref):
    broken = with_overrides(torchref, advantage_grpo=grpo_scores_over_action_tokens)
    result = assert_graded(broken, "adv.grpo")
    assert result.severity == "edge" and "hole_reward" in result.features


def test_gae_dropping_hole_rewards_fails_on_hole_rewards(torchref):
    broken = with_overrides(torchref, advantage_gae=gae_dropping_hole_rewards)
    result = assert_graded(broken, "adv.gae")
    assert result.severity == "edge" and "hole_reward" in result.features


def reinforce_pp_holes_as_steps(self, rewards, response_mask, gamma):
    """Counts every position as a discount step where the profile says holes are not."""
    variant = _with_profile(self, discount_at_holes=True)
    return type(self).advantage_reinforce_pp(variant, rewards, response_mask, gamma)


def test_holes_as_discount_steps_fail_under_the_default_profile(torchref):
    broken = with_overrides(torchref, advantage_reinforce_pp=reinforce_pp_holes_as_steps)
    result = assert_caught(broken, "adv.reinforce_pp")
    assert "mask_holes" in result.features


def test_the_discount_at_holes_profile_is_honoured(torchref):
    assert (
        certify_one(_with_profile(torchref, discount_at_holes=True), "adv.reinforce_pp").status
        == "pass"
    )
    assert certify_one(_with_profile(torchref, discount_at_holes=True), "adv.gae").status == "pass"


# ---- truncated_bootstrap ----------------------------------------------------------------


def gae_ignoring_the_bootstrap(self, rewards, values, response_mask, gamma, lam, **kwargs):
    """A GAE without a bootstrap input: truncated samples are treated as terminated."""
    return type(self).advantage_gae(self, rewards, values, response_mask, gamma, lam)


def test_a_missing_bootstrap_fails_unless_the_profile_declares_it(torchref):
    broken = with_overrides(torchref, advantage_gae=gae_ignoring_the_bootstrap)
    result = assert_graded(broken, "adv.gae")
    assert "truncated_sample" in result.features and result.severity == "nominal"
    declared = with_overrides(
        _with_profile(torchref, truncated_bootstrap=False), advantage_gae=gae_ignoring_the_bootstrap
    )
    assert certify_one(declared, "adv.gae").status == "pass"


# ---- offpolicy: weights off the action tokens are ignored, but must be finite -----------


def tis_leaking_nan_at_padding(
    self, old_logprob, rollout_logprob, response_mask, clip_low=0.0, clip_high=2.0
):
    """exp(old - rollout) * mask: NaN padding survives the multiply (NaN * 0 = NaN)."""
    ratio = torch.exp(old_logprob - rollout_logprob).clamp(min=clip_low, max=clip_high)
    return ratio * response_mask


def tis_garbage_but_finite_off_actions(
    self, old_logprob, rollout_logprob, response_mask, clip_low=0.0, clip_high=2.0
):
    """Correct on action tokens, 1.0 everywhere else: ignored by what consumes it."""
    weights = type(self).tis_weights(
        self, old_logprob, rollout_logprob, response_mask, clip_low, clip_high
    )
    return torch.where(response_mask.bool(), weights, torch.ones_like(weights))


def test_non_finite_weights_off_action_tokens_are_a_hardening_break(torchref):
    broken = with_overrides(torchref, tis_weights=tis_leaking_nan_at_padding)
    result = assert_graded(broken, "offpolicy.tis")
    assert result.check == "off_action_finite" and result.severity == "hardening"


def test_finite_weights_off_action_tokens_pass(torchref):
    honest = with_overrides(torchref, tis_weights=tis_garbage_but_finite_off_actions)
    assert certify_one(honest, "offpolicy.tis").status == "pass"


def icepop_without_the_profile_clamp(
    self, old_logprob, rollout_logprob, response_mask, clip_low=0.5, clip_high=2.0
):
    """Ignores the profile's is_log_ratio_clamp."""
    actions = response_mask.bool()
    ratio = torch.exp(torch.where(actions, old_logprob - rollout_logprob, 0.0))
    keep = actions & (ratio >= clip_low) & (ratio <= clip_high)
    return torch.where(keep, ratio, torch.zeros_like(ratio))


def test_the_is_log_ratio_clamp_profile_is_honoured():
    clamped = _with_profile(TorchRef(), is_log_ratio_clamp=0.25)
    assert certify_one(clamped, "offpolicy.icepop").status == "pass"
    broken = with_overrides(clamped, icepop_weights=icepop_without_the_profile_clamp)
    assert_caught(broken, "offpolicy.icepop")


# ---- every loss that reduces itself is shard-invariant -----------------------------------


def gmpo_mean_over_rows(self, mode, old, log_prob, adv, mask, *, global_batch_info, **clips):
    """GMPO reduced as verl 0.9.1's geo_mean does: the mean over the micro-batch's rows of
    the sequence loss, ignoring the global denominators (and the configured mode)."""
    if mode != "gmpo":
        return type(self).policy_loss_reduced(
            self, mode, old, log_prob, adv, mask, global_batch_info=global_batch_info, **clips
        )
    clips.pop("clip_ratio_c", None)
    loss, _ = self.gmpo_loss(old, log_prob, adv, mask, **clips)
    actions = mask.bool()
    per_row = torch.where(actions, loss, 0.0).sum(-1) / actions.sum(-1).clamp(min=1)
    return per_row.mean() if per_row.numel() else per_row.sum()


def test_a_loss_reduced_per_micro_batch_fails(torchref):
    broken = with_overrides(torchref, policy_loss_reduced=gmpo_mean_over_rows)
    result = assert_caught(broken, "loss.gmpo")
    assert result.check in ("reduced", "shard_invariance")
    assert certify_one(broken, "loss.ppo_clip").status == "pass"


def test_the_reduction_follows_the_profiles_loss_agg_mode(torchref):
    seq_mean = _with_profile(torchref, loss_agg_mode="seq-mean-token-mean")
    assert certify_one(seq_mean, "loss.gmpo").status == "pass"

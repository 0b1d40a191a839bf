"""Broken KL implementations must fail on their kl.* clause."""

from __future__ import annotations

import pytest
import torch

from rlconform.adapters.base import with_overrides
from tests.conftest import assert_caught

K3_MODES = ("k3", "low_var_kl")


def k3_sign_flipped(self, logprob, ref_logprob, mode):
    if mode not in K3_MODES:
        return self.kl_penalty(logprob, ref_logprob, mode)
    x = (logprob - ref_logprob).clamp(-20.0, 20.0)
    return (torch.exp(x) - x - 1).clamp(-10.0, 10.0)


def k3_without_input_clamp(self, logprob, ref_logprob, mode):
    if mode not in K3_MODES:
        return self.kl_penalty(logprob, ref_logprob, mode)
    x = ref_logprob - logprob
    return (torch.exp(x) - x - 1).clamp(-10.0, 10.0)


def straight_through_detached(self, logprob, ref_logprob, mode):
    return self.kl_penalty(logprob, ref_logprob, mode).detach()


def straight_through_keeps_estimator_gradient(self, logprob, ref_logprob, mode):
    return self.kl_penalty(logprob, ref_logprob, mode.rstrip("+"))


def importance_ratio_detached(self, logprob, ref_logprob, old_logprob, mode):
    # logprob - shifted_old == sg(logprob) - old: same value, no gradient through the ratio.
    shifted_old = old_logprob + (logprob - logprob.detach())
    return self.importance_weighted_kl(logprob, ref_logprob, shifted_old, mode)


def k3_clamped_after_weighting(self, logprob, ref_logprob, old_logprob, mode):
    """Clamps the weighted product (slime's order); the contract clamps the KL first."""
    if mode not in K3_MODES:
        return self.importance_weighted_kl(logprob, ref_logprob, old_logprob, mode)
    ratio = torch.exp((logprob - old_logprob).clamp(-20.0, 20.0))
    unclamped = torch.expm1((ref_logprob - logprob).clamp(-20.0, 20.0)) - (
        ref_logprob - logprob
    ).clamp(-20.0, 20.0)
    return (ratio * unclamped).clamp(-10.0, 10.0)


def kl_in_reward_unmasked(self, token_scores, old_logprob, ref_logprob, response_mask, beta, mode):
    _, metric = self.apply_kl_in_reward(
        token_scores, old_logprob, ref_logprob, response_mask, beta, mode
    )
    return token_scores - beta * self.kl_penalty(old_logprob, ref_logprob, mode), metric


def kl_metric_over_padding(self, token_scores, old_logprob, ref_logprob, response_mask, beta, mode):
    rewards, _ = self.apply_kl_in_reward(
        token_scores, old_logprob, ref_logprob, response_mask, beta, mode
    )
    kl = self.kl_penalty(old_logprob, ref_logprob, mode) * response_mask
    return rewards, kl.mean() if kl.numel() else kl.sum()


def controller_without_clip(self, kind, value, current_kl, n_steps, target_kl, horizon):
    if kind == "fixed":
        return value
    return value * (1 + (current_kl / target_kl - 1) * n_steps / horizon)


def controller_fixed_drifts(self, kind, value, current_kl, n_steps, target_kl, horizon):
    return self.kl_controller_update("adaptive", value, current_kl, n_steps, target_kl, horizon)


@pytest.mark.parametrize(
    ("clause_id", "op", "broken"),
    [
        ("kl.estimators", "kl_penalty", k3_sign_flipped),
        ("kl.estimators", "kl_penalty", k3_without_input_clamp),
        ("kl.straight_through", "kl_penalty", straight_through_detached),
        ("kl.straight_through", "kl_penalty", straight_through_keeps_estimator_gradient),
        ("kl.importance_weighted", "importance_weighted_kl", importance_ratio_detached),
        ("kl.importance_weighted", "importance_weighted_kl", k3_clamped_after_weighting),
        ("kl.in_reward", "apply_kl_in_reward", kl_in_reward_unmasked),
        ("kl.in_reward", "apply_kl_in_reward", kl_metric_over_padding),
        ("kl.adaptive_controller", "kl_controller_update", controller_without_clip),
        ("kl.adaptive_controller", "kl_controller_update", controller_fixed_drifts),
    ],
    ids=lambda value: getattr(value, "__name__", value),
)
def test_kl_mutant_is_caught(torchref, clause_id, op, broken):
    result = assert_caught(with_overrides(torchref, **{op: broken}), clause_id)
    assert f"[{clause_id}]" in result.message
    assert "reproducer" in result.counterexample


def test_k3_without_input_clamp_reports_a_non_finite_gradient(torchref):
    result = assert_caught(
        with_overrides(torchref, kl_penalty=k3_without_input_clamp), "kl.estimators"
    )
    assert "d/dlogprob" in result.message
    assert "nan" in result.message


def test_detached_straight_through_says_so(torchref):
    result = assert_caught(
        with_overrides(torchref, kl_penalty=straight_through_detached), "kl.straight_through"
    )
    assert "no gradient" in result.message

"""Broken reward implementations must fail on their reward.* clause."""

from __future__ import annotations

import torch

from rlconform.adapters.base import with_overrides
from tests.conftest import assert_caught, assert_graded, certify_one


def reward_at_last_padded_column(self, scores, response_mask, loss_mask):
    placed = torch.zeros(response_mask.shape, dtype=scores.dtype, device=scores.device)
    if placed.shape[-1]:
        placed[:, -1] = scores
    return placed


def test_reward_at_last_padded_column_is_caught(torchref):
    broken = with_overrides(torchref, place_reward_last=reward_at_last_padded_column)
    result = assert_caught(broken, "reward.place_last")
    assert "uid=" in result.message
    assert "reproducer" in result.counterexample


def uniform_over_padded_width(self, scores, response_mask, loss_mask):
    """Divides by the padded width T instead of the response length L_i."""
    share = scores.unsqueeze(-1) / response_mask.shape[-1]
    return torch.where((loss_mask * response_mask).bool(), share, 0.0)


def test_uniform_dividing_by_width_is_caught(torchref):
    broken = with_overrides(torchref, place_reward_uniform=uniform_over_padded_width)
    assert_caught(broken, "reward.place_uniform")


def uniform_over_response_length(self, scores, response_mask, loss_mask):
    """r / L_i on action tokens (the pre-correction contract): with mask holes the row sums
    to r n_i / L_i, not r."""
    share = scores.unsqueeze(-1) / response_mask.sum(-1, keepdim=True).clamp(min=1)
    return torch.where((loss_mask * response_mask).bool(), share, 0.0)


def test_uniform_over_the_response_length_is_caught(torchref):
    broken = with_overrides(torchref, place_reward_uniform=uniform_over_response_length)
    result = assert_caught(broken, "reward.place_uniform")
    assert "mask_holes" in result.features


def discounted_from_padded_width(self, scores, response_mask, loss_mask, gamma):
    """Counts the discount exponent from the padded last column, T - 1 - t, not from the
    sample's last action token."""
    width = response_mask.shape[-1]
    steps = torch.arange(width - 1, -1, -1, device=scores.device).to(scores.dtype)
    actions = (loss_mask * response_mask).bool()
    weights = torch.where(actions, torch.tensor(gamma, dtype=scores.dtype) ** steps, 0.0)
    total = weights.sum(-1, keepdim=True)
    return scores.unsqueeze(-1) * weights / torch.where(total > 0, total, 1.0)


def discounted_without_normalizer(self, scores, response_mask, loss_mask, gamma):
    """r * g^(n_i-1-k) with no division by the weight sum: rows no longer sum to r."""
    actions = (loss_mask * response_mask).bool()
    later = actions.sum(-1, keepdim=True) - torch.cumsum(actions.long(), dim=-1)
    placed = scores.unsqueeze(-1) * torch.tensor(gamma, dtype=scores.dtype) ** later
    return torch.where(actions, placed, 0.0)


def discounted_over_response_tokens(self, scores, response_mask, loss_mask, gamma):
    """Spreads over every response token (holes included), the pre-correction contract."""
    return self.place_reward_discounted(scores, response_mask, response_mask, gamma)


def test_discount_over_response_tokens_is_caught(torchref):
    broken = with_overrides(torchref, place_reward_discounted=discounted_over_response_tokens)
    result = assert_caught(broken, "reward.place_discounted")
    assert "mask_holes" in result.features


def test_discount_from_padded_width_is_caught(torchref):
    broken = with_overrides(torchref, place_reward_discounted=discounted_from_padded_width)
    assert_caught(broken, "reward.place_discounted")


def test_discount_without_normalizer_is_caught(torchref):
    broken = with_overrides(torchref, place_reward_discounted=discounted_without_normalizer)
    assert_caught(broken, "reward.place_discounted")


def _normalized(scores, keep, mean, std):
    if scores.numel() == 0:
        return scores.clone()
    spread = (
        torch.where(keep, scores, -torch.inf).amax() != torch.where(keep, scores, torch.inf).amin()
    )
    return torch.where(keep & spread, (scores - mean) / (std + 1e-8), 0.0)


def normalize_two_pass_float32(self, scores, keep):
    """An honest float32 implementation: mean, then the mean squared deviation."""
    keep = keep.bool()
    x = torch.where(keep, scores.float(), 0.0)
    count = keep.sum().clamp(min=1)
    mean = x.sum() / count
    std = (torch.where(keep, x - mean, 0.0) ** 2).sum().div(count).sqrt()
    return _normalized(scores.float(), keep, mean, std)


def normalize_cancelling_variance_float32(self, scores, keep):
    """var = E[x^2] - mean^2 in float32: cancels catastrophically on nearly equal rewards."""
    keep = keep.bool()
    x = torch.where(keep, scores.float(), 0.0)
    count = keep.sum().clamp(min=1)
    mean = x.sum() / count
    variance = (x**2).sum() / count - mean**2
    return _normalized(scores.float(), keep, mean, variance.clamp(min=0).sqrt())


def normalize_sample_std(self, scores, keep):
    """ddof 1 (torch.std default) where the contract says population std."""
    keep = keep.bool()
    kept = scores[keep]
    if kept.numel() < 2:
        return self.normalize_rewards(scores, keep)
    return _normalized(scores, keep, kept.mean(), kept.std())


def normalize_including_dropped(self, scores, keep):
    """Statistics over every sample, dropped ones included."""
    return self.normalize_rewards(scores, torch.ones_like(keep))


def test_two_pass_float32_passes(torchref):
    honest = with_overrides(torchref, normalize_rewards=normalize_two_pass_float32)
    result = certify_one(honest, "reward.normalize_batch")
    assert result.status == "pass", result.message


def test_cancelling_variance_float32_is_caught(torchref):
    broken = with_overrides(torchref, normalize_rewards=normalize_cancelling_variance_float32)
    result = assert_caught(broken, "reward.normalize_batch")
    assert "s0" in result.message or "s1" in result.message


def test_sample_std_is_caught(torchref):
    broken = with_overrides(torchref, normalize_rewards=normalize_sample_std)
    assert_caught(broken, "reward.normalize_batch")


def test_statistics_over_dropped_samples_is_caught(torchref):
    broken = with_overrides(torchref, normalize_rewards=normalize_including_dropped)
    assert_caught(broken, "reward.normalize_batch")


def td_bootstrapping_terminated(self, scores, bootstrap_value, truncated, gamma):
    """Bootstraps every sample, terminated ones included."""
    return self.td_targets(scores, bootstrap_value, torch.ones_like(truncated), gamma)


def td_from_next_row(self, scores, bootstrap_value, truncated, gamma):
    """Bootstraps from the next trajectory's value (flattened-episode off-by-one)."""
    next_value = torch.roll(bootstrap_value, shifts=-1)
    return torch.where(truncated.bool(), scores + gamma * next_value, scores)


def td_multiplying_by_the_flag(self, scores, bootstrap_value, truncated, gamma):
    """r + gamma * V_boot * truncated: a terminated sample's NaN V_boot leaks (NaN * 0)."""
    return scores + gamma * bootstrap_value * truncated.to(scores.dtype)


def test_td_bootstrapping_terminated_is_caught(torchref):
    broken = with_overrides(torchref, td_targets=td_bootstrapping_terminated)
    result = assert_caught(broken, "reward.td_target")
    assert "terminated" in result.message or "uid=" in result.message


def test_td_from_next_row_is_caught(torchref):
    broken = with_overrides(torchref, td_targets=td_from_next_row)
    assert_caught(broken, "reward.td_target")


def test_td_multiplying_by_the_flag_is_a_hardening_break(torchref):
    broken = with_overrides(torchref, td_targets=td_multiplying_by_the_flag)
    result = assert_graded(broken, "reward.td_target")
    assert result.severity == "hardening"

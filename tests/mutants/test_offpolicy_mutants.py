"""Broken off-policy corrections must fail on their offpolicy.* clause."""

from __future__ import annotations

import pytest
import torch

from rlconform.adapters.base import with_overrides
from tests.conftest import assert_caught


def _actions(response_mask):
    return response_mask.bool()


def tis_inverted_ratio(
    self, old_logprob, rollout_logprob, response_mask, clip_low=0.0, clip_high=2.0
):
    return self.tis_weights(rollout_logprob, old_logprob, response_mask, clip_low, clip_high)


def tis_weights_in_padding(
    self, old_logprob, rollout_logprob, response_mask, clip_low=0.0, clip_high=2.0
):
    ratio = torch.exp(old_logprob - rollout_logprob)
    return ratio.clamp(min=clip_low, max=clip_high)


def icepop_clamps(self, old_logprob, rollout_logprob, response_mask, clip_low=0.5, clip_high=2.0):
    return self.tis_weights(old_logprob, rollout_logprob, response_mask, clip_low, clip_high)


def icepop_exclusive_bounds(
    self, old_logprob, rollout_logprob, response_mask, clip_low=0.5, clip_high=2.0
):
    weights = self.icepop_weights(old_logprob, rollout_logprob, response_mask, clip_low, clip_high)
    inside = (weights > clip_low) & (weights < clip_high)
    return torch.where(inside, weights, torch.zeros_like(weights))


def opsm_ignores_advantage_sign(self, logprob, old_logprob, advantages, response_mask, delta=1e-4):
    return self.opsm_mask(logprob, old_logprob, -advantages.abs() - 1.0, response_mask, delta)


def opsm_sums_instead_of_mean(self, logprob, old_logprob, advantages, response_mask, delta=1e-4):
    actions = _actions(response_mask)
    diff = torch.where(actions, old_logprob - logprob, torch.zeros_like(logprob))
    negative = torch.where(actions, advantages, torch.zeros_like(advantages)) < 0
    drop = negative & (diff.sum(-1) > delta).unsqueeze(-1)
    return (actions & ~drop).to(logprob.dtype)


def is_sequence_geometric_mean(
    self,
    old_logprob,
    rollout_logprob,
    response_mask,
    mode="sequence_mask",
    clip_min=None,
    clip_max=3.0,
):
    if not mode.startswith("sequence_"):
        return self.is_correction_weights(
            old_logprob, rollout_logprob, response_mask, mode, clip_min, clip_max
        )
    actions = _actions(response_mask)
    diff = torch.where(actions, old_logprob - rollout_logprob, torch.zeros_like(old_logprob))
    mean = diff.sum(-1, keepdim=True) / actions.sum(-1, keepdim=True).clamp(min=1)
    ratio = torch.exp(mean).expand_as(diff)
    if mode.endswith("_truncate"):
        weights = ratio.clamp(min=clip_min, max=clip_max)
    else:
        inside = (ratio <= clip_max) & ((ratio >= clip_min) if clip_min is not None else True)
        weights = torch.where(inside, ratio, torch.zeros_like(ratio))
    return torch.where(actions, weights, torch.zeros_like(weights))


def is_mask_modes_truncate(
    self,
    old_logprob,
    rollout_logprob,
    response_mask,
    mode="sequence_mask",
    clip_min=None,
    clip_max=3.0,
):
    return self.is_correction_weights(
        old_logprob,
        rollout_logprob,
        response_mask,
        mode.replace("_mask", "_truncate"),
        clip_min,
        clip_max,
    )


def logprob_gap_over_padding(self, old_logprob, rollout_logprob, response_mask):
    gap = (old_logprob - rollout_logprob).abs()
    return gap.mean() if gap.numel() else gap.sum()


def logprob_gap_mean_of_sample_means(self, old_logprob, rollout_logprob, response_mask):
    actions = _actions(response_mask)
    gap = torch.where(actions, (old_logprob - rollout_logprob).abs(), torch.zeros_like(old_logprob))
    per_sample = gap.sum(-1) / actions.sum(-1).clamp(min=1)
    return per_sample.mean() if per_sample.numel() else per_sample.sum()


@pytest.mark.parametrize(
    ("clause_id", "op", "broken"),
    [
        ("offpolicy.tis", "tis_weights", tis_inverted_ratio),
        ("offpolicy.tis", "tis_weights", tis_weights_in_padding),
        ("offpolicy.icepop", "icepop_weights", icepop_clamps),
        ("offpolicy.icepop", "icepop_weights", icepop_exclusive_bounds),
        ("offpolicy.opsm", "opsm_mask", opsm_ignores_advantage_sign),
        ("offpolicy.opsm", "opsm_mask", opsm_sums_instead_of_mean),
        ("offpolicy.is_correction", "is_correction_weights", is_sequence_geometric_mean),
        ("offpolicy.is_correction", "is_correction_weights", is_mask_modes_truncate),
        ("offpolicy.logprob_gap", "logprob_gap", logprob_gap_over_padding),
        ("offpolicy.logprob_gap", "logprob_gap", logprob_gap_mean_of_sample_means),
    ],
    ids=lambda value: getattr(value, "__name__", value),
)
def test_offpolicy_mutant_is_caught(torchref, clause_id, op, broken):
    result = assert_caught(with_overrides(torchref, **{op: broken}), clause_id)
    assert f"[{clause_id}]" in result.message
    assert "reproducer" in result.counterexample

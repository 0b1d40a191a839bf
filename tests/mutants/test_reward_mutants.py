"""Broken reward implementations must fail on their reward.* clause."""

from __future__ import annotations

import torch

from rlconform.adapters.base import with_overrides
from tests.conftest import assert_caught


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

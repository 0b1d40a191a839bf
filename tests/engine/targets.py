"""Targets built for the CLI tests (loaded through ``module:attribute``)."""

from __future__ import annotations

from rlconform.adapters.base import with_overrides
from rlconform.adapters.torchref import TorchRef


def _last_column(self, scores, response_mask, loss_mask):
    out = scores.new_zeros(response_mask.shape)
    if out.shape[-1]:
        out[:, -1] = scores
    return out


def broken_reward_target():
    """torchref with the reward written into the last padded column."""
    return with_overrides(TorchRef(), name="broken-reward", place_reward_last=_last_column)


NOT_A_TARGET = 42

"""The vLLM IS weights of Unsloth's GRPO loss (``adapters/unsloth/offpolicy.py``), by hand:
the weight ``grpo_compute_loss`` multiplies the per-token loss by, read off its return."""

from __future__ import annotations

import math

import pytest
import torch

from rlconform.adapters.base import Inexpressible
from tests.unsloth.conftest import needs_unsloth

pytestmark = needs_unsloth

OLD = torch.tensor([[-1.0, -0.5, -2.0]])
ROLLOUT = torch.tensor([[-1.25, -1.0, -0.5]])
MASK = torch.tensor([[1, 0, 1]])  # a tool token between the two actions


def test_sequence_truncate_is_the_clamped_product_over_action_tokens(unsloth):
    weights = unsloth.is_correction_weights(OLD, ROLLOUT, MASK, "sequence_truncate", None, 3.0)
    by_hand = min(math.exp((-1.0 + 1.25) + (-2.0 + 0.5)), 3.0)  # the tool token left out
    assert weights[0, 0].item() == pytest.approx(by_hand, rel=1e-6)
    assert weights[0, 2].item() == pytest.approx(by_hand, rel=1e-6)


def test_token_mask_rejects_outside_the_band(unsloth):
    weights = unsloth.icepop_weights(OLD, ROLLOUT, MASK, 0.5, 2.0)
    assert weights[0, 0].item() == pytest.approx(math.exp(0.25), rel=1e-6)
    assert weights[0, 2].item() == 0.0  # exp(-1.5) = 0.22 < 0.5


def test_token_truncate_clamps_into_the_band(unsloth):
    weights = unsloth.tis_weights(OLD, ROLLOUT, MASK, 0.5, 2.0)
    assert weights[0, 0].item() == pytest.approx(math.exp(0.25), rel=1e-6)
    assert weights[0, 2].item() == pytest.approx(0.5)


def test_a_mode_the_contract_does_not_name_is_not_asked_for(unsloth):
    with pytest.raises(Inexpressible, match="geometric_mask"):
        unsloth.is_correction_weights(OLD, ROLLOUT, MASK, "geometric_mask", None, 3.0)

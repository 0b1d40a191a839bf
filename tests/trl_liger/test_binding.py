"""The Liger binding's conversions: hidden states whose fused log-probs are the case's, and
the one-chunk and fused modes agreeing with each other and with the formula by hand."""

from __future__ import annotations

import pytest
import torch

from rlconform.adapters.base import Inexpressible
from rlconform.adapters.trl_liger.fused import hidden_states
from tests.sapo_overflow import contract_loss_and_gradient
from tests.trl_liger.conftest import needs_liger


def test_hidden_states_give_the_log_probs_at_the_token_ids():
    lp = torch.tensor([[-0.5, -2.0, -1e-6], [-40.0, -0.1, -3.0]], requires_grad=True)
    action = torch.tensor([[1, 1, 1], [1, 0, 1]])
    ids = torch.tensor([[1, 1, 1], [1, 1, 0]])  # the last column of row 1 is padding (id 0)
    hidden = hidden_states(lp, action, ids)
    chosen = torch.log_softmax(hidden, -1).gather(-1, ids.unsqueeze(-1)).squeeze(-1)
    assert torch.allclose(chosen[0], lp[0].detach(), rtol=1e-6, atol=1e-7)
    assert chosen[1, 0].item() == pytest.approx(-40.0, rel=1e-6)
    # padding (token id 0): the leaf's value there too, whatever the id
    assert chosen[1, 2].item() == pytest.approx(-3.0)
    chosen[0].sum().backward()
    assert torch.allclose(lp.grad[0], torch.ones(3), rtol=1e-5)  # the chain rule reaches the leaf


def test_probability_one_at_an_action_token_is_inexpressible():
    lp = torch.tensor([[-1.0, 0.0]])
    with pytest.raises(Inexpressible, match=r"sample 0, token 1: log-prob 0\.0"):
        hidden_states(lp, torch.tensor([[1, 1]]), torch.tensor([[1, 1]]))


def test_junk_off_actions_gets_probability_one_half_and_nan_stays_nan():
    lp = torch.tensor([[-1.0, 3.0, float("nan")]])
    hidden = hidden_states(lp, torch.tensor([[1, 0, 0]]), torch.tensor([[1, 1, 0]]))
    assert torch.log_softmax(hidden[0, 1], -1)[1].item() == pytest.approx(-0.6931472)
    assert torch.isnan(hidden[0, 2]).all()


@needs_liger
def test_the_fused_loss_equals_the_one_chunk_loss_and_the_formula(liger):
    """dapo token mean of -min(r A, clip(r) A), ratio r = exp(logp - old); by hand:
    tokens (A=1, r=e^0.1 > 1.2? no: 1.105), (A=1, r=e^0.3=1.35 -> clipped at 1.2),
    (A=-1, r=1): loss = -(1.10517 + 1.2 - 1) / 3."""
    old = torch.tensor([[-1.0, -1.0], [-2.0, -2.0]])
    logp = torch.tensor([[-0.9, -0.7], [-2.0, -2.0]], requires_grad=True)
    adv = torch.tensor([[1.0, 1.0], [-1.0, -1.0]])
    mask = torch.tensor([[1, 1], [1, 0]])
    per_token, metrics = liger.ppo_clip_loss(
        old, logp, adv, mask, clip_ratio_low=0.2, clip_ratio_high=0.2
    )
    expected = torch.tensor([[-1.1051709, -1.2], [1.0, 1.0]])
    assert torch.allclose(per_token, expected, rtol=1e-6)
    assert metrics["clipfrac"].item() == pytest.approx(1 / 3)
    info = {"dp_size": 1, "batch_num_tokens": 3, "global_batch_size": 2, "loss_scale_factor": None}
    fused = liger.policy_loss_reduced(
        "ppo_clip",
        old,
        logp,
        adv,
        mask,
        clip_ratio_low=0.2,
        clip_ratio_high=0.2,
        global_batch_info=info,
    )
    assert fused.item() == pytest.approx(-(1.1051709 + 1.2 - 1.0) / 3, rel=1e-6)
    fused.backward()
    # d/d logp: -A r / 3 where unclipped, 0 where clipped (and off the mask)
    assert torch.allclose(
        logp.grad, torch.tensor([[-1.1051709 / 3, 0.0], [1 / 3, 0.0]]), rtol=1e-5, atol=1e-7
    )


@needs_liger
def test_per_token_advantages_are_inexpressible(liger):
    with pytest.raises(Inexpressible, match="one advantage per completion"):
        liger.ppo_clip_loss(
            torch.zeros(1, 2) - 1,
            torch.zeros(1, 2) - 1,
            torch.tensor([[1.0, 2.0]]),
            torch.tensor([[1, 1]]),
            clip_ratio_low=0.2,
            clip_ratio_high=0.2,
        )


@needs_liger
def test_sapo_gate_overflows_to_a_nan_gradient():
    """loss.sapo (grad, overflow), on Liger's ``ppo_loss_fn`` itself: the ratio is
    exp(logp - old) unclamped, so at log-ratio 99.5 it is inf in float32; the gate saturates
    to the right loss -4A/tau_pos = -4 but its gradient is 0 x inf = NaN, where the
    contract caps the log-ratio at 20 and has gradient 0 (torchref's). At log-ratio 0.5 it is
    the contract's -4 sigmoid(e^0.5 - 1)."""
    import math

    from liger_kernel.chunked_loss.grpo_loss import LigerFusedLinearGRPOFunction

    def liger_loss(old: float, logp: torch.Tensor) -> torch.Tensor:
        mask = torch.ones(1, 1)
        loss, _ = LigerFusedLinearGRPOFunction.ppo_loss_fn(
            logp,
            mask,
            torch.tensor([1.0]),
            mask,
            old_per_token_logps=torch.tensor([[old]]),
            beta=0.0,
            loss_type="sapo",
            sapo_temperature_pos=1.0,
            sapo_temperature_neg=1.05,
        )
        return loss

    sig = 1.0 / (1.0 + math.exp(-(math.exp(0.5) - 1.0)))
    logp = torch.tensor([[-0.5]], requires_grad=True)
    assert liger_loss(-1.0, logp).item() == pytest.approx(-4.0 * sig, rel=1e-6)
    logp = torch.tensor([[-0.5]], requires_grad=True)
    loss = liger_loss(-100.0, logp)
    assert loss.item() == -4.0
    (grad,) = torch.autograd.grad(loss, logp)
    assert math.isnan(grad.item())  # Liger
    assert contract_loss_and_gradient() == (pytest.approx(-4.0), 0.0)  # torchref

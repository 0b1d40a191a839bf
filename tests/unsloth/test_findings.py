"""Every break the Unsloth baseline declares, reproduced by hand on unsloth-zoo's real
functions, next to what a correct implementation gives (torchref or the plain formula)."""

from __future__ import annotations

import pytest
import torch

from tests.sapo_overflow import contract_loss_and_gradient
from tests.unsloth.conftest import needs_unsloth

pytestmark = needs_unsloth


def test_a_micro_batch_of_empty_completions_crashes_on_the_minus_zero_slice(unsloth):
    """logits_to_keep = 0: input_ids[:, -0:] is the whole row, the hidden states 0 wide."""
    ids = torch.tensor([[3, 0], [4, 0]])
    assert ids[:, -0:].shape == (2, 2)  # the slice grpo_accumulated_loss takes
    with pytest.raises(RuntimeError, match="invalid for input of size 0"):
        unsloth.policy_loss_reduced(
            "ppo_clip",
            torch.zeros(2, 0),
            torch.zeros(2, 0),
            torch.zeros(2, 0),
            torch.zeros(2, 0, dtype=torch.long),
            clip_ratio_low=0.2,
            clip_ratio_high=0.2,
            global_batch_info={"dp_size": 1, "batch_num_tokens": 1, "global_batch_size": 2},
        )
    # one token per completion, the same loss runs
    loss = unsloth.policy_loss_reduced(
        "ppo_clip",
        torch.full((2, 1), -1.0),
        torch.full((2, 1), -1.0),
        torch.ones(2, 1),
        torch.ones(2, 1, dtype=torch.long),
        clip_ratio_low=0.2,
        clip_ratio_high=0.2,
        global_batch_info={"dp_size": 1, "batch_num_tokens": 2, "global_batch_size": 2},
    )
    assert torch.isfinite(loss)


def test_a_nan_hidden_state_at_padding_gives_a_nan_gradient_there(unsloth):
    """Unsloth's chunked log-softmax on the real function: the torch.where that zeroes the
    padding's log-prob stops the value, not the NaN Jacobian behind it."""
    zoo = unsloth.zoo
    lm_head = torch.eye(3)
    hidden = torch.tensor([[[0.0, 1.0, 0.0], [float("nan"), 0.0, 0.0]]], requires_grad=True)
    ids = torch.tensor([[1, 0]])
    logps = zoo.grpo_chunked_hidden_states_logprobs(hidden, lm_head, ids, 1, 0, 0, 0, 1.0)
    kept = torch.where(torch.tensor([[True, False]]), logps, 0.0)
    kept.sum().backward()
    assert torch.isnan(hidden.grad[0, 1]).all()
    assert torch.isfinite(hidden.grad[0, 0]).all()
    # a correct one: the padding's row is cut out before the log-softmax
    clean = hidden.detach()[:, :1].clone().requires_grad_(True)
    torch.log_softmax(clean @ lm_head.T, -1)[..., 1].sum().backward()
    assert torch.isfinite(clean.grad).all()


def test_grpo_averages_over_every_row_including_an_actionless_one(unsloth):
    """loss_type grpo: (2 + 5.5 + 0) / 3, where the contract's seq-mean-token-mean is
    (2 + 5.5) / 2 over the sequences with an action token."""
    loss_mat = torch.tensor([[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 0.0, 0.0], [7.0, 7.0, 7.0, 7.0]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0], [0, 0, 0, 0]])
    value = unsloth.agg_loss(loss_mat.requires_grad_(True), mask, "seq-mean-token-mean")
    assert float(value) == pytest.approx(2.5)
    from rlconform.oracle.aggregate import aggregate

    rows = [[1.0, 2.0, 3.0], [5.0, 6.0], []]
    expected = aggregate(rows, [[1, 1, 1], [1, 1], []], "seq-mean-token-mean")
    assert expected == pytest.approx(3.75)


def test_the_k3_term_is_clamped_as_the_profile_says(unsloth):
    """kl_i: k3 of clamp(ref - logp, +-20), the value clamped to 10 (TRL clamps neither)."""
    logp = torch.tensor([[-1.0, -30.0]])
    ref = torch.tensor([[-1.5, -1.0]])
    kl = unsloth.kl_penalty(logp, ref, "low_var_kl")
    d = -0.5
    assert float(kl[0, 0]) == pytest.approx(torch.tensor(d).exp().item() - d - 1, rel=1e-5)
    assert float(kl[0, 1]) == pytest.approx(10.0)


def test_an_overflowing_ratio_gives_a_nan_gradient_through_the_delta_clamp(unsloth):
    """exp(new - old) at a log-ratio of 99.5 is inf in float32; clamp(inf, max=delta) passes
    0 x inf = NaN back. A correct dual clip has gradient 0 there (the capped branch is flat)."""
    zoo = unsloth.zoo
    new = torch.tensor([[-0.5, -1.0]], requires_grad=True)
    old = torch.tensor([[-100.0, -1.0]])
    mask = torch.ones(1, 2)
    loss, *_ = zoo.grpo_compute_loss(
        None,
        new,
        old,
        None,
        torch.tensor([[1, 1]]),
        mask,
        0.0,
        torch.tensor([-1.0]),
        loss_type="dapo",
        epsilon_low=0.2,
        epsilon_high=0.2,
        delta=3.0,
        num_items_in_batch=2,
        max_completion_length=2,
    )
    loss.backward()
    assert torch.isnan(new.grad[0, 0])
    # torchref: the same surrogate with the ratio formed after the cap of the log-ratio
    ref_new = new.detach().clone().requires_grad_(True)
    ratio = torch.exp(torch.clamp(ref_new - old, max=torch.log(torch.tensor(3.0)).item() + 1))
    surrogate = -torch.min(torch.clamp(ratio, max=3.0) * -1.0, torch.clamp(ratio, 0.8, 1.2) * -1.0)
    surrogate.mean().backward()
    assert torch.isfinite(ref_new.grad).all() and float(ref_new.grad[0, 0]) == 0.0


def test_an_overflowing_sequence_ratio_makes_the_gspo_loss_nan(unsloth):
    """importance_sampling_level='sequence': exp(99.5) = inf on a row whose second column is
    padding; the row's (B, 1) loss times the mask is inf x 0 = NaN there."""
    zoo = unsloth.zoo
    new = torch.tensor([[-0.5, 0.0]])
    old = torch.tensor([[-100.0, 0.0]])
    mask = torch.tensor([[1.0, 0.0]])
    loss, *_ = zoo.grpo_compute_loss(
        None,
        new,
        old,
        None,
        torch.tensor([[1, 0]]),
        mask,
        0.0,
        torch.tensor([-1.0]),
        loss_type="dapo",
        importance_sampling_level="sequence",
        epsilon_low=0.2,
        epsilon_high=0.2,
        num_items_in_batch=1,
        max_completion_length=2,
    )
    assert torch.isnan(loss)
    # the contract's value: the one action token's loss, -min(inf x -1, 1.2 x -1) = inf
    assert float(-torch.min(torch.tensor(float("inf")) * -1.0, torch.tensor(-1.2))) == float("inf")


def test_an_overflowing_ratio_gives_a_nan_sapo_gradient(unsloth):
    """loss.sapo (grad, overflow): on the trainer's path (no rollout_logps_as_old) the ratio
    exp(new - old) is unclamped; at log-ratio 99.5 it is inf in float32, the gate saturates
    to the right loss -4A/tau_pos = -4 and its gradient is 0 x inf = NaN, where the
    contract caps the log-ratio at 20 and has gradient 0 (torchref's)."""
    new = torch.tensor([[-0.5]], requires_grad=True)
    loss, *_ = unsloth.zoo.grpo_compute_loss(
        None,
        new,
        torch.tensor([[-100.0]]),
        None,
        torch.tensor([[1]]),
        torch.ones(1, 1),
        0.0,
        torch.tensor([1.0]),
        loss_type="sapo",
        sapo_temperature_pos=1.0,
        sapo_temperature_neg=1.05,
        epsilon_low=0.2,
        epsilon_high=0.2,
        num_items_in_batch=1,
        max_completion_length=1,
    )
    assert loss.item() == -4.0
    loss.backward()
    assert torch.isnan(new.grad[0, 0])
    assert contract_loss_and_gradient() == (pytest.approx(-4.0), 0.0)  # torchref

"""Every break the Unsloth baseline declares, reproduced by hand on unsloth-zoo's real
functions, next to what a correct implementation gives (torchref or the plain formula)."""

from __future__ import annotations

import pytest
import torch

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

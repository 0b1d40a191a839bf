"""The bindings against values worked out by hand from the contract's formulas, on AReaL's
real functions (needs AReaL 1.0.4)."""

from __future__ import annotations

import math

import pytest
import torch

from tests.areal.conftest import needs_areal

pytestmark = needs_areal


def test_ppo_clip_per_token_loss_and_clipfrac_by_hand(areal):
    # ratios e^0.5 (clipped at 1.2 for A > 0), e^-0.1 (inside), a tool token, padding
    old = torch.tensor([[-1.0, -1.0, -2.0, 0.0]])
    logp = torch.tensor([[-0.5, -1.1, -2.0, 0.0]], requires_grad=True)
    adv = torch.tensor([[1.0, -2.0, 5.0, 0.0]])
    mask = torch.tensor([[1, 1, 0, 0]])
    loss, metrics = areal.ppo_clip_loss(
        old, logp, adv, mask, clip_ratio_low=0.2, clip_ratio_high=0.2
    )
    assert loss.shape == (1, 4)
    assert loss[0, 0].item() == pytest.approx(-1.2, rel=1e-6)  # max(-e^0.5, -1.2)
    assert loss[0, 1].item() == pytest.approx(2.0 * math.exp(-0.1), rel=1e-6)
    assert loss[0, 3].item() == 0.0  # padding is not in the packed micro-batch
    assert metrics["clipfrac"].item() == pytest.approx(0.5)
    (grad,) = torch.autograd.grad(loss[0, :2].sum(), logp)
    assert grad[0].tolist() == pytest.approx([0.0, 2.0 * math.exp(-0.1), 0.0, 0.0], rel=1e-6)


def test_the_ratio_is_not_clamped_beyond_log_ratio_20(areal):
    # declared (loss.ppo_clip, extreme_log_ratio): old -30, logp -5, A -1: the log-ratio 25
    # takes the unclipped branch -A r. The contract clamps the log-ratio to 20 (loss e^20,
    # what torchref gives); AReaL's ppo_actor_loss_fn exponentiates 25 (loss e^25)
    from rlconform.adapters.torchref import TorchRef

    args = (torch.tensor([[-30.0]]), torch.tensor([[-5.0]]), torch.tensor([[-1.0]]))
    kwargs = {"clip_ratio_low": 0.2, "clip_ratio_high": 0.2}
    loss, _ = areal.ppo_clip_loss(*args, torch.tensor([[1]]), **kwargs)
    assert loss.item() == pytest.approx(math.exp(25.0), rel=1e-6)
    reference, _ = TorchRef().ppo_clip_loss(*args, torch.tensor([[1]]), **kwargs)
    assert reference.item() == pytest.approx(math.exp(20.0), rel=1e-6)


def test_sapo_gate_by_hand_and_its_nan_gradient_beyond_exp_range(areal):
    # r = e^0.5, A = 1, tau_pos 1: l = -4 sigmoid(e^0.5 - 1), gradient -4 sigmoid'(.) e^0.5;
    # A = -1, tau_neg 1.05: l = (4 / 1.05) sigmoid(1.05 (e^0.5 - 1)).
    z = math.exp(0.5) - 1.0
    sig = 1.0 / (1.0 + math.exp(-z))
    old = torch.tensor([[-1.0, -1.0, 0.0]])
    logp = torch.tensor([[-0.5, -0.5, 0.0]], requires_grad=True)
    loss, metrics = areal.sapo_loss(
        old,
        logp,
        torch.tensor([[1.0, -1.0, 0.0]]),
        torch.tensor([[1, 1, 0]]),
        tau_pos=1.0,
        tau_neg=1.05,
    )
    assert metrics == {}
    neg = 1.0 / (1.0 + math.exp(-1.05 * z))
    assert loss[0, :2].tolist() == pytest.approx([-4.0 * sig, 4.0 / 1.05 * neg], rel=1e-6)
    (grad,) = torch.autograd.grad(loss[0, 0], logp)
    assert grad[0, 0].item() == pytest.approx(-4.0 * sig * (1.0 - sig) * math.exp(0.5), rel=1e-5)
    # declared (loss.sapo, grad, overflow): sapo_loss_fn itself, log-ratio 99.5: the ratio
    # overflows to inf, the loss is the saturated -4A/tau, the gradient NaN; torchref's
    # clamped ratio gives gradient 0 (the contract's)
    from rlconform.adapters.torchref import TorchRef

    functional = areal.runtime.functional
    for target_loss in ("areal", "torchref"):
        current = torch.tensor([[0.0]], requires_grad=True)
        args = (torch.tensor([[-99.5]]), current, torch.tensor([[1.0]]), torch.tensor([[1]]))
        if target_loss == "areal":
            value, _ = functional.sapo_loss_fn(
                current[0], args[0][0], args[2][0], 1.0, 1.05, torch.tensor([True])
            )
        else:
            per_token, _ = TorchRef().sapo_loss(*args, tau_pos=1.0, tau_neg=1.05)
            value = per_token.sum()
        (g,) = torch.autograd.grad(value, current)
        assert value.item() == pytest.approx(-4.0)
        if target_loss == "areal":
            assert math.isnan(g.item())
        else:
            assert g.item() == 0.0


def test_dual_clip_caps_a_negative_advantage_at_c_times_its_size(areal):
    loss, _ = areal.ppo_clip_loss(
        torch.tensor([[-2.0]]),
        torch.tensor([[0.0]]),
        torch.tensor([[-1.0]]),
        torch.tensor([[1]]),
        clip_ratio_low=0.2,
        clip_ratio_high=0.2,
        clip_ratio_c=3.0,
    )
    assert loss.item() == pytest.approx(3.0)  # min(e^2, 3) * |A|


def test_value_loss_is_half_the_larger_squared_error(areal):
    loss, metrics = areal.value_loss(
        torch.tensor([[1.0, 0.0]]),
        torch.tensor([[0.0, 0.0]]),
        torch.tensor([[0.5, 0.0]]),
        torch.tensor([[1, 0]]),
        cliprange_value=0.2,
    )
    # v_clip = 0.5 + clamp(0.5, +-0.2) = 0.7: max(1.0, 0.49) / 2
    assert loss[0, 0].item() == pytest.approx(0.5)
    assert metrics["vf_clipfrac"].item() == 0.0


def test_k3_by_hand(areal):
    kl = areal.kl_penalty(torch.tensor([[-1.0]]), torch.tensor([[-2.0]]), "low_var_kl")
    assert kl.item() == pytest.approx(math.exp(-1.0) - 1 + 1.0, rel=1e-6)


def test_grpo_advantages_by_hand(areal):
    # one group of two (rows 0 and 2, interleaved with the other group), unbiased std
    scores = torch.tensor([[0.0, 1.0], [0.0, 2.0], [3.0, 0.0], [0.0, 2.0]])
    mask = torch.tensor([[1, 1], [1, 1], [1, 0], [1, 1]])
    adv, ret = areal.advantage_grpo(scores, mask, ["a", "b", "a", "b"], epsilon=1e-5)
    std = math.sqrt(2.0)  # scores 1 and 3: mean 2, unbiased std sqrt(2)
    assert adv[0].tolist() == pytest.approx([-1 / (std + 1e-5)] * 2, rel=1e-6)
    assert adv[2].tolist() == pytest.approx([1 / (std + 1e-5), 0.0], rel=1e-6)
    assert adv[1].tolist() == [0.0, 0.0] and adv[3].tolist() == [0.0, 0.0]  # equal scores
    assert torch.equal(adv, ret)


def test_unequal_groups_are_inexpressible(areal):
    from rlconform.adapters.base import Inexpressible

    with pytest.raises(Inexpressible, match="group_size"):
        areal.advantage_grpo(
            torch.tensor([[1.0], [0.0], [1.0]]),
            torch.ones(3, 1, dtype=torch.int64),
            ["a", "a", "b"],
        )


def test_gae_bootstraps_the_row_that_fills_the_width_not_the_truncated_one(areal):
    """The published adv.gae finding, on the raw ``_compute_advantages``: AReaL takes
    "truncated" to be a sequence filling the padded width (``seq_no_eos_mask``)."""
    from rlconform.oracle.advantage import gae

    # width 3: one prompt token, then row 0 has one response token (truncated: the critic
    # values the state after it at 1.0), row 1 two (ended with EOS, reward 1; the critic's
    # value after its last token, 0.7, must not be used)
    cli, actor_module = areal.runtime.cli_args, areal.runtime.actor
    config = cli.PPOActorConfig(
        experiment_name="rlconform",
        trial_name="rlconform",
        reward_norm=None,
        adv_norm=None,
        kl_ctl=0.0,
        discount=1.0,
        gae_lambda=1.0,
    )
    actor = actor_module.PPOActor(config, engine=None)
    data = {
        "input_ids": torch.ones((2, 3), dtype=torch.long),
        "attention_mask": torch.tensor([[True, True, False], [True, True, True]]),
        "loss_mask": torch.tensor([[0, 1, 0], [0, 1, 1]]),
        "logprobs": torch.zeros((2, 3)),
        "values": torch.tensor([[0.5, 1.0, 0.0], [0.2, 0.3, 0.7]]),  # rolled columns
        "rewards": torch.tensor([0.0, 1.0]),
    }
    out = actor._compute_advantages(data)
    assert out["advantages"][0, 0].item() == pytest.approx(-0.5, rel=1e-6)  # 0 + 0 - 0.5
    assert out["advantages"][1, :2].tolist() == pytest.approx([1.5, 1.4], rel=1e-6)
    assert out["returns"][0, 0].item() == pytest.approx(0.0, abs=1e-6)  # A + V
    assert out["returns"][1, :2].tolist() == pytest.approx([1.7, 1.7], rel=1e-6)

    # the contract: row 0 bootstraps from 1.0 (A = 0.5), row 1 stops at its EOS (A = 0.8,
    # 0.7), so every return is 1.0 (returns = A + V, before whitening)
    _, returns = gae(
        [[0.0], [0.0, 1.0]],
        [[0.5], [0.2, 0.3]],
        [[1], [1, 1]],
        [False, True],
        [1.0, 0.7],
        gamma=1.0,
        lam=1.0,
    )
    assert returns == [pytest.approx([1.0]), pytest.approx([1.0, 1.0])]


def _ratios():
    # log-ratios old - rollout: 0.2 and 0.4 on row 0, 0.1 and -0.1 on row 1; column 2 padding
    old = torch.tensor([[-1.0, -1.0, 0.0], [-1.0, -1.0, 0.0]])
    rollout = torch.tensor([[-1.2, -1.4, float("nan")], [-1.1, -0.9, float("nan")]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 0]])
    return old, rollout, mask


def test_rejection_sampling_token_and_sequence_weights_by_hand(areal):
    """AReaL's behave_imp_weight (use_decoupled_loss with rejection_sampling) on the
    contract's modes, against values worked out by hand: token truncate clamps e^0.4 = 1.49
    to 1.3; the sequence modes use the geometric mean, e^0.3 = 1.35 for row 0 (outside a band
    up to 1.3: masked, or clamped to 1.3) and e^0 = 1 for row 1."""
    old, rollout, mask = _ratios()
    e2, e1, em1 = math.exp(0.2), math.exp(0.1), math.exp(-0.1)
    cases = {
        "token_truncate": [[e2, 1.3, 0.0], [e1, em1, 0.0]],
        "token_mask": [[e2, 0.0, 0.0], [e1, em1, 0.0]],
        "sequence_truncate": [[1.3, 1.3, 0.0], [1.0, 1.0, 0.0]],
        "sequence_mask": [[0.0, 0.0, 0.0], [1.0, 1.0, 0.0]],
    }
    for mode, expected in cases.items():
        weights = areal.is_correction_weights(old, rollout, mask, mode=mode, clip_max=1.3)
        assert torch.allclose(weights, torch.tensor(expected), atol=1e-6), (mode, weights)
    tis = areal.tis_weights(old, rollout, mask, clip_low=0.0, clip_high=1.3)
    assert torch.allclose(tis, torch.tensor(cases["token_truncate"]), atol=1e-6)
    icepop = areal.icepop_weights(old, rollout, mask, clip_low=0.95, clip_high=1.3)
    assert torch.allclose(icepop, torch.tensor([[e2, 0.0, 0.0], [e1, 0.0, 0.0]]), atol=1e-6)


def test_a_band_rejection_sampling_refuses_is_inexpressible(areal):
    from rlconform.adapters.base import Inexpressible

    old, rollout, mask = _ratios()
    with pytest.raises(Inexpressible, match="upper bound"):
        areal.icepop_weights(old, rollout, mask, clip_low=1.0, clip_high=1.0)
    with pytest.raises(Inexpressible, match="needs an upper bound"):
        areal.is_correction_weights(old, rollout, mask, mode="token_mask", clip_max=None)

"""The slime step binding's own pieces (CONTRACT area `step`), without slime: the logits
that carry the harness's log-prob leaves into slime's log-softmax, and the contract
settings read off slime's flags (adapters/slime/step.py)."""

from __future__ import annotations

import argparse

import pytest
import torch

from rlconform.adapters.base import Inexpressible, SetupError
from rlconform.adapters.slime import step as slime_step


def _log_softmax_rows(logits: torch.Tensor, lengths: list[int]) -> list[torch.Tensor]:
    """What slime's get_log_probs_and_entropy reads off the packed logits (target id 0,
    one-token prompt: position p of a sample gives response token p)."""
    flat = torch.log_softmax(logits.squeeze(0), dim=-1)[:, 0]
    rows, offset = [], 0
    for n in lengths:
        rows.append(flat[offset : offset + n])
        offset += n + 1
    return rows


def test_log_softmax_of_the_logits_is_the_leaf_and_its_gradient_passes_through():
    lp = [
        torch.tensor([-0.5, -3.0, -1e-6, -40.0], dtype=torch.float32, requires_grad=True),
        torch.tensor([-2.0], dtype=torch.float32, requires_grad=True),
    ]
    masks = [torch.tensor([1, 1, 1, 1]), torch.tensor([1])]
    weights = [torch.tensor([1.0, -2.0, 0.5, 3.0]), torch.tensor([-1.5])]
    rows = _log_softmax_rows(slime_step._logits(lp, masks), [4, 1])
    for got, want in zip(rows, lp):
        torch.testing.assert_close(got, want.detach(), rtol=1e-6, atol=1e-6)
    sum((w * r).sum() for w, r in zip(weights, rows)).backward()
    for leaf, w in zip(lp, weights):
        torch.testing.assert_close(leaf.grad, w, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("value", [0.0, 0.3, -1e-35])
def test_an_action_token_at_probability_one_or_more_is_inexpressible(value):
    lp = [torch.tensor([-1.0, value], requires_grad=True)]
    with pytest.raises(Inexpressible, match="token 1"):
        slime_step._logits(lp, [torch.tensor([1, 1])])


def test_junk_at_a_tool_token_gets_finite_logits_and_no_gradient():
    lp = torch.tensor([-1.0, 2.5, -0.25], requires_grad=True)
    logits = slime_step._logits([lp], [torch.tensor([1, 0, 1])])
    assert bool(torch.isfinite(logits).all())
    rows = _log_softmax_rows(logits, [3])
    (rows[0] * torch.tensor([1.0, 0.0, 1.0])).sum().backward()
    assert lp.grad[1].item() == 0.0
    torch.testing.assert_close(lp.grad[[0, 2]], torch.ones(2), rtol=1e-5, atol=1e-6)


def test_nan_at_a_tool_token_stays_nan_as_a_broken_model_would_give():
    lp = torch.tensor([-1.0, float("nan")], requires_grad=True)
    logits = slime_step._logits([lp], [torch.tensor([1, 0])])
    assert bool(torch.isnan(logits[0, 1]).all())
    assert bool(torch.isfinite(logits[0, 0]).all())


def _flags(**changes) -> argparse.Namespace:
    # slime 624b824's parser defaults for the flags the step reads
    flags = dict(
        advantage_estimator="grpo",
        rewards_normalization=True,
        grpo_std_normalization=True,
        normalize_advantages=False,
        gamma=1.0,
        lambd=1.0,
        kl_coef=0.0,
        kl_loss_type="k1",
        use_kl_loss=False,
        kl_loss_coef=0.0,
        use_unbiased_kl=False,
        eps_clip=0.2,
        eps_clip_high=None,
        eps_clip_c=None,
        entropy_coef=0.0,
        calculate_per_token_loss=False,
        value_clip=0.2,
        use_rollout_logprobs=False,
        use_tis=False,
        get_mismatch_metrics=False,
        use_opsm=False,
        use_opd=False,
        custom_advantage_function_path=None,
        custom_pg_loss_reducer_function_path=None,
        keep_old_actor=False,
        loss_type="policy_loss",
    )
    flags.update(changes)
    return slime_step._validated(argparse.Namespace(**flags))


def test_default_flags_are_grpo_with_the_per_rollout_mean_on_policy():
    settings = slime_step.contract_settings(_flags())
    assert settings["estimator"] == "grpo"
    assert settings["loss_agg_mode"] == "seq-mean-token-mean"
    assert settings["clip_high"] == 0.2  # slime_validate_args: eps_clip_high = eps_clip
    assert settings["on_policy"] is True  # can_reuse_log_probs_in_loss
    assert settings["kl_in_reward"] is False


def test_named_flags_move_the_settings():
    assert (
        slime_step.contract_settings(_flags(calculate_per_token_loss=True))["loss_agg_mode"]
        == "token-mean"
    )
    ppo = slime_step.contract_settings(_flags(advantage_estimator="ppo"))
    assert (ppo["estimator"], ppo["critic"], ppo["on_policy"]) == ("gae", True, False)
    assert ppo["value_loss_scale"] == 1.0
    rpp = slime_step.contract_settings(
        _flags(advantage_estimator="reinforce_plus_plus", normalize_advantages=True, kl_coef=0.01)
    )
    assert rpp["kl_in_reward"] is True and rpp["on_policy"] is False
    # grpo's returns ignore the rollout KL (get_grpo_returns)
    assert slime_step.contract_settings(_flags(kl_coef=0.01))["kl_in_reward"] is False


@pytest.mark.parametrize(
    "changes",
    [{"entropy_coef": 0.01}, {"advantage_estimator": "gspo"}, {"use_tis": True}],
)
def test_flags_without_a_step_binding_are_a_setup_error(changes):
    with pytest.raises(SetupError):
        slime_step.contract_settings(_flags(**changes))

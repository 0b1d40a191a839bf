"""The AReaL step binding (adapters/areal/step.py) on hand-computed cases, the findings the
baseline declares reproduced on AReaL's real functions next to what a correct chain gives,
and plants in the engine's loss weighting that the step must catch.

Every expected number below is worked out by hand in the comments, not read off AReaL.
"""

from __future__ import annotations

import importlib
import math

import pytest
import torch

from rlconform.adapters.step_io import StepBatch
from rlconform.conformance.trainer_config import TrainerConfig
from tests.areal.conftest import needs_areal
from tests.areal.test_plants import mutate

pytestmark = needs_areal

_ENGINE = "areal.engine.fsdp_engine"


def _batch(
    lengths, masks, scores, groups, micro_batches, old=-1.0, ref=-1.0, delta=0.0, critic=False
):
    rows, width = len(lengths), max(lengths) + 1
    response = torch.zeros(rows, width)
    loss_mask = torch.zeros(rows, width)
    for i, (n, mask) in enumerate(zip(lengths, masks)):
        response[i, :n] = 1
        loss_mask[i, :n] = torch.tensor(mask, dtype=torch.float32)
    old_lp = torch.full((rows, width), old)
    return StepBatch(
        uids=[f"s{i}" for i in range(rows)],
        index=list(groups),
        response_mask=response,
        loss_mask=loss_mask,
        scores=torch.tensor(scores),
        old_log_probs=old_lp,
        ref_log_probs=torch.full((rows, width), ref),
        log_probs=(old_lp + delta).requires_grad_(True),
        entropy=torch.ones(rows, width).requires_grad_(True),
        micro_batches=micro_batches,
        # the critic's values at rollout and now: 0 everywhere
        values=torch.zeros(rows, width) if critic else None,
        vpreds=torch.zeros(rows, width).requires_grad_(True) if critic else None,
    )


def _config(areal, name: str) -> TrainerConfig:
    return next(c for c in areal.trainer_configs() if c.name == name)


def test_default_config_is_areal_defaults_read_off_its_config(areal):
    cfg = _config(areal, "default").resolved
    # PPOActorConfig(): kl_ctl 0.1 with k1 in the reward, no reward / advantage norm,
    # discount = gae_lambda = 1, eps_clip 0.2, no dual clip
    assert (cfg["estimator"], cfg["whiten_advantages"], cfg["gamma"]) == (
        "reinforce_pp",
        False,
        1.0,
    )
    assert (cfg["kl_in_reward"], cfg["kl_coef"], cfg["kl_in_reward_estimator"]) == (True, 0.1, "k1")
    assert (cfg["clip_low"], cfg["clip_high"], cfg["clip_ratio_c"]) == (0.2, 0.2, None)
    assert _config(areal, "grpo_dual_clip").resolved["clip_ratio_c"] == 3.0


def test_grpo_step_by_hand(areal):
    # one group of two, scores 1 and 0: mean 0.5, unbiased std sqrt(0.5) = 0.70711, so the
    # advantages are +-0.5 / (0.70711 + 1e-5) = +-0.70710 on every action token.
    # Ratio 1 (logp = old): the loss is -A per token, token-mean over the 3 action tokens
    # of both micro-batches = -(2 * 0.70710 - 0.70710) / 3 = -0.23570; d loss / d logp is
    # -A / 3 on each action token.
    batch = _batch([2, 1], [[1, 1], [1]], [1.0, 0.0], ["g", "g"], [[0], [1]])
    out = areal.train_step(batch, _config(areal, "grpo"))
    a = 0.5 / (math.sqrt(0.5) + 1e-5)
    assert out.stages["advantages"][0, :2].tolist() == pytest.approx([a, a], rel=1e-5)
    assert out.stages["advantages"][1, 0].item() == pytest.approx(-a, rel=1e-5)
    assert out.loss == pytest.approx(-a / 3, rel=1e-5)
    grad = batch.log_probs.grad
    assert grad[0, :2].tolist() == pytest.approx([-a / 3, -a / 3], rel=1e-5)
    assert grad[1, 0].item() == pytest.approx(a / 3, rel=1e-5)
    assert grad[0, 2].item() == 0.0 and grad[1, 1:].abs().sum().item() == 0.0


def test_sapo_step_by_hand(areal):
    # grpo_sapo: the same group as above (A = +-0.70710), ratio 1: the gate is
    # (4 / tau) sigmoid(0) = 2 / tau, so the per-token loss is -2A / tau (tau_pos 1 for
    # A > 0, tau_neg 1.05 for A < 0) and its slope 4 sigma'(0) = 1 gives the plain -A:
    # loss = (-2a - 2a + 2a / 1.05) / 3 token-mean, gradient -A / 3 as the clipped loss.
    cfg = _config(areal, "grpo_sapo").resolved
    assert (cfg["policy_loss"], cfg["sapo_tau_pos"], cfg["sapo_tau_neg"]) == ("sapo", 1.0, 1.05)
    batch = _batch([2, 1], [[1, 1], [1]], [1.0, 0.0], ["g", "g"], [[0], [1]])
    out = areal.train_step(batch, _config(areal, "grpo_sapo"))
    a = 0.5 / (math.sqrt(0.5) + 1e-5)
    assert out.loss == pytest.approx((-4.0 * a + 2.0 * a / 1.05) / 3, rel=1e-5)
    grad = batch.log_probs.grad
    assert grad[0, :2].tolist() == pytest.approx([-a / 3, -a / 3], rel=1e-5)
    assert grad[1, 0].item() == pytest.approx(a / 3, rel=1e-5)
    assert grad[0, 2].item() == 0.0 and grad[1, 1:].abs().sum().item() == 0.0


def test_default_kl_reward_by_hand(areal):
    # default: old -1, ref -1.5 on every token: k1 = old - ref = 0.5, reward -0.1 * 0.5 =
    # -0.05 per action token, the score 1 on the last one; advantages are the sums of the
    # rewards from each token on: [1 - 0.1, 1 - 0.05] = [0.9, 0.95]
    batch = _batch([2], [[1, 1]], [1.0], ["g"], [[0]], old=-1.0, ref=-1.5)
    out = areal.train_step(batch, _config(areal, "default"))
    assert out.stages["token_rewards"][0, :2].tolist() == pytest.approx([-0.05, 0.95], rel=1e-5)
    assert out.stages["advantages"][0, :2].tolist() == pytest.approx([0.9, 0.95], rel=1e-5)
    assert out.state == {"kl_coef": 0.1}


def test_longest_sample_loses_its_reward_under_mask_no_eos(areal):
    # declared (step.update, grpo_mask_no_eos): both samples end with EOS, far below
    # max_new_tokens. A correct chain keeps both rewards (advantages +-0.70710, as under
    # grpo); AReaL pads the batch to the longest trajectory and takes seqlens == width for
    # "no EOS", so sample 0 (the longest) gets 0
    batch = _batch([3, 1], [[1, 1, 1], [1]], [1.0, 0.0], ["g", "g"], [[0, 1]])
    grpo = areal.train_step(batch, _config(areal, "grpo"))
    a = 0.5 / (math.sqrt(0.5) + 1e-5)
    assert grpo.stages["advantages"][0, :3].tolist() == pytest.approx([a] * 3, rel=1e-5)
    batch = _batch([3, 1], [[1, 1, 1], [1]], [1.0, 0.0], ["g", "g"], [[0, 1]])
    masked = areal.train_step(batch, _config(areal, "grpo_mask_no_eos"))
    assert masked.stages["advantages"][0, :3].tolist() == [0.0, 0.0, 0.0]
    assert batch.log_probs.grad[0, :3].abs().sum().item() == 0.0
    # the same on AReaL's function alone: the longest of two trajectories is "no EOS"
    actor = areal._ppo_actor(mask_no_eos_with_zero=True, kl_ctl=0.0)
    data = {
        "input_ids": torch.ones((2, 4), dtype=torch.long),
        "attention_mask": torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]], dtype=torch.bool),
        "loss_mask": torch.tensor([[0, 1, 1, 1], [0, 1, 0, 0]]),
        "logprobs": torch.zeros((2, 4)),
        "rewards": torch.tensor([1.0, 1.0]),
    }
    out = actor._compute_advantages(data)
    assert out["advantages"][0, :3].tolist() == [0.0, 0.0, 0.0]  # correct: 1.0 each
    assert out["advantages"][1, 0].item() == 1.0


def test_score_on_a_trailing_tool_token_is_lost(areal):
    # declared (step.update, mask_holes): sample 0 is [action, tool]; its score 1 is
    # placed on its last token (the contract's and AReaL's placement agree: L - 1), but
    # the GAE loop carries nothing from a mask-0 token, so the action token's advantage
    # is 0 (no KL: the grpo configs have kl_ctl 0; default's would be its KL reward only).
    # A correct chain gives the action token the score carried back: 1.0 under default
    # without KL (the score, undiscounted).
    batch = _batch([2], [[1, 0]], [1.0], ["g"], [[0]], old=-1.0, ref=-1.0)
    out = areal.train_step(batch, _config(areal, "default"))
    assert out.stages["token_rewards"][0, :2].tolist() == pytest.approx([0.0, 1.0])
    assert out.stages["advantages"][0, 0].item() == 0.0  # correct: 1.0


def test_ppo_critic_config_is_gsm8k_ppo_read_off_areal_configs(areal):
    cfg = _config(areal, "ppo_critic").resolved
    # adv_norm batch / batch (unbiased, NormConfig's default), discount = gae_lambda = 1,
    # the critic's eps_clip 0.5 (PPOCriticConfig's default, as gsm8k_ppo.yaml sets it)
    assert (cfg["estimator"], cfg["critic"], cfg["whiten_advantages"]) == ("gae", True, True)
    assert (cfg["gamma"], cfg["lam"], cfg["cliprange_value"]) == (1.0, 1.0, 0.5)
    assert (cfg["clip_low"], cfg["kl_in_reward"]) == (0.4, False)


def test_longest_sample_is_bootstrapped_from_the_critic_under_ppo_critic(areal):
    # declared (step.update, ppo_critic; adv.gae's truncated_bootstrap): scores 1 and 0,
    # lengths 2 and 1, every value 0 except the critic's value after a sample's last token
    # (the stand-in critic's AFTER_VALUE, 1.0). Both samples ended with EOS, so a correct
    # chain gives returns [1, 1] and [0] (gamma = lambda = 1); AReaL pads to the longest
    # trajectory and bootstraps sample 0 from values[:, W - 1] = 1.0: returns [2, 2].
    # The value loss is 0.5 x the mean squared error over the 3 action tokens (vpreds 0,
    # inside the clip band): correct 0.5 * (1 + 1 + 0) / 3 = 1/3, AReaL's 0.5 * 8 / 3 = 4/3;
    # d/d vpred = (v - R) / 3: AReaL's -2/3 on sample 0's tokens (correct: -1/3).
    from rlconform.adapters.areal.step import AFTER_VALUE

    assert AFTER_VALUE == 1.0
    batch = _batch([2, 1], [[1, 1], [1]], [1.0, 0.0], ["g", "h"], [[0, 1]], critic=True)
    out = areal.train_step(batch, _config(areal, "ppo_critic"))
    assert out.stages["returns"][0, :2].tolist() == pytest.approx([2.0, 2.0])
    assert out.stages["returns"][1, 0].item() == pytest.approx(0.0)
    assert out.value_loss == pytest.approx(4 / 3, rel=1e-5)
    assert batch.vpreds.grad[0, :2].tolist() == pytest.approx([-2 / 3, -2 / 3], rel=1e-5)
    assert batch.vpreds.grad[1, 0].item() == pytest.approx(0.0, abs=1e-7)
    # the whitened advantages are scale-free here (mean 4/3, unbiased std 1.1547 over
    # [2, 2, 0] are those of [1, 1, 0] doubled): +-0.57735 / -1.15470 either way
    std = math.sqrt(4 / 3)
    assert out.stages["advantages"][0, :2].tolist() == pytest.approx(
        [(2 / 3) / (std + 1e-5)] * 2, rel=1e-5
    )


def test_ppo_critic_step_matches_the_contract_without_the_bootstrap(areal, monkeypatch):
    # The binding itself is right: with the critic's value after the last token at 0 (the
    # bootstrap then adds nothing), the step is the contract's: the same case gives
    # returns [1, 1] / [0], value loss 1/3, d/d vpred -1/3 on sample 0's tokens, and the
    # whitened advantages (1/3, 1/3, -2/3) / (unbiased std 0.57735 + 1e-5)
    monkeypatch.setattr("rlconform.adapters.areal.step.AFTER_VALUE", 0.0)
    batch = _batch([2, 1], [[1, 1], [1]], [1.0, 0.0], ["g", "h"], [[0, 1]], critic=True)
    out = areal.train_step(batch, _config(areal, "ppo_critic"))
    assert out.stages["returns"][0, :2].tolist() == pytest.approx([1.0, 1.0])
    assert out.value_loss == pytest.approx(1 / 3, rel=1e-5)
    assert batch.vpreds.grad[0, :2].tolist() == pytest.approx([-1 / 3, -1 / 3], rel=1e-5)
    std = math.sqrt(1 / 3)
    assert out.stages["advantages"][1, 0].item() == pytest.approx((-2 / 3) / (std + 1e-5), rel=1e-5)


def test_ppo_critic_step_passes_but_for_declared_breaks_without_the_bootstrap(areal, monkeypatch):
    """The critic binding on every generated case: with the critic's value after the last
    token at 0 (the bootstrap then adds nothing) and the entry declaring the bootstrap
    removed, step.update under ppo_critic fails nowhere but in the other declared breaks
    (a trailing tool token, the unclamped ratio, non-finite padding, empty batches)."""
    from rlconform.adapters.base import with_overrides
    from tests.conftest import certify_one

    monkeypatch.setattr("rlconform.adapters.areal.step.AFTER_VALUE", 0.0)
    configs = [_config(areal, "ppo_critic")]
    target = with_overrides(areal, trainer_configs=lambda self: configs)
    # the step.update entries of every config (the bootstrap's names ppo_critic; the
    # mask_no_eos one names a config that does not run here)
    target.deviations = {
        "step.update": [d for d in areal.deviations["step.update"] if not d.configs]
    }
    result = certify_one(target, "step.update", grading=False)
    assert result.status in ("pass", "deviation"), result.message
    # and with the bootstrap's AFTER_VALUE (the module's 1.0) the same run fails
    monkeypatch.setattr("rlconform.adapters.areal.step.AFTER_VALUE", 1.0)
    failed = certify_one(target, "step.update", grading=False)
    assert failed.status == "fail" and failed.check in ("advantages", "returns"), failed.message


def test_batch_without_a_loss_token_raises(areal):
    # declared (step.update / step.state runs, empty_batch): a correct step is a zero
    # update; AReaL asserts the all-reduced loss weight is positive
    batch = _batch([2], [[0, 0]], [1.0], ["g"], [[0]])
    with pytest.raises(AssertionError, match="total loss weight"):
        areal.train_step(batch, _config(areal, "default"))


STEP_PLANTS = {
    # each micro-batch's loss weighed alike instead of by its share of the loss tokens
    "engine weighting: local / total dropped": (
        "FSDPEngine",
        "_compute_logprobs_and_loss",
        "loss_scale = local_weight / total_loss_weight * loss_multiplier",
        "loss_scale = loss_multiplier",
    ),
    # the total weight counts only the first micro-batch
    "total loss weight: first micro-batch only": (
        None,
        "compute_total_loss_weight",
        "torch.stack([loss_weight_fn(mb) for mb in mb_list.mbs])",
        "torch.stack([loss_weight_fn(mb) for mb in mb_list.mbs[:1]])",
    ),
}


@pytest.mark.parametrize("plant", sorted(STEP_PLANTS))
def test_step_catches_engine_weighting_plants(areal, monkeypatch, plant):
    # two micro-batches with 2 and 1 loss tokens: the unbroken step is the token mean
    # -a / 3 (test_grpo_step_by_hand); dropping local / total sums the two micro-batch
    # means (-a + a = 0), the first-only total divides by 2 instead of 3
    owner, name, old, new = STEP_PLANTS[plant]
    if owner is None:
        import areal.engine.core.train_engine as core

        mutate(monkeypatch, core.__name__, None, name, old, new)
        monkeypatch.setattr(importlib.import_module(_ENGINE), name, getattr(core, name))
    else:
        mutate(monkeypatch, _ENGINE, owner, name, old, new)
    batch = _batch([2, 1], [[1, 1], [1]], [1.0, 0.0], ["g", "g"], [[0], [1]])
    out = areal.train_step(batch, _config(areal, "grpo"))
    a = 0.5 / (math.sqrt(0.5) + 1e-5)
    assert out.loss != pytest.approx(-a / 3, rel=1e-3)

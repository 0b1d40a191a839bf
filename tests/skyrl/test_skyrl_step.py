"""SkyRL's ``RayPPOTrainer`` in the training step (CONTRACT step): its configs read off
``SkyRLTrainConfig()``, the trainer's and the policy worker's own methods on the step path,
and each finding the shipped baseline declares for the step reproduced by hand on a minimal
batch, next to the oracle (which torchref matches under the same configs)."""

from __future__ import annotations

import math

import pytest

from tests.skyrl.conftest import needs_skyrl
from tests.step import by_hand as h

pytestmark = needs_skyrl


def _k3(d: float) -> float:
    """k3 at d = ref - logp."""
    return math.exp(d) - d - 1


def test_configs_are_read_off_skyrls_config(skyrl):
    configs = {c.name: c.resolved for c in skyrl.trainer_configs()}
    assert list(configs)[0] == "default"
    default = configs["default"]
    # SkyRLTrainConfig(): GRPO, the k3 KL loss at 0.001, token_mean, clip 0.2 both sides
    assert (default["estimator"], default["norm_adv_by_std"]) == ("grpo", True)
    assert (default["kl_loss"], default["kl_loss_estimator"]) == (True, "k3")
    assert default["kl_loss_coef"] == pytest.approx(0.001)
    assert default["loss_agg_mode"] == "token-mean" and default["clip_ratio_c"] is None
    assert configs["dr_grpo"]["loss_agg_mode"] == "seq-mean-token-sum-norm"
    assert configs["dr_grpo"]["norm_length"] == 16.0
    assert configs["dual_clip"]["clip_ratio_c"] == pytest.approx(3.0)
    # sapo: sapo_policy_loss at SkyRL's temperatures, with the sequence_mean it asks for
    assert (configs["sapo"]["policy_loss"], configs["sapo"]["loss_agg_mode"]) == (
        "sapo",
        "seq-mean-token-mean",
    )
    assert (configs["sapo"]["sapo_tau_pos"], configs["sapo"]["sapo_tau_neg"]) == (1.0, 1.05)


def test_every_config_matches_the_oracle_on_an_ordinary_batch(skyrl):
    """Equal lengths, every sample with action tokens, equal micro-batches."""
    case = h.case(
        [
            h.sample("s0", [1, 1], 0.0, delta=0.1),
            h.sample("s1", [1, 1], 1.0, delta=-0.05),
            h.sample("s2", [1, 1], 0.5, group="g1", ref=[-0.8, -1.1]),
            h.sample("s3", [1, 1], 0.0, group="g1", entropy=[0.5, 1.5]),
        ],
        [2, 2],
    )
    for config in skyrl.trainer_configs():
        output, batch, want = h.run(skyrl, config.name, case)
        assert output.loss == pytest.approx(want["loss"], rel=1e-5, abs=1e-6), config.name
        grads = batch.log_probs.grad
        for i, row in enumerate(want["grad_logp"]):
            assert grads[i, : len(row)].tolist() == pytest.approx(row, rel=1e-4, abs=1e-6)


def test_the_kl_loss_is_a_mean_of_each_samples_mean(skyrl):
    """Declared (step.update loss and gradient under default, any case): the worker's KL
    term is masked_mean(kl, loss_mask, dim=-1).mean() per micro-batch, weighted by its share
    of the rows. Equal scores (advantages 0), one micro-batch: s0 one token with
    ref - logp = 0.5, s1 three tokens with KL 0: SkyRL's loss is 0.001 k3(0.5) / 2, the
    contract's token mean 0.001 k3(0.5) / 4."""
    case = h.case([h.sample("s0", [1], 0.0, ref=[-0.5]), h.sample("s1", [1, 1, 1], 0.0)], [2])
    output, batch, want = h.run(skyrl, "default", case)
    assert output.loss == pytest.approx(0.001 * _k3(0.5) / 2, rel=1e-5)
    assert want["loss"] == pytest.approx(0.001 * _k3(0.5) / 4, rel=1e-9)
    assert batch.log_probs.grad[0, 0].item() == pytest.approx(2 * want["grad_logp"][0][0], rel=1e-5)


def test_the_entropy_term_is_a_token_mean_per_micro_batch(skyrl):
    """Declared (step.update loss and entropy_gradient under entropy_bonus, uneven_shards):
    masked_mean(entropy, loss_mask) over each micro-batch's tokens times its share of the
    rows. Micro-batches of 2 tokens and 1 token: the lone token's entropy gradient is
    -0.01 / 2 (the contract's token mean: -0.01 / 3)."""
    case = h.case(
        [h.sample("s0", [1, 1], 0.0, entropy=[1.0, 2.0]), h.sample("s1", [1], 0.0, entropy=[3.0])],
        [1, 1],
    )
    output, batch, want = h.run(skyrl, "entropy_bonus", case)
    assert batch.entropy.grad[1, 0].item() == pytest.approx(-0.01 / 2, rel=1e-5)
    assert batch.entropy.grad[0, 0].item() == pytest.approx(-0.01 / 4, rel=1e-5)
    assert want["grad_entropy"][1][0] == pytest.approx(-0.01 / 3, rel=1e-9)


@pytest.mark.parametrize("config_name", ["sequence_mean", "dr_grpo"])
def test_an_actionless_sample_counts_in_the_row_count(skyrl, config_name):
    """Declared (step.update loss and gradient under sequence_mean and dr_grpo,
    actionless_sample): apply_loss_reduction_to_advantages_minibatch divides by every row of
    the mini-batch. Scores 0, 1 and a third sample whose one token is a tool token: s0's
    gradient is 2/3 of the contract's."""
    case = h.case(
        [h.sample("s0", [1], 0.0), h.sample("s1", [1], 1.0), h.sample("s2", [0], 0.5)], [3]
    )
    output, batch, want = h.run(skyrl, config_name, case)
    got, expected = batch.log_probs.grad[0, 0].item(), want["grad_logp"][0][0]
    assert expected != 0.0
    assert got == pytest.approx(expected * 2 / 3, rel=1e-4)


def test_a_nan_log_prob_at_padding_makes_the_loss_nan_not_the_gradient(skyrl):
    """Declared (step.update loss, padding_nonfinite): reduce_loss multiplies by the mask,
    so the loss value is NaN; the gradient is the contract's (0 at padding)."""
    case = h.case([h.sample("s0", [1, 1], 0.0), h.sample("s1", [1], 1.0)], [2], pad=math.nan)
    output, batch, want = h.run(skyrl, "grpo_no_kl", case)
    assert math.isnan(output.loss)
    grads = batch.log_probs.grad
    assert grads[1, 1].item() == 0.0
    assert grads[0, :2].tolist() == pytest.approx(want["grad_logp"][0], rel=1e-5)


def test_a_batch_whose_groups_differ_in_size_is_inexpressible(skyrl):
    from rlconform.adapters.base import Inexpressible

    case = h.case(
        [
            h.sample("s0", [1], 0.0),
            h.sample("s1", [1], 1.0, group="g1"),
            h.sample("s2", [1], 0.0, group="g1"),
        ],
        [3],
    )
    with pytest.raises(Inexpressible, match="n_samples_per_prompt"):
        h.run(skyrl, "default", case)


@pytest.mark.parametrize("clause_id", ["step.update"])
@pytest.mark.parametrize("fixture", ["torchref", "oracle_target"])
def test_reference_targets_pass_under_skyrls_configs(clause_id, fixture, skyrl, request):
    """CONTRACT step: torchref and the oracle pass under SkyRL's configs (its findings are
    never the contract's own)."""
    h.reference_passes(request.getfixturevalue(fixture), skyrl.trainer_configs(), clause_id)


def test_reinforce_pp_whitens_over_tool_tokens_in_the_step(skyrl):
    """Declared (step.update advantages under reinforce_pp, mask_holes): the trainer's
    response_mask is 1 on tool tokens and masked_whiten counts them. Two zero-reward one-token
    samples and a [tool, action] sample rewarded 1 (the adv.reinforce_pp by-hand case): the
    zero samples' advantage is -0.866, the contract's -0.577 (whitening over the 3 action
    tokens' returns 0, 0, 1)."""
    case = h.case(
        [h.sample("s0", [1], 0.0), h.sample("s1", [1], 0.0), h.sample("s2", [0, 1], 1.0)], [3]
    )
    output, _, want = h.run(skyrl, "reinforce_pp", case)
    assert output.stages["advantages"][0, 0].item() == pytest.approx(-0.866, abs=1e-3)
    assert want["advantages"][0][0] == pytest.approx(-0.577, abs=1e-3)


def test_ppo_critic_config_is_gae_with_skyrls_critic(skyrl):
    cfg = {c.name: c.resolved for c in skyrl.trainer_configs()}["ppo_critic"]
    # advantage_estimator gae at gamma = lambda = 1 (SkyRLTrainConfig's), value_clip 0.2,
    # ppo_critic_loss's 0.5 and its mean over sequences whatever loss_reduction says
    assert (cfg["estimator"], cfg["critic"], cfg["whiten_advantages"]) == ("gae", True, True)
    assert (cfg["gamma"], cfg["lam"], cfg["cliprange_value"]) == (1.0, 1.0, 0.2)
    assert (cfg["loss_agg_mode"], cfg["critic_loss_agg_mode"]) == (
        "token-mean",
        "seq-mean-token-mean",
    )
    assert cfg["value_loss_scale"] == 0.5


def test_the_critic_loss_is_a_mean_over_sequences(skyrl):
    """ppo_critic's critic_loss_agg_mode: one micro-batch, s0 one token rewarded 1, s1 three
    tokens rewarded 0 (other group), values and current values 0 (inside the clip band):
    the returns are [1] and [0, 0, 0], and ppo_critic_loss is 0.5 x the mean over the two
    sequences of their token means of (v - R)^2 = 0.5 (1 + 0) / 2 = 0.25 (the actor's
    token mean would give 0.5 x 1 / 4 = 0.125); d/dv at s0's token 0.5 x 2 (0 - 1) / 2."""
    case = h.case([h.sample("s0", [1], 1.0), h.sample("s1", [1, 1, 1], 0.0, group="g1")], [2])
    output, batch, want = h.run(skyrl, "ppo_critic", case)
    assert output.value_loss == pytest.approx(0.25, rel=1e-6)
    assert want["value_loss"] == pytest.approx(0.25, rel=1e-9)
    assert batch.vpreds.grad[0, 0].item() == pytest.approx(-0.5, rel=1e-6)
    assert batch.vpreds.grad[1, :3].tolist() == [0.0, 0.0, 0.0]


def test_the_critic_averages_micro_batches_alike(skyrl):
    """Declared (step.update value loss and gradient under ppo_critic, uneven_shards):
    CriticWorkerBase.optim_step scales the gradient by 1 / micro-batches. Three one-token
    samples of one group rewarded 1, 0, 0 in micro-batches [s0, s1], [s2] (the last one
    shorter): SkyRL's loss is the mean of 0.5 (1 + 0) / 2 and 0, = 0.125, and d/dv at s0 is
    0.5 x 2 (0 - 1) / 2 / 2 = -0.25; the mean over the three sequences is 0.5 / 3 = 0.1667
    with d/dv -1/3."""
    case = h.case(
        [h.sample("s0", [1], 1.0), h.sample("s1", [1], 0.0), h.sample("s2", [1], 0.0)], [2, 1]
    )
    output, batch, want = h.run(skyrl, "ppo_critic", case)
    assert output.value_loss == pytest.approx(0.125, rel=1e-6)
    assert batch.vpreds.grad[0, 0].item() == pytest.approx(-0.25, rel=1e-6)
    assert want["value_loss"] == pytest.approx(0.5 / 3, rel=1e-9)
    assert want["grad_vpreds"][0][0] == pytest.approx(-1 / 3, rel=1e-9)

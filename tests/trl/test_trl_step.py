"""TRL's training step (CONTRACT step) through GRPOTrainer's real code: the configs read off
GRPOConfig, and each finding the shipped baseline declares for the step reproduced by hand
on a minimal batch, next to the oracle (which torchref matches under TRL's configs too)."""

from __future__ import annotations

import math

import pytest

from tests.step import by_hand as h
from tests.trl.conftest import real_trl_skip_reason

pytestmark = pytest.mark.skipif(
    real_trl_skip_reason() is not None, reason=str(real_trl_skip_reason())
)


def _sample(uid, mask, reward, group="g0", **rows):
    return h.sample(uid, mask, reward, group, **rows)


_case = h.case


@pytest.fixture()
def trl(real_target):
    return real_target


def _config(target, name):
    return h.config_named(target, name)


_run = h.run


def test_default_config_is_grpo_configs_defaults(trl):
    from trl import GRPOConfig

    defaults = GRPOConfig(output_dir="unused", report_to=[], use_cpu=True)
    settings = _config(trl, "default").resolved
    assert defaults.loss_type == "dapo" and settings["loss_agg_mode"] == "token-mean"
    assert settings["kl_loss"] is (defaults.beta != 0.0)
    assert settings["clip_low"] == defaults.epsilon
    assert settings["on_policy"] is True  # num_iterations 1: old log-probs = current, detached
    assert _config(trl, "two_iterations").resolved["on_policy"] is False


def test_bnpo_divides_each_micro_batch_by_its_own_tokens(trl):
    """Declared (step.update loss under bnpo, uneven_shards). Scores 0, 0, 1 in one group:
    A = -1/sqrt(3), -1/sqrt(3), 2/sqrt(3) (ddof 1); at ratio 1 the per-token loss is -A.
    With lengths 2, 1, 1 and one sample per micro-batch, bnpo sums each micro-batch's own
    token mean over three accumulation steps: (a + a - 2a) / 3 = 0; the step's token mean
    is (2a + a - 2a) / 4 = a / 4 with a = 1/sqrt(3)."""
    case = _case(
        [_sample("s0", [1, 1], 0.0), _sample("s1", [1], 0.0), _sample("s2", [1], 1.0)], [1, 1, 1]
    )
    output, _, want = _run(trl, "bnpo", case)
    a = 1 / 3**0.5
    assert output.loss == pytest.approx(0.0, abs=1e-6)
    assert want["loss"] == pytest.approx(a / 4, rel=1e-3)  # std + 1e-4


def test_entropy_bonus_is_a_mean_per_micro_batch(trl):
    """Declared (step.update entropy_gradient under entropy_bonus, uneven_shards): the bonus
    is -coef * (each micro-batch's mean entropy) / accumulation steps, so the 2-token
    micro-batch's tokens get -0.01 / (2 * 3) each, where the step's token mean (four action
    tokens) gives -0.01 / 4."""
    case = _case(
        [_sample("s0", [1, 1], 0.0), _sample("s1", [1], 0.0), _sample("s2", [1], 1.0)], [1, 1, 1]
    )
    _, batch, want = _run(trl, "entropy_bonus", case)
    assert batch.entropy.grad[0, 0].item() == pytest.approx(-0.01 / 6, rel=1e-5)
    assert want["grad_entropy"][0][0] == pytest.approx(-0.01 / 4)


def test_logged_policy_loss_is_divided_by_the_accumulation_steps(trl):
    """Declared (step.metrics policy_loss under entropy_bonus): each micro-batch's
    loss.detach() is its share of the step's token mean; GRPOTrainer.log averages the two
    shares, logging half the step's policy loss."""
    case = _case([_sample("s0", [1, 1], 0.0), _sample("s1", [1], 1.0)], [1, 1])
    output, _, want = _run(trl, "entropy_bonus", case)
    assert output.metrics["policy_loss"] == pytest.approx(
        want["metrics"]["policy_loss"] / 2, rel=1e-5
    )


def test_logged_entropy_is_a_mean_of_micro_batch_means(trl):
    """Declared (step.metrics entropy/mean, uneven_shards): entropies 1, 0 | 0 log
    (0.5 + 0) / 2 = 0.25; the step's action tokens have mean 1/3."""
    case = _case([_sample("s0", [1, 1], 0.0, entropy=[1.0, 0.0]), _sample("s1", [1], 1.0)], [1, 1])
    output, _, want = _run(trl, "default", case)
    assert output.metrics["entropy"] == pytest.approx(0.25)
    assert want["metrics"]["entropy/mean"] == pytest.approx(1 / 3)


def test_grpo_counts_a_completion_without_an_action_token(trl):
    """Declared (step.update loss under grpo_kl, actionless_sample): loss_type grpo takes
    .mean() over every row, so one actionless completion of three scales the loss by 2/3."""
    samples = [_sample("s0", [1], 0.0), _sample("s1", [1], 1.0), _sample("s2", [0], 0.0)]
    output, _, want = _run(trl, "grpo_kl", _case(samples, [3]))
    assert want["loss"] != 0.0
    assert output.loss == pytest.approx(want["loss"] * 2 / 3, rel=1e-5)


def test_trl_configs_all_run_on_an_ordinary_batch(trl):
    """Every declared config runs and matches the oracle on a batch without the declared
    features (equal token counts per micro-batch, every sample with an action token)."""
    case = _case(
        [
            _sample("s0", [1, 1], 0.0),
            _sample("s1", [1, 1], 1.0),
            _sample("s2", [1, 0], 0.5, group="g1"),
            _sample("s3", [1, 0], 0.0, group="g1"),
        ],
        [2, 2],
    )
    for config in trl.trainer_configs():
        output, _, want = _run(trl, config.name, case)
        assert output.loss == pytest.approx(want["loss"], rel=1e-5, abs=1e-6), config.name


@pytest.mark.parametrize("clause_id", ["step.update", "step.metrics"])
@pytest.mark.parametrize("fixture", ["torchref", "oracle_target"])
def test_reference_targets_pass_under_trls_configs(clause_id, fixture, trl, request):
    """CONTRACT step: torchref and the oracle pass under TRL's configs (a TRL finding is
    never the contract's own)."""
    h.reference_passes(request.getfixturevalue(fixture), trl.trainer_configs(), clause_id)


def test_stale_old_log_probs_are_not_clamped(trl):
    """Declared (step.update loss under two_iterations, extreme_log_ratio): with
    num_iterations 2 the rollout's old log-probs are kept; s0 has old -23, logp -1
    (log-ratio 22) and A = -1/sqrt(2). TRL's token mean is |A| e^22 / 2 = 1.27e9 (no clamp);
    the contract's ratio is capped at exp(20): |A| e^20 / 2 = 1.7e8."""
    samples = [_sample("s0", [1], 0.0, old=[-23.0]), _sample("s1", [1], 1.0)]
    output, _, want = _run(trl, "two_iterations", _case(samples, [2]))
    a = 1 / 2**0.5
    assert output.loss == pytest.approx(a * math.exp(22.0) / 2, rel=1e-3)
    assert want["loss"] == pytest.approx(a * math.exp(20.0) / 2, rel=1e-3)

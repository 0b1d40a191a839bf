"""OpenRLHF's training step (CONTRACT step) through its trainer's real code: configs read
off train_ppo_ray's parser, and each finding the shipped baseline declares for the step
reproduced by hand on a minimal batch, next to the oracle (which torchref matches under
OpenRLHF's configs too)."""

from __future__ import annotations

import importlib.util
import math

import pytest

from rlconform.conformance.clauses import step as step_clauses
from tests.step import by_hand as h


def _installed() -> bool:
    try:
        return importlib.util.find_spec("openrlhf") is not None
    except (ImportError, ValueError):
        return False


pytestmark = pytest.mark.skipif(not _installed(), reason="OpenRLHF is not installed")


@pytest.fixture(scope="module")
def orl():
    from rlconform.adapters.registry import load_target

    target = load_target("openrlhf")
    if target.runtime.release.name != "0.11.2":
        pytest.skip(f"the pinned findings are those of 0.11.2, not {target.version}")
    return target


def _sample(uid, mask, reward, group="g0", **rows):
    return h.sample(uid, mask, reward, group, **rows)


_case = h.case
_config = h.config_named


def _run(target, name, case, state=None):
    if state is None:
        return h.run(target, name, case)
    config = _config(target, name)
    batch = step_clauses.build_batch(h.Layout, case, config.resolved["critic"])
    return target.train_step(batch, config, state), batch, None


def test_default_config_is_the_parsers_defaults(orl):
    settings = _config(orl, "default").resolved
    assert settings["estimator"] == "gae" and settings["critic"] is True
    assert settings["kl_in_reward"] is True and settings["kl_in_reward_estimator"] == "k1"
    assert settings["kl_coef"] == 0.01 and settings["kl_ctrl"] == "fixed"
    assert settings["loss_agg_mode"] == "token-mean" and settings["cliprange_value"] == 0.5


def test_a_sample_without_an_action_token_turns_the_adaptive_kl_coefficient_nan(orl):
    """Declared (step.state kl_coef, actionless_sample): info['kl'] = masked_mean(kl, mask,
    dim=-1) is 0/0 for the actionless sample, status['kl'] is NaN, and
    AdaptiveKLController.update makes the coefficient NaN for every later step."""
    case = _case([_sample("s0", [1], 0.0, ref=[-1.5]), _sample("s1", [0], 1.0)], [1, 1])
    output, _, want = _run(orl, "reinforce_adaptive_kl", case)
    assert math.isnan(output.state["kl_coef"])
    assert math.isfinite(want["state"]["kl_coef"])
    nxt, _, _ = _run(
        orl, "reinforce_adaptive_kl", _case([_sample("s0", [1], 1.0)], [1]), output.carry
    )
    assert math.isnan(nxt.state["kl_coef"])  # and it stays NaN


def test_logged_policy_loss_is_biased_by_uneven_micro_batches(orl):
    """Declared (step.metrics policy_loss, uneven_shards): each micro-batch logs its share of
    the step's token mean times gas; ppo_train's token-weighted mean of the shares is the
    step's loss only when the micro-batches hold equal token counts."""
    samples = [_sample("s0", [1], 0.0), _sample("s1", [1, 1], 0.0), _sample("s2", [1], 1.0)]
    output, _, _ = _run(orl, "default", _case(samples, [1, 1, 1]))
    adv = output.stages["advantages"]
    # ratio 1: the per-token loss is -A; micro-batch sums ls_k over n_k = 1, 2, 1 tokens, N = 4
    ls = [-adv[0, 0].item(), -(adv[1, 0] + adv[1, 1]).item(), -adv[2, 0].item()]
    n = [1, 2, 1]
    step_loss = sum(ls) / 4
    logged = sum(3 * lk / 4 * nk for lk, nk in zip(ls, n)) / 4
    assert output.loss == pytest.approx(step_loss, abs=1e-6)  # what is back-propagated
    assert output.metrics["policy_loss"] == pytest.approx(logged, abs=1e-6)
    assert abs(logged - step_loss) > 0.05


def test_entropy_bonus_is_a_token_mean_under_seq_mean(orl):
    """Declared (step.update entropy_gradient under rloo_entropy_seq_mean): aggregate_loss's
    default token_level_loss=True weighs every token 1/N; seq-mean-token-mean weighs a token
    of a 2-token sequence 1/(S * 2)."""
    samples = [_sample("s0", [1], 0.0), _sample("s1", [1, 1], 0.0), _sample("s2", [1], 1.0)]
    _, batch, want = _run(orl, "rloo_entropy_seq_mean", _case(samples, [3]))
    assert batch.entropy.grad[1, 0].item() == pytest.approx(-0.01 / 4, rel=1e-5)
    assert want["grad_entropy"][1][0] == pytest.approx(-0.01 / 6)


def test_gae_whitens_with_the_population_variance(orl):
    """Declared (step.update advantages under default): two one-token samples, scores 0 and 1,
    values 0: whitened advantages -1, 1 (population variance); the contract's -0.707, 0.707."""
    case = _case([_sample("s0", [1], 0.0), _sample("s1", [1], 1.0)], [1, 1])
    output, _, want = _run(orl, "default", case)
    assert output.stages["advantages"][0, 0].item() == pytest.approx(-1.0, abs=1e-3)
    assert want["advantages"][0][0] == pytest.approx(-1 / math.sqrt(2), abs=1e-3)


def test_group_baseline_counts_the_reward_of_an_actionless_sample(orl):
    """Declared (step.update advantages, actionless_sample): group_norm puts the reward 1 of
    a sample without an action token into its group's mean and std; the contract places it
    nowhere, so its group mate's advantage is 0, not -0.707."""
    samples = [_sample("s0", [1], 0.0), _sample("s1", [0], 1.0)]
    output, _, want = _run(orl, "group_norm_kl_loss", _case(samples, [1, 1]))
    assert output.stages["advantages"][0, 0].item() == pytest.approx(-1 / math.sqrt(2), abs=1e-4)
    assert want["advantages"][0][0] == pytest.approx(0.0, abs=1e-6)


@pytest.mark.parametrize("clause_id", ["step.update", "step.metrics", "step.state"])
@pytest.mark.parametrize("fixture", ["torchref", "oracle_target"])
def test_reference_targets_pass_under_openrlhfs_configs(clause_id, fixture, orl, request):
    """CONTRACT step: torchref and the oracle pass under OpenRLHF's configs."""
    h.reference_passes(request.getfixturevalue(fixture), orl.trainer_configs(), clause_id)

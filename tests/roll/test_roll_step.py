"""ROLL's training step (CONTRACT step) through the RLVR pipeline's real functions: run when
RLCONFORM_ROLL_PATH names a checkout (github.com/alibaba/ROLL). Each finding the shipped
baseline declares for the step is reproduced by hand on a minimal batch, next to the
oracle (which torchref matches under ROLL's configs too)."""

from __future__ import annotations

import os

import pytest

from tests.step import by_hand as h

ROLL_PATH = os.environ.get("RLCONFORM_ROLL_PATH")
pytestmark = pytest.mark.skipif(
    not ROLL_PATH, reason="RLCONFORM_ROLL_PATH is not set (a github.com/alibaba/ROLL checkout)"
)


@pytest.fixture(scope="module")
def roll():
    from rlconform.adapters.registry import load_target

    return load_target("roll", framework_path=ROLL_PATH)


_sample = h.sample
_run = h.run
_case = h.case


def test_default_config_follows_post_init(roll):
    settings = {c.name: c for c in roll.trainer_configs()}["default"].resolved
    # init_kl_coef 0.2 > 0: enable_reference and the old-log-prob recompute are on
    assert settings["on_policy"] is False
    assert settings["estimator"] == "gae" and settings["whiten_advantages"] is False
    assert settings["cliprange_value"] is None and settings["lam"] == 0.95


def test_critic_loss_is_summed_over_micro_batches(roll):
    """Declared (step.update value_loss under default): two one-token samples in two
    micro-batches; each micro-batch loss (its own sequence mean) is scaled by loss_scale 2
    and divided by 2 steps, so the step back-propagates 0 + 0.5 = 0.5; the contract's
    seq-mean-token-mean value loss is 0.25."""
    case = _case([_sample("s0", [1], 0.0), _sample("s1", [1], 1.0)], [1, 1])
    output, batch, want = _run(roll, "default", case)
    assert output.value_loss == pytest.approx(0.5, abs=1e-6)
    assert want["value_loss"] == pytest.approx(0.25)
    assert batch.vpreds.grad[1, 0].item() == pytest.approx(-1.0, abs=1e-6)  # contract -0.5


def test_gae_reads_the_critic_value_at_padding(roll):
    """Declared (step.update advantages, padding_finite): V = 7.5 at the padding column
    after a one-token response enters ROLL's GAE recursion (lambda 0.95)."""
    case = _case([_sample("s0", [1], 0.0), _sample("s1", [1, 1], 0.0)], [1, 1], pad=7.5)
    output, _, want = _run(roll, "default", case)
    assert output.stages["advantages"][0, 0].item() == pytest.approx(0.375, abs=1e-5)
    assert want["advantages"][0][0] == pytest.approx(0.0)


@pytest.mark.parametrize("clause_id", ["step.update", "step.metrics", "step.state"])
@pytest.mark.parametrize("fixture", ["torchref", "oracle_target"])
def test_reference_targets_pass_under_rolls_configs(clause_id, fixture, roll, request):
    h.reference_passes(request.getfixturevalue(fixture), roll.trainer_configs(), clause_id)

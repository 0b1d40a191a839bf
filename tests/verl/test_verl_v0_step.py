"""verl 0.7's training step (CONTRACT step) through RayPPOTrainer.fit with the legacy FSDP
workers: each finding the 0.7.1 baseline declares for the step reproduced by hand through
DataParallelPPOActor.update_policy, next to the oracle (which torchref matches under these
configs too)."""

from __future__ import annotations

import pytest

pytest.importorskip("verl")

from rlconform.adapters.registry import load_target  # noqa: E402
from tests.step import by_hand as h  # noqa: E402

V07 = load_target("verl").release.line == "0.7"
pytestmark = pytest.mark.skipif(not V07, reason="the legacy-worker step is bound on 0.7.x")


@pytest.fixture(scope="module")
def verl():
    return load_target("verl")


_sample = h.sample
_run = h.run


def test_default_is_the_shipped_file_with_a_critic(verl):
    settings = {c.name: c for c in verl.trainer_configs()}["default"].resolved
    assert settings["estimator"] == "gae" and settings["critic"] is True
    assert settings["on_policy"] is False  # a multi-mini-batch update keeps the old log-probs


def test_token_mean_is_per_micro_batch(verl):
    """Declared (step.update loss, uneven_shards): two samples of 1 and 2 tokens in two
    micro-batches, grpo_kl_loss (group mean 0.5, std 0.707: advantages -0.707 | 0.707, 0.707);
    at ratio 1 the legacy actor divides each micro-batch by its own tokens and by 2:
    (0.707 - 0.707) / 2 = 0, where the step's token mean is (0.707 - 2 * 0.707) / 3."""
    case = {
        "samples": [_sample("s0", [1], 0.0), _sample("s1", [1, 1], 1.0)],
        "shards": [1, 1],
        "pad_value": 0.0,
        "extra_pad": 0,
    }
    output, _, want = _run(verl, "grpo_kl_loss", case)
    assert output.loss == pytest.approx(0.0, abs=1e-5)
    assert want["loss"] == pytest.approx(-0.7071 / 3, rel=1e-3)


@pytest.mark.parametrize("clause_id", ["step.update", "step.metrics", "step.state"])
@pytest.mark.parametrize("fixture", ["torchref", "oracle_target"])
def test_reference_targets_pass_under_the_0_7_configs(clause_id, fixture, verl, request):
    h.reference_passes(request.getfixturevalue(fixture), verl.trainer_configs(), clause_id)

"""verl 0.8's training step (CONTRACT step) through RayPPOTrainer.fit with the engine workers:
each update finding the 0.8.0 baseline declares for the step reproduced by hand through the
engine's micro-batch loop over ``losses.value_loss`` / ``losses.ppo_loss``, next to the oracle
(which torchref matches under these configs too)."""

from __future__ import annotations

import pytest

pytest.importorskip("verl")

from rlconform.adapters.registry import load_target  # noqa: E402
from tests.step import by_hand as h  # noqa: E402

V08 = load_target("verl").release.line == "0.8"
pytestmark = pytest.mark.skipif(not V08, reason="the engine-worker step is bound on 0.8.x")


@pytest.fixture(scope="module")
def verl():
    return load_target("verl")


def _two_one_token_samples(shards: list[int]) -> dict:
    return h.case([h.sample("s0", [1], 0.0), h.sample("s1", [1], 1.0)], shards)


def test_default_is_the_shipped_file_with_a_critic(verl):
    settings = h.config_named(verl, "default").resolved
    assert settings["estimator"] == "gae" and settings["critic"] is True


def test_the_critic_loss_is_summed_over_micro_batches(verl):
    """Declared (step.update value_loss / value_gradient): returns 0 | 1 (GAE, gamma = lam = 1,
    values 0) in two one-token micro-batches. The step's critic loss is the token mean of
    0.5 * (v - R)^2 = (0 + 0.5) / 2 = 0.25, gradient (v - R) / 2 = -0.5 at the second token;
    0.8's value_loss takes each micro-batch's own mean and the engine adds them: 0.5 and -1."""
    output, batch, want = h.run(verl, "default", _two_one_token_samples([1, 1]))
    assert want["value_loss"] == pytest.approx(0.25)
    assert output.value_loss == pytest.approx(0.5, rel=1e-5)
    assert float(batch.vpreds.grad[1, 0]) == pytest.approx(-1.0, rel=1e-5)


def test_the_critic_loss_is_right_in_one_micro_batch(verl):
    """The same batch as one micro-batch: verl 0.8 and the contract agree, so the finding is
    the per-micro-batch sum, not the loss itself."""
    output, batch, want = h.run(verl, "default", _two_one_token_samples([2]))
    assert output.value_loss == pytest.approx(want["value_loss"], rel=1e-5)
    assert float(batch.vpreds.grad[1, 0]) == pytest.approx(-0.5, rel=1e-5)


def test_the_policy_gradient_is_zero_off_actions(verl):
    """The engine's ppo_loss masks the tool token: no gradient reaches it (step.update
    gradient_off_actions), under the token-mean default."""
    the_case = h.case([h.sample("s0", [1, 0, 1], 1.0), h.sample("s1", [1, 1], 0.0)], [1, 1])
    output, batch, _ = h.run(verl, "grpo_kl_loss", the_case)
    assert batch.log_probs.grad is not None
    assert float(batch.log_probs.grad[0, 1]) == 0.0
    assert float(batch.log_probs.grad[0, 0]) != 0.0


@pytest.mark.parametrize("clause_id", ["step.update", "step.metrics", "step.state"])
@pytest.mark.parametrize("fixture", ["torchref", "oracle_target"])
def test_reference_targets_pass_under_the_0_8_configs(clause_id, fixture, verl, request):
    h.reference_passes(request.getfixturevalue(fixture), verl.trainer_configs(), clause_id)

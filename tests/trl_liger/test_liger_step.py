"""TRL's Liger branch in the training step (CONTRACT step): its configs, and each finding
the shipped baseline declares for the step reproduced by hand on a minimal batch, next to
the oracle (which torchref matches under the same configs)."""

from __future__ import annotations

import pytest

from tests.step import by_hand as h
from tests.trl_liger.conftest import needs_liger

pytestmark = needs_liger


def test_configs_are_plain_trls_on_the_liger_branch(liger):
    names = [c.name for c in liger.trainer_configs()]
    assert names == ["default", "grpo_kl", "bnpo", "dr_grpo", "two_iterations", "sapo", "luspo"]
    args = liger.fused.config()
    assert args.use_liger_kernel is True and args.loss_type == "dapo"


def test_every_config_matches_the_oracle_on_an_ordinary_batch(liger):
    """Equal token counts per micro-batch, every sample with an action token, every sample
    as long as the batch is wide (luspo's finding needs a shorter one)."""
    case = h.case(
        [
            h.sample("s0", [1, 1], 0.0),
            h.sample("s1", [1, 1], 1.0, delta=0.05),
            h.sample("s2", [1, 1], 0.5, group="g1"),
            h.sample("s3", [1, 1], 0.0, group="g1"),
        ],
        [2, 2],
    )
    for config in liger.trainer_configs():
        output, batch, want = h.run(liger, config.name, case)
        assert output.loss == pytest.approx(want["loss"], rel=1e-5, abs=1e-6), config.name


def test_luspo_weights_every_column_by_the_completion_length(liger):
    """Declared (step.update gradient, gradient_off_actions under luspo): Liger's luspo sums
    per_token_loss * L_i over every column, masked or not, and divides by B * T. Two
    completions (lengths 1 and 2, one group, scores 0 and 1: A = -/+ 1/sqrt(2)) in one
    micro-batch 2 columns wide, on-policy (ratio 1): the gradient is -A_i L_i / (B T) at
    every column, padding included; the contract's (the plain path's) is -A_i / B at the
    action tokens and 0 at padding. Padding holds -1, a log-prob as a model gives there
    (the binding gives junk that is no log-prob no gradient path)."""
    case = h.case([h.sample("s0", [1], 0.0), h.sample("s1", [1, 1], 1.0)], [2], pad=-1.0)
    output, batch, want = h.run(liger, "luspo", case)
    a = 1 / 2**0.5
    grad = batch.log_probs.grad
    assert grad[0, 0].item() == pytest.approx(a * 1 / 4, rel=1e-3)  # std + 1e-4
    assert grad[0, 1].item() == pytest.approx(a * 1 / 4, rel=1e-3)  # padding: not 0
    assert grad[1, 0].item() == pytest.approx(-a * 2 / 4, rel=1e-3)
    assert want["grad_logp"][0] == pytest.approx([a / 2], rel=1e-3)
    assert want["grad_logp"][1] == pytest.approx([-a / 2, -a / 2], rel=1e-3)


def test_bnpo_divides_each_micro_batch_by_its_own_tokens(liger):
    """Declared (step.update loss under bnpo, uneven_shards), as on the plain path: Liger's
    bnpo divides by the micro-batch's own mask sum. Scores 0, 0, 1, lengths 2, 1, 1, one
    sample per micro-batch: (a + a - 2a) / 3 = 0 where the step's token mean is a / 4."""
    case = h.case(
        [h.sample("s0", [1, 1], 0.0), h.sample("s1", [1], 0.0), h.sample("s2", [1], 1.0)],
        [1, 1, 1],
    )
    output, _, want = h.run(liger, "bnpo", case)
    assert output.loss == pytest.approx(0.0, abs=1e-6)
    assert want["loss"] == pytest.approx(1 / 3**0.5 / 4, rel=1e-3)


@pytest.mark.parametrize("clause_id", ["step.update", "step.metrics"])
@pytest.mark.parametrize("fixture", ["torchref", "oracle_target"])
def test_reference_targets_pass_under_the_liger_configs(clause_id, fixture, liger, request):
    """CONTRACT step: torchref and the oracle pass under the Liger branch's configs (its
    findings are never the contract's own)."""
    h.reference_passes(request.getfixturevalue(fixture), liger.trainer_configs(), clause_id)

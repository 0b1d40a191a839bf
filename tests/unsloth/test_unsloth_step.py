"""Unsloth's GRPO trainer in the training step (CONTRACT step): its configs as
``UnslothGRPOConfig`` resolves them, the generated ``compute_loss`` built from the installed
unsloth's source, and each finding the shipped baseline declares for the step reproduced by
hand on a minimal batch, next to the oracle (which torchref matches under the same configs)."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest
import torch

from tests.step import by_hand as h
from tests.unsloth.conftest import needs_unsloth

pytestmark = needs_unsloth


def _k3(d: float) -> float:
    """k3 at d = ref - logp."""
    return math.exp(d) - d - 1


def test_configs_are_resolved_as_unsloth_resolves_them(unsloth):
    configs = {c.name: c.resolved for c in unsloth.trainer_configs()}
    assert list(configs) == [
        "default",
        "grpo_kl",
        "bnpo",
        "dr_grpo",
        "dapo",
        "two_iterations",
        "sapo",
        "row_mini_batches",
    ]
    assert configs["default"]["loss_agg_mode"] == "token-mean"
    assert configs["default"]["kl_loss"] is False and configs["default"]["clip_high"] == 0.2
    # loss_type bnpo alone: Unsloth's beta 0.001 turns a KL term on (TRL's default is 0)
    assert configs["bnpo"]["kl_loss"] is True and configs["bnpo"]["kl_loss_coef"] == 0.001
    # dr_grpo with TRL's scale_rewards "group": overridden to no scaling
    assert configs["dr_grpo"]["norm_adv_by_std"] is False
    # dapo set explicitly: epsilon_high 0.28 (and truncated completions masked)
    assert configs["dapo"]["clip_high"] == pytest.approx(0.28)
    assert unsloth._step_config(loss_type="dapo").mask_truncated_completions is True
    assert configs["two_iterations"]["on_policy"] is False
    # sapo: its gate with TRL's temperatures, grpo's normaliser, Unsloth's KL term (beta 0.001)
    assert configs["sapo"]["policy_loss"] == "sapo"
    assert (configs["sapo"]["sapo_tau_pos"], configs["sapo"]["sapo_tau_neg"]) == (1.0, 1.05)
    assert configs["sapo"]["loss_agg_mode"] == "seq-mean-token-mean"
    assert configs["sapo"]["kl_loss"] is True


def test_config_sources_name_the_trl_release(unsloth):
    """The GRPOConfig is TRL's: its source names TRL's version, not unsloth-zoo's."""
    for config in unsloth.trainer_configs():
        assert config.source.startswith(f"trl {unsloth.runtime.version} GRPOConfig("), config
        assert unsloth.version not in config.source


def test_the_step_runs_unsloths_generated_compute_loss(unsloth):
    from rlconform.adapters.unsloth import compute_loss

    fn = compute_loss.build(unsloth.zoo)
    assert fn.__code__.co_filename.endswith("rl_replacements.py: compute_loss>")
    assert fn.__globals__["grpo_accumulated_loss"] is unsloth.zoo.grpo_accumulated_loss
    with pytest.raises(Exception, match="grpo_compute_loss_slow"):
        fn.__globals__["grpo_compute_loss_slow"]()


def test_a_step_never_imports_the_unsloth_package():
    """``import unsloth`` patches TRL and transformers process-wide; unsloth-zoo's loss
    imports it (PrefixGrouper) unless the runtime turns that off."""
    script = (
        "import sys; sys.path.insert(0, '.')\n"
        "from tests.step import by_hand as h\n"
        "from rlconform.adapters.unsloth import load\n"
        "case = h.case([h.sample('s0', [1, 1], 0.0), h.sample('s1', [1], 1.0)], [2])\n"
        "h.run(load(), 'default', case)\n"
        "print('unsloth' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "False"


def test_every_config_matches_the_oracle_on_an_ordinary_batch(unsloth):
    """Equal token counts per micro-batch, every completion as long as the batch is wide."""
    case = h.case(
        [
            h.sample("s0", [1, 1], 0.0),
            h.sample("s1", [1, 1], 1.0, delta=0.05),
            h.sample("s2", [1, 1], 0.5, group="g1", ref=[-0.8, -1.1]),
            h.sample("s3", [1, 1], 0.0, group="g1"),
        ],
        [2, 2],
    )
    for config in unsloth.trainer_configs():
        output, batch, want = h.run(unsloth, config.name, case)
        assert output.loss == pytest.approx(want["loss"], rel=1e-5, abs=1e-6), config.name
        grads = batch.log_probs.grad
        for i, row in enumerate(want["grad_logp"]):
            assert grads[i, : len(row)].tolist() == pytest.approx(row, rel=1e-4, abs=1e-6)


def test_row_mini_batches_run_the_forward_one_row_at_a_time(unsloth, monkeypatch):
    """row_mini_batches (unsloth_grpo_mini_batch 64 mini-batches, capped at the rows: one
    row each; unsloth_logit_chunk_multiplier 2): grpo_accumulated_loss calls the model once
    per row, and the step is the default config's (the chunking is memory only)."""
    from rlconform.adapters.unsloth import accumulated

    rows: list[int] = []
    forward = accumulated.HiddenStatesModel.forward

    def spy(self, input_ids, *args, **kwargs):
        rows.append(int(input_ids.shape[0]))
        return forward(self, input_ids, *args, **kwargs)

    monkeypatch.setattr(accumulated.HiddenStatesModel, "forward", spy)
    case = h.case(
        [
            h.sample("s0", [1, 1, 1], 1.0, delta=0.1),
            h.sample("s1", [1, 1], 0.0, delta=-0.2),
            h.sample("s2", [1], 0.5),
            h.sample("s3", [1, 1], 0.2),
        ],
        [2, 2],
    )
    chunked, batch, want = h.run(unsloth, "row_mini_batches", case)
    assert rows and set(rows) == {1}
    rows.clear()
    plain, plain_batch, _ = h.run(unsloth, "default", case)
    assert max(rows) == 2  # the default sizes the mini-batch to the micro-batch
    assert chunked.loss == pytest.approx(plain.loss, rel=1e-6)
    assert chunked.loss == pytest.approx(want["loss"], rel=1e-5)
    assert torch.allclose(batch.log_probs.grad, plain_batch.log_probs.grad, rtol=1e-6)


def test_bnpo_divides_each_micro_batch_by_its_own_tokens(unsloth):
    """Declared (step.update loss under bnpo, uneven_shards): grpo_compute_loss's bnpo
    divides by the micro-batch's own mask sum. Scores 0, 0, 1 (A = -1/sqrt(3), -1/sqrt(3),
    2/sqrt(3)), lengths 2, 1, 1, one sample per micro-batch, on-policy and ref = logp (the KL
    Unsloth's beta 0.001 turns on is 0): (a + a - 2a) / 3 = 0 where the step's token mean is
    a / 4, a = 1/sqrt(3)."""
    case = h.case(
        [h.sample("s0", [1, 1], 0.0), h.sample("s1", [1], 0.0), h.sample("s2", [1], 1.0)],
        [1, 1, 1],
    )
    output, _, want = h.run(unsloth, "bnpo", case)
    assert output.loss == pytest.approx(0.0, abs=1e-6)
    assert want["loss"] == pytest.approx(1 / 3**0.5 / 4, rel=1e-3)


def test_logged_kl_is_the_mean_of_each_completions_mean(unsloth):
    """Declared (step.metrics kl_loss/mean, any case): grpo_compute_loss logs the KL as the
    mean over the micro-batch's completions of each one's token mean (GRPOTrainer.log then
    averages the micro-batches). One micro-batch: s0 two tokens with ref - logp = 0.5, s1 one
    token with ref = logp: Unsloth logs (k3(0.5) + 0) / 2, the contract's token mean is
    2 k3(0.5) / 3."""
    case = h.case([h.sample("s0", [1, 1], 0.0, ref=[-0.5, -0.5]), h.sample("s1", [1], 1.0)], [2])
    output, _, want = h.run(unsloth, "grpo_kl", case)
    assert output.metrics["kl"] == pytest.approx(_k3(0.5) / 2, rel=1e-5)
    assert want["metrics"]["kl_loss/mean"] == pytest.approx(2 * _k3(0.5) / 3, rel=1e-9)


@pytest.mark.parametrize("clause_id", ["step.update", "step.metrics"])
@pytest.mark.parametrize("fixture", ["torchref", "oracle_target"])
def test_reference_targets_pass_under_unsloths_configs(clause_id, fixture, unsloth, request):
    """CONTRACT step: torchref and the oracle pass under Unsloth's configs (its findings are
    never the contract's own)."""
    h.reference_passes(request.getfixturevalue(fixture), unsloth.trainer_configs(), clause_id)


@pytest.mark.parametrize("config_name", ["grpo_kl", "dr_grpo"])
def test_an_actionless_completion_counts_in_the_denominator(unsloth, config_name):
    """Declared (step.update loss and gradient under grpo_kl and dr_grpo, actionless_sample):
    grpo averages the completions' means over every row of the micro-batch, dr_grpo divides
    by every row times max_completion_length. Scores 0, 1 and a third completion whose one
    token is a tool token (no action): the gradient at s0's token is 2/3 of the contract's,
    whose seq-mean modes count the two completions with an action token."""
    case = h.case(
        [h.sample("s0", [1], 0.0), h.sample("s1", [1], 1.0), h.sample("s2", [0], 0.5)], [3]
    )
    output, batch, want = h.run(unsloth, config_name, case)
    got, expected = batch.log_probs.grad[0, 0].item(), want["grad_logp"][0][0]
    assert expected != 0.0
    assert got == pytest.approx(expected * 2 / 3, rel=1e-4)


def test_a_nan_log_prob_at_padding_reaches_the_gradient(unsloth):
    """Declared (step.update gradient_off_actions, padding_nonfinite): masking by
    multiplication lets a NaN log-prob at padding through (NaN * 0); the contract's gradient
    there is exactly 0."""
    case = h.case([h.sample("s0", [1, 1], 0.0), h.sample("s1", [1], 1.0)], [2], pad=float("nan"))
    output, batch, want = h.run(unsloth, "default", case)
    assert math.isnan(batch.log_probs.grad[1, 1].item())

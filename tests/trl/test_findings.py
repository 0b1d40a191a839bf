"""Every break the TRL baseline declares, reproduced by hand on real TRL's own methods.

Each test builds the smallest input by hand, calls GRPOTrainer's real method through the
bare trainer shell (no adapter layout, no clause), and checks (1) what TRL returns and
(2) the contract's value for the same input, computed here from the clause's formula,
which a correct implementation returns (the stand-in does: test_standin.py). When TRL
changes one of these, its test fails and the baseline entry is stale.
"""

from __future__ import annotations

import math

import pytest
import torch

from rlconform.oracle import loss as oracle
from tests.sapo_overflow import contract_loss_and_gradient
from tests.trl.conftest import real_trl_skip_reason

pytestmark = pytest.mark.skipif(
    real_trl_skip_reason() is not None, reason=str(real_trl_skip_reason())
)

NAN = float("nan")


@pytest.fixture()
def shell(real_target):
    return real_target.shell


def _loss(shell, logps, old, adv, mask, capture=("per_token_loss",), **config):
    args = shell.config(**config)
    mask = torch.tensor(mask)
    return shell.compute_loss(
        args,
        logps=logps,
        completion_mask=mask,
        tool_mask=None,
        advantages=torch.tensor(adv),
        old=torch.tensor(old),
        num_items=mask.sum(),
        capture=capture,
    )


def test_gdpo_normalises_over_completions_not_tokens(shell):
    """adv.gdpo: one group, one reward function, scores [0, 1, 2], lengths [1, 1, 3]."""
    args = shell.config(
        num_generations=3,
        per_device_train_batch_size=3,
        multi_objective_aggregation="normalize_then_sum",
    )
    out, _ = shell.generate_and_score(
        args,
        lengths=[1, 1, 3],
        tool_masks=None,
        rewards_per_func=torch.tensor([[0.0], [1.0], [2.0]]),
    )
    assert abs(float(out["advantages"][1])) < 1e-6  # TRL: the middle completion gets 0
    # contract: the group-normalised [-1, 0, 1] whitened over the 5 action tokens
    tokens = [-1.0, 0.0, 1.0, 1.0, 1.0]
    mean = sum(tokens) / 5
    std = math.sqrt(sum((x - mean) ** 2 for x in tokens) / 4 + 1e-8)
    assert (0.0 - mean) / std == pytest.approx(-0.4 / math.sqrt(0.8 + 1e-8))


def test_cispo_clip_metric_ignores_negative_advantages(shell):
    """loss.cispo clipfrac: one token, ratio e (> eps_max 1.28), A = -1."""
    logps = torch.tensor([[0.0]], requires_grad=True)
    _, _, metrics = _loss(
        shell, logps, [[-1.0]], [-1.0], [[1]], loss_type="cispo", epsilon_high=1.28
    )
    assert metrics["cispo_clip_ratio"][-1] == 0.0  # TRL
    _, clipped = oracle.cispo_loss([-1.0], [0.0], [-1.0], [1], clip_low=1.0, clip_high=0.28)
    assert oracle.clip_fraction([clipped], [[1]]) == 1.0  # contract


def test_gspo_clip_metric_counts_sequences(shell):
    """loss.gspo clipfrac: s0 one unclipped token; s1 two tokens with rho = e^-0.5 < 0.8, A < 0."""
    logps = torch.tensor([[0.0, 0.0], [0.0, -1.0]], requires_grad=True)
    _, _, metrics = _loss(
        shell,
        logps,
        [[0.0, 0.0], [0.0, 0.0]],
        [-1.0, -1.0],
        [[1, 0], [1, 1]],
        loss_type="dapo",
        importance_sampling_level="sequence",
    )
    assert metrics["clip_ratio/region_mean"][-1] == 0.5  # TRL: 1 of 2 sequences
    flags = [
        oracle.gspo_loss(old, lp, adv, m, clip_low=0.2, clip_high=0.2, log_ratio_max=None)[1]
        for old, lp, adv, m in (
            ([0.0], [0.0], [-1.0], [1]),
            ([0.0, 0.0], [0.0, -1.0], [-1.0, -1.0], [1, 1]),
        )
    ]
    assert oracle.clip_fraction(flags, [[1], [1, 1]]) == pytest.approx(2 / 3)  # contract


@pytest.mark.parametrize(
    ("config", "pad"),
    [
        ({"loss_type": "dapo"}, NAN),  # loss.ppo_clip / loss.dual_clip
        ({"loss_type": "dapo", "importance_sampling_level": "sequence"}, NAN),  # loss.gspo
        ({"loss_type": "cispo", "epsilon_high": 5.0}, float("inf")),  # loss.cispo
        ({"loss_type": "sapo"}, NAN),  # loss.sapo
    ],
)
def test_nonfinite_padding_poisons_the_loss(shell, config, pad):
    """loss.*: a non-finite log-prob at a padded position (mask 0) makes TRL's loss and
    gradient NaN; the contract ignores padding (loss -A * r on the one action token)."""
    logps = torch.tensor([[-0.5, pad]], requires_grad=True)
    loss, _, _ = _loss(shell, logps, [[-0.5, pad]], [1.0], [[1, 0]], **config)
    assert math.isnan(float(loss.detach()))
    (grad,) = torch.autograd.grad(loss, logps)
    assert math.isnan(float(grad[0, 1])) or math.isnan(float(grad[0, 0]))


def test_unclamped_log_ratio(shell):
    """loss.ppo_clip / loss.dual_clip: old -100, logp -0.5, A = -2."""
    logps = torch.tensor([[-0.5]], requires_grad=True)
    _, captured, _ = _loss(shell, logps, [[-100.0]], [-2.0], [[1]], loss_type="dapo")
    assert math.isinf(float(captured["per_token_loss"][0, 0].detach()))  # TRL: 2 exp(99.5) = inf
    assert math.isfinite(2.0 * math.exp(20.0))  # contract: ratio capped at exp(20)
    # log-ratio 29.5 (no float overflow): TRL 2 exp(29.5), the contract 2 exp(20)
    logps = torch.tensor([[-0.5]], requires_grad=True)
    _, captured, _ = _loss(shell, logps, [[-30.0]], [-2.0], [[1]], loss_type="dapo")
    assert float(captured["per_token_loss"][0, 0].detach()) == pytest.approx(
        2 * math.exp(29.5), rel=1e-5
    )
    # dual clip (delta 3): the value is capped at 3 |A| = 6, the gradient is NaN (contract 0)
    logps = torch.tensor([[-0.5]], requires_grad=True)
    loss, captured, _ = _loss(shell, logps, [[-100.0]], [-2.0], [[1]], loss_type="dapo", delta=3.0)
    assert float(captured["per_token_loss"][0, 0].detach()) == 6.0
    (grad,) = torch.autograd.grad(loss, logps)
    assert math.isnan(float(grad[0, 0]))


def test_bias_corrected_k3_overflows(shell):
    """kl.importance_weighted: logp -100, ref -1, old -0.5 (use_bias_correction_kl)."""
    logps = torch.tensor([[-100.0]], requires_grad=True)
    args = shell.config(beta=1.0, use_bias_correction_kl=True)
    _, captured, _ = shell.compute_loss(
        args,
        logps=logps,
        completion_mask=torch.ones((1, 1), dtype=torch.long),
        tool_mask=None,
        advantages=torch.zeros(1),
        old=torch.tensor([[-0.5]]),
        ref=torch.tensor([[-1.0]]),
        num_items=torch.tensor(1),
        capture=("per_token_kl",),
    )
    assert math.isinf(float(captured["per_token_kl"][0, 0].detach()))  # TRL: inf * exp(-99.5)
    contract = math.exp(-99.5) * (math.exp(99.0) - 99.0 - 1.0)
    assert contract == pytest.approx(math.exp(-0.5), rel=1e-9)


@pytest.mark.parametrize(
    ("loss_type", "trl", "contract"),
    [
        # rows [1, 2, 3] | [5, 6] | a row without action tokens (losses 7, 7)
        ("grpo", (2.0 + 5.5 + 0.0) / 3, (2.0 + 5.5) / 2),
        ("luspo", (6.0 + 11.0 + 0.0) / 3, (6.0 + 11.0) / 2),
        ("dr_grpo", 17.0 / (3 * 2), 17.0 / (2 * 2)),  # max_completion_length 2
    ],
)
def test_sequence_means_count_actionless_rows(shell, loss_type, trl, contract):
    """agg.seq_mean_*: TRL's denominators count every row of the micro-batch."""
    loss_mat = torch.tensor([[1.0, 2.0, 3.0], [5.0, 6.0, 0.0], [7.0, 7.0, 0.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0], [0, 0, 0]])
    args = shell.config(loss_type=loss_type, max_completion_length=2)
    loss, _, _ = shell.compute_loss(
        args,
        logps=torch.zeros_like(loss_mat),
        completion_mask=torch.tensor([[1, 1, 1], [1, 1, 0], [0, 0, 0]]),
        tool_mask=None,
        advantages=-loss_mat,  # with r = 1 TRL's per-token loss is -A (adapters/trl/loss.py)
        num_items=mask.sum(),
    )
    assert float(loss) == pytest.approx(trl, rel=1e-6)
    assert abs(trl - contract) > 0.5


def test_masked_nan_loss_poisons_the_aggregate(shell):
    """agg.token_mean: losses [0.5, NaN, -1.5] with mask [1, 0, 1]: TRL NaN, contract -0.5."""
    loss_mat = torch.tensor([[0.5, NAN, -1.5]])
    args = shell.config(loss_type="dapo")
    loss, _, _ = shell.compute_loss(
        args,
        logps=torch.zeros_like(loss_mat),
        completion_mask=torch.ones((1, 3), dtype=torch.long),
        tool_mask=torch.tensor([[1, 0, 1]]),
        advantages=-loss_mat,
        num_items=torch.tensor(2),
    )
    assert math.isnan(float(loss))


def test_sequence_ratio_overflows(shell):
    """loss.gspo (overflow): old -100 on the one action token, logp -0.5, A = -1, a padded
    token behind it. TRL's sequence ratio exp(99.5) is inf in float32, so the reduced loss is
    not finite (inf, then inf * 0 at the padded token: NaN) and so is the gradient. Under
    TRL's profile (gspo_log_ratio_max None: no clamp) the contract's loss is |A| e^99.5,
    finite in float64, and the padded token takes no part."""
    logps = torch.tensor([[-0.5, -0.5]], requires_grad=True)
    loss, _, _ = _loss(
        shell,
        logps,
        [[-100.0, -0.5]],
        [-1.0],
        [[1, 0]],
        loss_type="dapo",
        importance_sampling_level="sequence",
    )
    assert not math.isfinite(float(loss.detach()))
    (grad,) = torch.autograd.grad(loss, logps)
    assert not bool(torch.isfinite(grad).all())
    losses, _ = oracle.gspo_loss(
        [-100.0, -0.5],
        [-0.5, -0.5],
        [-1.0, -1.0],
        [1, 0],
        clip_low=0.2,
        clip_high=0.2,
        log_ratio_max=None,
    )
    assert losses == [pytest.approx(math.exp(99.5)), 0.0]  # contract


def test_sapo_gate_overflows_to_a_nan_gradient(shell):
    """loss.sapo (grad, overflow): TRL's ratio is exp(logp - old) unclamped. At log-ratio
    0.5 (A = 1, tau_pos 1) the loss is -4 sigmoid(e^0.5 - 1) and the gradient -4 sigma'(.)
    e^0.5, as the contract's. At log-ratio 99.5 the float32 ratio is inf: the loss is the
    saturated -4A/tau = -4 (right), the gradient 4A sigma'(inf) inf = 0 x inf = NaN, where
    the contract's ratio is capped at e^20 and its gradient 0 (torchref's)."""
    temperatures = {"sapo_temperature_pos": 1.0, "sapo_temperature_neg": 1.05}
    z = math.exp(0.5) - 1.0
    sig = 1.0 / (1.0 + math.exp(-z))
    logps = torch.tensor([[-0.5]], requires_grad=True)
    loss, captured, _ = _loss(
        shell, logps, [[-1.0]], [1.0], [[1]], loss_type="sapo", **temperatures
    )
    assert float(captured["per_token_loss"][0, 0].detach()) == pytest.approx(-4.0 * sig, rel=1e-6)
    (grad,) = torch.autograd.grad(loss, logps)
    assert float(grad[0, 0]) == pytest.approx(-4.0 * sig * (1.0 - sig) * math.exp(0.5), rel=1e-5)

    logps = torch.tensor([[-0.5]], requires_grad=True)
    loss, captured, _ = _loss(
        shell, logps, [[-100.0]], [1.0], [[1]], loss_type="sapo", **temperatures
    )
    assert float(captured["per_token_loss"][0, 0].detach()) == -4.0
    (grad,) = torch.autograd.grad(loss, logps)
    assert math.isnan(float(grad[0, 0]))  # TRL
    assert contract_loss_and_gradient() == (pytest.approx(-4.0), 0.0)  # torchref

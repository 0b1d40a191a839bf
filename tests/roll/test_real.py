"""Checks against the real ROLL: run when ROLL is importable or RLCONFORM_ROLL_PATH names a
checkout (github.com/alibaba/ROLL); skipped with that reason otherwise.

They pin what the published certification (docs/certification/roll-*.md) reports: the
bindings reach ROLL's functions, the manifest's deviations are observed, and the findings
are still there (a finding that disappears means ROLL changed: re-certify).
"""

from __future__ import annotations

import importlib.util
import os

import numpy as np
import pytest
import torch

from rlconform.adapters.registry import load_target
from rlconform.adapters.roll.manifest import DEVIATIONS
from rlconform.adapters.torchref import TorchRef
from rlconform.conformance.profiles import get_run_profile
from rlconform.conformance.registry import select
from rlconform.conformance.runner import certify

ROLL_PATH = os.environ.get("RLCONFORM_ROLL_PATH")


def _installed() -> bool:
    try:
        return importlib.util.find_spec("roll.utils.functionals") is not None
    except (ImportError, ValueError):
        return False


pytestmark = pytest.mark.skipif(
    not ROLL_PATH and not _installed(),
    reason="ROLL is not importable and RLCONFORM_ROLL_PATH is not set (point it at a "
    "checkout of github.com/alibaba/ROLL to run these)",
)


@pytest.fixture(scope="module")
def roll():
    return load_target("roll", framework_path=ROLL_PATH)


def test_real_roll_loaded(roll):
    assert roll.runtime.functionals.__name__ == "roll.utils.functionals"
    assert hasattr(roll.runtime.functionals, "compute_advantage")
    assert roll.runtime.data_proto is not None, roll.runtime.data_proto_error


def test_manifest_deviations_observed_and_place_last_passes(roll):
    clauses = select(",".join(["reward.place_last", *DEVIATIONS]))
    status = {r.id: r.status for r in certify(roll, clauses, get_run_profile("ci")).clauses}
    assert status["reward.place_last"] == "pass"
    for cid in DEVIATIONS:
        if cid in status:  # clauses of areas not on this branch yet are absent
            assert status[cid] == "deviation", cid


def test_grpo_matches_on_equal_groups(roll):
    rewards = torch.tensor([[0.0, 1.0, 0.0], [0.5, 0.0, 0.0], [0.0, 0.0, 2.0], [1.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 1], [1, 0, 1], [1, 0, 0]])
    index = np.array(["a", "b", "a", "b"], dtype=object)
    got, _ = roll.advantage_grpo(rewards, mask, index, 1e-6, True)
    want, _ = TorchRef().advantage_grpo(rewards, mask, index, 1e-6, True)
    assert torch.allclose(got * mask, want * mask, atol=1e-5)


def test_finding_group_of_one_is_nan(roll):
    rewards = torch.tensor([[1.0], [2.0]])
    got, _ = roll.advantage_grpo(rewards, torch.ones(2, 1), ["a", "b"], 1e-6, True)
    assert torch.isnan(got).all()


def test_finding_gae_reads_values_at_padding(roll):
    rewards = torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    values = torch.tensor([[0.1, 0.2, 0.0], [0.3, 0.2, 0.1]])
    clean, _ = roll.advantage_gae(rewards, values, mask, 1.0, 0.95)
    values[0, 2] = 5.0  # padding
    leaked, _ = roll.advantage_gae(rewards, values, mask, 1.0, 0.95)
    assert not torch.allclose(clean * mask, leaked * mask)


def test_finding_token_mean_reads_masked_positions(roll):
    loss = torch.tensor([[1.0, 100.0, 1.0]])
    mask = torch.tensor([[1, 0, 1]])
    assert roll.agg_loss(loss, mask, "token-mean").item() == pytest.approx(51.0)


def test_finding_sum_norm_does_not_divide_by_sequences(roll):
    loss = torch.ones(2, 2)
    mask = torch.ones(2, 2, dtype=torch.int64)
    # contract: 4 / (2 sequences * 7); ROLL: 4 / 7
    assert roll.agg_loss(loss, mask, "seq-mean-token-sum-norm", loss_scale_factor=7).item() == (
        pytest.approx(4 / 7)
    )


def test_finding_k3_gradient_not_finite_when_exp_overflows(roll):
    logp = torch.tensor([[-100.0, -1.0]], requires_grad=True)
    value = roll.kl_penalty(logp, torch.tensor([[-0.5, -1.5]]), "k3")
    assert value[0, 0].item() == 10.0  # the value clamp holds
    value.sum().backward()
    assert torch.isnan(logp.grad[0, 0])  # but exp(99.5) overflowed: 0 * inf
    assert torch.isfinite(logp.grad[0, 1])


def test_finding_kl_in_reward_leaks_nan_from_padding(roll):
    scores = torch.tensor([[0.0, 1.0, 0.0]])
    mask = torch.tensor([[1, 1, 0]])
    old = torch.tensor([[-0.5, -1.0, float("nan")]])
    ref = torch.tensor([[-0.75, -1.0, float("nan")]])
    rewards, _ = roll.apply_kl_in_reward(scores, old, ref, mask, 0.1, "kl")
    assert torch.isnan(rewards[0, 2])  # compute_approx_kl multiplies by the mask
    assert rewards[0, :2].tolist() == pytest.approx([-0.025, 1.0])

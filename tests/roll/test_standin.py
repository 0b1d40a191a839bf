"""The ROLL adapter's wiring, exercised against the stand-in package in ``standin/``
(ROLL's module paths and signatures, torchref math), loaded through --framework-path."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from rlconform.adapters.base import Inexpressible, Unsupported
from rlconform.adapters.registry import load_target
from rlconform.adapters.torchref import TorchRef
from rlconform.conformance.profiles import get_run_profile
from rlconform.conformance.registry import select
from rlconform.conformance.runner import certify

STANDIN = Path(__file__).parent / "standin"

#: Clauses whose bindings reach the stand-in's math for every generated case.
MUST_PASS = (
    "mask.loss",
    "mask.response_from_eos",
    "entropy.from_logits",
    "reward.place_last",
    "adv.gae",
    "adv.grpo",
    "adv.reinforce_pp",
    "adv.invariants",
    "loss.ppo_clip",
    "loss.dual_clip",
    "loss.value_clip",
    "agg.token_mean",
    "agg.seq_mean_token_sum",
    "agg.seq_mean_token_mean",
    "agg.seq_mean_token_sum_norm",
    "batch.union",
    "batch.seqlen_balance",
    "offpolicy.icepop",
    "adv.reinforce_pp_baseline",
)

#: Clauses that fail on the stand-in exactly as on ROLL, because the break is in what the
#: binding can pass (ROLL's signature), not in the math: no temperature reaches the log-prob
#: op, no keep flag reaches the reward normalisation, reducers come from key tags.
#: (adv.reinforce_pp_baseline's un-whitened returns used to be one: the contract no longer
#: defines the returns of an outcome estimator, so it passes.)
SIGNATURE_BREAKS = {
    "logprob.alignment": "values",
    "reward.normalize_batch": "values",
    "metrics.reduce": None,
}


@pytest.fixture(scope="module")
def standin():
    return load_target("roll", framework_path=str(STANDIN), shipped_baseline=False)


def test_loads_standin_with_version_and_shims(standin):
    info = standin.describe()
    assert info["name"] == "roll"
    assert info["version"] == "0.0.0+standin"
    assert Path(info["source"]) == STANDIN.resolve()
    assert standin.runtime.functionals.__file__.startswith(str(STANDIN.resolve()))
    assert standin.deviations == {}


def test_certification_over_standin_passes_bound_clauses(standin):
    clauses = select(",".join(MUST_PASS + tuple(SIGNATURE_BREAKS)))
    report = certify(standin, clauses, get_run_profile("ci"))
    status = {r.id: r for r in report.clauses}
    for cid in MUST_PASS:
        assert status[cid].status == "pass", (cid, status[cid].message)
    for cid in SIGNATURE_BREAKS:
        assert status[cid].status == "fail", (cid, status[cid].message)


def test_every_bound_operation_names_its_functions(standin):
    from rlconform.conformance.registry import load_all

    for op, binding in standin.bindings.items():
        assert standin.implements(op), op
        assert binding["functions"] and binding["path"], op
    operations = {op for clause in load_all().values() for op in clause.ops}
    implemented = {op for op in operations if standin.implements(op)}
    assert sorted(implemented - set(standin.bindings)) == []


def _canonical_batch():
    rewards = torch.tensor([[0.0, 1.0, 0.0], [0.5, 0.0, 0.0], [0.0, 0.0, 2.0], [1.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 1], [1, 0, 1], [1, 0, 0]])
    values = torch.tensor([[0.1, 0.2, 9.0], [0.3, 0.1, 0.0], [0.5, 7.0, 0.2], [0.4, 0.0, 0.0]])
    return rewards, mask, values


def test_gae_wiring(standin):
    rewards, mask, values = _canonical_batch()
    got = standin.advantage_gae(rewards, values, mask, 0.9, 0.8)
    ref = TorchRef()
    ref.profile = standin.profile  # discount_at_holes: the tool observations are steps
    want = ref.advantage_gae(rewards, values, mask, 0.9, 0.8)
    for g, w in zip(got, want):
        assert torch.allclose(g * mask, w * mask, atol=1e-6)
    with pytest.raises(Inexpressible, match="bootstrap"):
        standin.advantage_gae(
            rewards, values, mask, 0.9, 0.8, torch.ones(4), torch.tensor([True, False, True, True])
        )


@pytest.mark.parametrize("norm_by_std", [True, False])
def test_grpo_wiring_regroups_interleaved_rows(standin, norm_by_std):
    rewards, mask, _ = _canonical_batch()
    index = np.array(["a", "b", "a", "b"], dtype=object)
    got, _ = standin.advantage_grpo(rewards, mask, index, 1e-6, norm_by_std)
    want, _ = TorchRef().advantage_grpo(rewards, mask, index, 1e-6, norm_by_std)
    assert torch.allclose(got * mask, want * mask, atol=1e-5)
    # Unequal groups go through the agentic pipeline's group_by normalisation.
    unequal = ["a", "a", "a", "b"]
    got, _ = standin.advantage_grpo(rewards, mask, unequal, 1e-6, norm_by_std)
    ref = TorchRef()
    ref.profile = standin.profile
    want, _ = ref.advantage_grpo(rewards, mask, unequal, 1e-6, norm_by_std)
    assert torch.allclose(got * mask, want * mask, atol=1e-5)
    with pytest.raises(Unsupported, match="fixed eps"):
        standin.advantage_grpo(rewards, mask, index, 1e-4, norm_by_std)


def test_reinforce_pp_baseline_wiring(standin):
    rewards, mask, _ = _canonical_batch()
    index = ["a", "a", "b", "b"]
    got, _ = standin.advantage_reinforce_pp_baseline(rewards, mask, index)
    ref = TorchRef()
    ref.profile = standin.profile
    want, _ = ref.advantage_reinforce_pp_baseline(rewards, mask, index)
    assert torch.allclose(got * mask, want * mask, atol=1e-5)


def test_normalize_rewards_and_reduce_metrics_wiring(standin):
    scores = torch.tensor([1.0, 3.0, 2.0, 4.0])
    got = standin.normalize_rewards(scores, torch.ones(4, dtype=torch.bool))
    std = torch.tensor([1.0, 3.0, 2.0, 4.0]).std()  # ROLL's profile: unbiased, eps 1e-6
    assert torch.allclose(got, (scores - 2.5) / (std + 1e-6), atol=1e-6)
    assert standin.reduce_metrics({"a@max": [1.0, 3.0], "b_min": [2.0, -1.0], "c": [1.0, 2.0]}) == {
        "a@max": 3.0,
        "b_min": -1.0,
        "c": 1.5,
    }


def test_kl_controller_wiring(standin):
    assert standin.kl_controller_update("fixed", 0.2, 5.0, 8, 0.1, 100.0) == 0.2
    with pytest.raises(Unsupported, match="straight-through"):
        standin.kl_penalty(torch.zeros(1, 2), torch.zeros(1, 2), "k3+")


def test_kl_clauses_over_standin(standin):
    clauses = select("kl.estimators,kl.adaptive_controller,kl.straight_through")
    if not clauses:
        pytest.skip("the kl area's clauses are not on this branch yet")
    status = {r.id: r.status for r in certify(standin, clauses, get_run_profile("ci")).clauses}
    assert status == {
        "kl.estimators": "pass",
        "kl.adaptive_controller": "pass",
        "kl.straight_through": "skip",
    }


def test_kl_in_reward_wiring(standin):
    if not hasattr(TorchRef(), "apply_kl_in_reward"):
        pytest.skip("torchref has no kl operations on this branch yet")
    scores = torch.tensor([[0.0, 0.0, 1.0, 0.0], [0.0, 0.5, 0.0, 0.0]])
    mask = torch.tensor([[1, 0, 1, 0], [0, 0, 0, 0]])  # row 1: scored non-action tail
    old = torch.tensor([[-0.5, -3.0, -1.0, 0.0], [-2.0, -1.0, 0.0, 0.0]])
    ref = torch.tensor([[-0.75, -0.5, -1.5, 0.0], [-0.5, -4.0, 0.0, 0.0]])
    got, metric = standin.apply_kl_in_reward(scores, old, ref, mask, 0.1, "kl")
    ref_target = TorchRef()
    ref_target.profile = standin.profile
    want, want_metric = ref_target.apply_kl_in_reward(scores, old, ref, mask, 0.1, "kl")
    assert torch.allclose(got, want, atol=1e-6)
    assert float(metric) == pytest.approx(float(want_metric), abs=1e-6)
    with pytest.raises(Inexpressible, match="not of that form"):
        standin.apply_kl_in_reward(scores + 1.0, old, ref, mask, 0.1, "kl")


def test_offpolicy_wiring(standin):
    old = torch.tensor([[-0.5, -3.0, -1.0, 0.0], [-2.0, -0.75, 0.0, 0.0]])
    rollout = torch.tensor([[-1.5, -0.25, -1.0, 0.0], [-2.25, -0.5, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 0, 0]])
    ref = TorchRef()
    got = standin.tis_weights(old, rollout, mask, 0.0, 2.0)
    assert torch.allclose(got, ref.tis_weights(old, rollout, mask, 0.0, 2.0), atol=1e-6)
    for mode in ("token_truncate", "sequence_truncate", "sequence_mask"):
        got = standin.is_correction_weights(old, rollout, mask, mode, None, 3.0)
        want = ref.is_correction_weights(old, rollout, mask, mode, None, 3.0)
        assert torch.allclose(got, want, atol=1e-6), mode
    with pytest.raises(Unsupported, match="upper_bound"):
        standin.tis_weights(old, rollout, mask, 0.5, 2.0)

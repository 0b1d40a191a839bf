"""The OpenRLHF adapter's wiring, exercised against the stand-in package in ``standin/``
(OpenRLHF 0.11.2's module paths and signatures, torchref math), loaded through
--framework-path. Runs without OpenRLHF installed."""

from __future__ import annotations

import pickle
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

#: Clauses whose bindings reach the stand-in's (contract-correct) math on every case the
#: signatures can express.
MUST_PASS = (
    "reward.place_last",
    "kl.adaptive_controller",
    "kl.estimators",
    "kl.straight_through",
    "adv.grpo",
    "adv.reinforce_pp_baseline",
    "loss.ppo_clip",
    "loss.dual_clip",
    "offpolicy.tis",
    "offpolicy.icepop",
    "agg.token_mean",
    "agg.seq_mean_token_mean",
    "entropy.from_logits",
)


@pytest.fixture(scope="module")
def standin():
    target = load_target("openrlhf", framework_path=str(STANDIN))
    target.deviations = {}  # the stand-in is not OpenRLHF: its shipped baseline does not apply
    return target


def test_loads_standin_with_release_table_and_shims(standin):
    info = standin.describe()
    assert info["name"] == "openrlhf"
    assert info["version"] == "0.11.2+standin"
    assert info["release"] == "0.11.2"
    assert "is_correction_level" in info["bindings"]
    assert Path(info["source"]) == STANDIN.resolve()
    assert standin.runtime.loss.__file__.startswith(str(STANDIN.resolve()))


def test_every_binding_names_functions_and_a_trainer_path(standin):
    for op, binding in standin.bindings.items():
        assert standin.implements(op), op
        assert binding["functions"] and binding["path"], op


def test_certification_over_standin_passes_bound_clauses(standin):
    report = certify(standin, select(",".join(MUST_PASS)), get_run_profile("ci"))
    status = {r.id: (r.status, r.message) for r in report.clauses}
    for cid in MUST_PASS:
        assert status[cid][0] == "pass", (cid, status[cid])
    assert {row["clause"] for row in report.bindings} >= set(MUST_PASS)


def test_target_pickles_as_its_recipe(standin):
    clone = pickle.loads(pickle.dumps(standin))
    assert clone.runtime.loss.__file__ == standin.runtime.loss.__file__


def _batch():
    rewards = torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 0.5], [0.0, 0.0, 2.0], [1.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 1], [1, 0, 1], [1, 0, 0]])
    return rewards, mask


def test_group_rows_may_interleave(standin):
    rewards, mask = _batch()
    index = np.array(["a", "b", "a", "b"], dtype=object)
    got, _ = standin.advantage_grpo(rewards, mask, index, epsilon=1e-9)
    want, _ = TorchRef().advantage_grpo(rewards, mask, index, epsilon=1e-9)
    assert torch.allclose(got * mask, want * mask, atol=1e-6)


def test_inexpressible_and_unsupported_inputs_say_why(standin):
    rewards, mask = _batch()
    with pytest.raises(Inexpressible, match="unequal size"):
        standin.advantage_rloo(rewards, mask, np.array(["a", "a", "a", "b"], dtype=object))
    with pytest.raises(Inexpressible, match="n_samples_per_prompt > 1"):
        standin.advantage_grpo(rewards, mask, np.array(list("abcd"), dtype=object), 1e-9)
    with pytest.raises(Inexpressible, match="1e-9"):
        standin.advantage_grpo(rewards, mask, np.array(list("aabb"), dtype=object), 1e-6)
    with pytest.raises(Inexpressible, match="bootstrap"):
        standin.advantage_gae(
            rewards, rewards, mask, 1.0, 1.0, torch.zeros(4), torch.tensor([True, False] * 2)
        )
    with pytest.raises(Unsupported, match="abs"):
        standin.kl_penalty(rewards, rewards, "abs")
    with pytest.raises(Unsupported, match="token-sum"):
        standin.agg_loss(rewards, mask, "token-sum")
    with pytest.raises(Unsupported, match="sequence"):
        standin.is_correction_weights(rewards, rewards, mask, "sequence_truncate")


def test_per_token_loss_capture_restores_aggregate_loss(standin):
    module = standin.runtime.loss
    real = module.aggregate_loss
    old = torch.tensor([[-1.0, -2.0]])
    loss, metrics = standin.ppo_clip_loss(
        old,
        old + 0.5,
        torch.tensor([[1.0, -1.0]]),
        torch.tensor([[1, 1]]),
        clip_ratio_low=0.2,
        clip_ratio_high=0.2,
    )
    assert loss.shape == (1, 2) and module.aggregate_loss is real
    assert float(metrics["clipfrac"]) == 0.5  # ratio e^0.5: A = 1 clipped, A = -1 not

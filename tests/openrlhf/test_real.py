"""Checks against the real OpenRLHF: run when it is installed (``pip install --no-deps
openrlhf==0.11.2`` plus ``.[openrlhf]``), skipped with that reason otherwise.

Each finding of the published certification (docs/certification/openrlhf-0.11.2.md) is
reproduced here on its minimal case against OpenRLHF's own function, next to what the
contract asks (torchref, a correct implementation, gives it on the same input). A finding
that disappears means OpenRLHF changed: re-certify and update the baseline.
"""

from __future__ import annotations

import importlib.util
import math
import types

import pytest
import torch

from rlconform.adapters.registry import load_target
from rlconform.adapters.torchref import TorchRef
from rlconform.conformance.profiles import get_run_profile
from rlconform.conformance.registry import select
from rlconform.conformance.runner import certify


def _installed() -> bool:
    try:
        return importlib.util.find_spec("openrlhf") is not None
    except (ImportError, ValueError):
        return False


pytestmark = pytest.mark.skipif(
    not _installed(),
    reason="OpenRLHF is not installed (pip install --no-deps openrlhf==0.11.2 && "
    "pip install -e '.[openrlhf]')",
)

REF = TorchRef()


@pytest.fixture(scope="module")
def orl():
    target = load_target("openrlhf")
    if target.runtime.release.name != "0.11.2":
        pytest.skip(f"the pinned findings are those of 0.11.2, not {target.version}")
    return target


def t(rows, dtype=torch.float32):
    return torch.tensor(rows, dtype=dtype)


def test_bindings_reach_openrlhf_and_the_baseline_is_loaded(orl):
    assert orl.runtime.loss.__name__ == "openrlhf.models.loss"
    assert "site-packages" in orl.runtime.loss.__file__ or "openrlhf" in orl.runtime.loss.__file__
    assert orl.deviations, "the shipped baseline of 0.11.2 was not loaded"


def test_kl_values_are_clamped_to_10_for_every_estimator(orl):
    kl = orl.runtime.utils.compute_approx_kl
    logp, ref = t([[0.0, 0.0]]), t([[-12.0, -5.0]])
    assert kl(logp, ref, kl_estimator="k1").tolist() == [[10.0, 5.0]]
    assert kl(logp, ref, kl_estimator="k2").tolist() == [[10.0, 10.0]]
    assert REF.kl_penalty(logp, ref, "k1").tolist() == [[12.0, 5.0]]
    assert REF.kl_penalty(logp, ref, "k2").tolist() == [[72.0, 12.5]]


def test_unbiased_gradient_kl_weights_only_the_gradient(orl):
    logp = t([[-1.0]]).requires_grad_(True)
    value = orl.runtime.utils.compute_approx_kl(
        logp, t([[0.0]]), log_probs_old=t([[0.0]]), kl_estimator="k1", unbiased_gradient=True
    )
    (grad,) = torch.autograd.grad(value.sum(), logp)
    assert value.item() == -1.0 and grad.item() == pytest.approx(-math.exp(-1.0))
    logp2 = t([[-1.0]]).requires_grad_(True)
    want = REF.importance_weighted_kl(logp2, t([[0.0]]), t([[0.0]]), "k1")
    (want_grad,) = torch.autograd.grad(want.sum(), logp2)
    assert want.item() == pytest.approx(-math.exp(-1.0)) and want_grad.item() == pytest.approx(0.0)


def test_compute_reward_puts_an_actionless_reward_into_the_last_column(orl):
    mask = torch.tensor([[0, 0, 0], [1, 1, 0]], dtype=torch.bool)
    placed = orl.runtime.utils.compute_reward(t([1.0, 2.0]), 0.0, torch.zeros(2, 3), mask)
    assert placed.tolist() == [[0.0, 0.0, 1.0], [0.0, 2.0, 0.0]]
    assert REF.place_reward_last(t([1.0, 2.0]), mask.long(), mask.long()).tolist()[0] == [0.0] * 3


def test_compute_reward_puts_kl_on_mask_holes_and_padding(orl):
    mask = torch.tensor([[1, 0, 1, 0]], dtype=torch.bool)
    shaped = orl.runtime.utils.compute_reward(t([1.0]), 0.1, torch.ones(1, 4), mask)
    assert shaped.tolist()[0] == pytest.approx([-0.1, -0.1, 0.9, -0.1])


def test_whitening_uses_the_biased_variance(orl):
    rewards, mask = t([[1.0, 0.0]]), torch.tensor([[1, 1]])
    advantages, returns = orl.advantage_reinforce_pp(rewards, mask, 1.0)
    assert returns.tolist() == [[1.0, 0.0]]
    assert advantages.tolist()[0] == pytest.approx([1.0, -1.0], abs=1e-6)
    want, _ = REF.advantage_reinforce_pp(rewards, mask, 1.0)
    assert want.tolist()[0] == pytest.approx([math.sqrt(0.5), -math.sqrt(0.5)], abs=1e-6)


def test_cumulative_returns_drop_a_reward_on_a_mask_hole(orl):
    returns = orl.runtime.experience_maker.RemoteExperienceMaker.get_cumulative_returns(
        None, t([[0.0, 2.0]]), torch.tensor([[1, 0]], dtype=torch.bool), 1.0
    )
    assert returns.tolist() == [[0.0, 0.0]]
    _, want = REF.advantage_reinforce_pp(t([[0.0, 2.0]]), torch.tensor([[1, 0]]), 1.0)
    assert want.tolist() == [[2.0, 0.0]]


def test_gae_lets_a_nan_value_at_padding_into_the_returns(orl):
    gae = orl.runtime.experience_maker.RemoteExperienceMaker.get_advantages_and_returns
    mask = torch.tensor([[1, 0]], dtype=torch.bool)
    _, returns = gae(None, t([[0.5, float("nan")]]), t([[1.0, 0.0]]), mask, 1.0, 1.0)
    assert math.isnan(returns[0, 0].item())
    _, want = REF.advantage_gae(t([[1.0, 0.0]]), t([[0.5, float("nan")]]), mask.long(), 1.0, 1.0)
    assert want[0, 0].item() == 1.0


def test_advantage_step_on_zero_samples_raises(orl):
    with pytest.raises(IndexError):
        orl.advantage_reinforce_pp(torch.zeros(0, 3), torch.zeros(0, 3, dtype=torch.long), 1.0)


def test_aggregate_loss_nan_padding_and_empty_batch(orl):
    aggregate = orl.runtime.loss.aggregate_loss
    mask = torch.tensor([[1, 0]], dtype=torch.bool)
    assert math.isnan(aggregate(t([[1.0, float("nan")]]), mask).item())
    assert math.isnan(aggregate(t([[1.0, 2.0]]), torch.zeros(1, 2, dtype=torch.bool)).item())
    assert REF.agg_loss(t([[1.0, float("nan")]]), mask.long(), "token-mean").item() == 1.0


def test_entropy_loss_of_no_action_token_or_nan_padding_is_nan(orl):
    entropy = orl.entropy_mean
    empty = entropy(torch.zeros(1, 1, 2), torch.zeros(1, 1, dtype=torch.long))
    assert math.isnan(empty.item())
    assert REF.entropy_mean(torch.zeros(1, 1, 2), torch.zeros(1, 1, dtype=torch.long)).item() == 0
    logits = t([[[0.0, 0.0], [float("nan"), 0.0]]])
    mask = torch.tensor([[1, 0]])
    assert math.isnan(entropy(logits, mask).item())
    assert REF.entropy_mean(logits, mask).item() == pytest.approx(math.log(2))


def test_loss_batch_info_of_zero_rows_raises(orl):
    with pytest.raises(RuntimeError, match="reshape"):
        orl.runtime.loss_utils.get_loss_batch_info(None, torch.zeros(0, 3, dtype=torch.bool))


def test_gspo_gradient_is_that_of_the_sequence_mean(orl):
    zeros = t([[0.0, 0.0]])
    mask = torch.tensor([[1, 1]])
    grads = []
    for op in (orl.gspo_loss, REF.gspo_loss):
        logp = zeros.clone().requires_grad_(True)
        loss, _ = op(zeros, logp, t([[-1.0, -0.5]]), mask, clip_ratio_low=0.2, clip_ratio_high=0.2)
        (grad,) = torch.autograd.grad(loss.sum() / 2, logp)
        grads.append(grad.tolist())
    assert grads[0][0] == pytest.approx([0.375, 0.375])
    assert grads[1][0] == pytest.approx([0.5, 0.25])


def test_sequence_mask_keeps_the_token_ratio(orl):
    old, rollout, mask = t([[0.0, 0.0]]), t([[0.0, -1.0]]), torch.tensor([[1, 1]])
    got = orl.is_correction_weights(old, rollout, mask, "sequence_mask", None, 3.0)
    assert got.tolist()[0] == pytest.approx([1.0, math.e])
    profile = types.SimpleNamespace(
        get=lambda key, default=None: "mean" if key == "is_sequence_log_ratio" else default
    )
    ref = TorchRef()
    ref.profile = profile
    want = ref.is_correction_weights(old, rollout, mask, "sequence_mask", None, 3.0)
    assert want.tolist()[0] == pytest.approx([math.exp(0.5)] * 2)


def test_certify_passes_with_the_shipped_baseline(orl):
    clauses = select("kl.adaptive_controller,adv.grpo,adv.rloo,loss.ppo_clip,offpolicy.tis")
    report = certify(orl, clauses, get_run_profile("ci"))
    status = {r.id: (r.status, r.message) for r in report.clauses}
    assert status["kl.adaptive_controller"][0] == "pass", status
    for cid in ("adv.grpo", "adv.rloo", "loss.ppo_clip", "offpolicy.tis"):
        assert status[cid][0] in ("pass", "deviation"), (cid, status[cid])

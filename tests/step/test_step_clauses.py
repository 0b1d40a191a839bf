"""The step clauses pass on the two reference targets under every declared config, and the
oracle's step gradient is the derivative of its loss."""

from __future__ import annotations

import math

import pytest

from rlconform.adapters.torchref.step import TORCHREF_CONFIGS
from rlconform.conformance.clauses.step import EXAMPLES
from rlconform.oracle.step import train_step
from tests.conftest import certify_one


@pytest.mark.parametrize("clause_id", ["step.update", "step.metrics", "step.state"])
@pytest.mark.parametrize("fixture", ["torchref", "oracle_target"])
def test_reference_targets_pass(clause_id, fixture, request):
    result = certify_one(request.getfixturevalue(fixture), clause_id)
    assert result.status == "pass", result.message


@pytest.mark.parametrize(
    ("name", "settings"), TORCHREF_CONFIGS, ids=[n for n, _ in TORCHREF_CONFIGS]
)
def test_oracle_gradient_is_the_derivative_of_its_loss(name, settings):
    samples = [dict(s) for s in EXAMPLES[0]["samples"]]
    result = train_step(samples, settings)
    h = 1e-6
    for i, s in enumerate(samples):
        for t, m in enumerate(s["mask"]):
            for key, grad_key in (
                ("logp", "grad_logp"),
                ("entropy", "grad_entropy"),
                ("vpreds", "grad_vpreds"),
            ):
                if grad_key not in result:
                    continue
                loss_key = "value_loss" if key == "vpreds" else "loss"
                moved = [dict(x) for x in samples]
                moved[i][key] = list(moved[i][key])
                moved[i][key][t] += h
                up = train_step(moved, settings)[loss_key]
                moved[i][key][t] -= 2 * h
                down = train_step(moved, settings)[loss_key]
                numeric = (up - down) / (2 * h)
                analytic = result[grad_key][i][t]
                assert math.isclose(analytic, numeric, rel_tol=1e-5, abs_tol=1e-7), (
                    name,
                    key,
                    i,
                    t,
                )
                if not m:
                    assert analytic == 0.0


def _adapter_configs():
    """(adapter, config) for every trainer config a shipped adapter declares, where its
    framework imports here."""
    from rlconform.adapters.registry import load_target

    found = []
    for spec in ("verl", "trl", "openrlhf"):
        try:
            target = load_target(spec)
        except Exception:  # the framework is not installed in this environment
            continue
        found += [(spec, config) for config in target.trainer_configs()]
    return found


ADAPTER_CONFIGS = _adapter_configs()


@pytest.mark.skipif(not ADAPTER_CONFIGS, reason="no adapter's framework imports here")
@pytest.mark.parametrize("clause_id", ["step.update", "step.metrics", "step.state"])
@pytest.mark.parametrize("fixture", ["torchref", "oracle_target"])
def test_reference_targets_pass_under_every_adapter_config(clause_id, fixture, request):
    """CONTRACT step: torchref and the oracle pass under the settings of every config a
    shipped adapter declares (so a framework's finding is never the contract's own)."""
    from rlconform.adapters.base import with_overrides

    base = request.getfixturevalue(fixture)
    configs = [config for _, config in ADAPTER_CONFIGS]
    target = with_overrides(base, trainer_configs=lambda self: configs)
    result = certify_one(target, clause_id)
    assert result.status == "pass", result.message


def test_sapo_step_on_policy_is_twice_the_clipped_loss_with_the_same_gradient():
    """At ratio 1 (on-policy) SAPO's gate is 4/tau sigmoid(0) = 2/tau and its slope
    4 sigma'(0) = 1: with tau_pos = tau_neg = 1 the step's loss is twice the clipped
    surrogate's (-A vs -2A per token) and the gradient is the same -A w."""
    samples = [dict(s) for s in EXAMPLES[0]["samples"]]
    common = {"on_policy": True, "loss_agg_mode": "seq-mean-token-mean"}
    clipped = train_step(samples, common)
    sapo = train_step(
        samples, {**common, "policy_loss": "sapo", "sapo_tau_pos": 1.0, "sapo_tau_neg": 1.0}
    )
    assert any(abs(g) > 1e-3 for row in clipped["grad_logp"] for g in row)
    assert math.isclose(sapo["loss"], 2.0 * clipped["loss"], rel_tol=1e-12, abs_tol=1e-15)
    for got, want in zip(sapo["grad_logp"], clipped["grad_logp"]):
        assert got == [pytest.approx(w, rel=1e-12, abs=1e-15) for w in want]
    assert sapo["metrics"]["clip_fraction"] == 0.0

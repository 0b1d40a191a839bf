"""Against real AReaL 1.0.4 (``pip install --no-deps areal==1.0.4 && pip install -e '.[areal]'``).

The shipped baseline (adapters/areal/baselines/areal-<release>.toml) is held to the run:
every declared break is observed (status deviation: no stale entry, no failure outside it),
every other bound clause passes, and every clause the adapter does not bind skips.
"""

from __future__ import annotations

import pytest

from rlconform.adapters.areal.manifest import baseline_path
from rlconform.conformance.profiles import get_run_profile
from rlconform.conformance.registry import select
from rlconform.conformance.runner import certify
from tests.areal.conftest import needs_areal

pytestmark = needs_areal

BASELINED = (
    "kl.estimators",
    "adv.gae",
    "adv.invariants",
    "loss.dual_clip",
    "loss.gspo",
    "loss.ppo_clip",
    "loss.sapo",
    "step.update",
    "step.state",
)
PASSING = (
    "adv.grpo",
    "loss.value_clip",
    "offpolicy.icepop",
    "offpolicy.is_correction",
    "offpolicy.tis",
)


@pytest.mark.slow
def test_real_areal_matches_its_baseline(areal):
    assert baseline_path(areal.runtime.version).exists(), areal.runtime.version
    report = certify(areal, select(None), get_run_profile("ci"))
    results = {r.id: r for r in report.clauses}
    for clause_id in BASELINED:
        assert results[clause_id].status == "deviation", (clause_id, results[clause_id].message)
    for clause_id in PASSING:
        assert results[clause_id].status == "pass", (clause_id, results[clause_id].message)
    for result in report.clauses:
        if result.id not in set(BASELINED) | set(PASSING):
            assert result.status == "skip", (result.id, result.status, result.message)

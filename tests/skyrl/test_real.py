"""Against real SkyRL 0.4.0 (``pip install -e '.[dev,skyrl]'`` on Python >= 3.12).

The shipped baseline (adapters/skyrl/baselines/skyrl-<release>.toml) is held to the run:
every declared break is observed (status deviation: no stale entry, no failure outside it),
every other bound clause passes, and every clause the adapter does not bind skips.
"""

from __future__ import annotations

import pytest

from rlconform.adapters.skyrl.manifest import baseline_path
from rlconform.conformance.profiles import get_run_profile
from rlconform.conformance.registry import select
from rlconform.conformance.runner import certify
from tests.skyrl.conftest import needs_skyrl

pytestmark = needs_skyrl

BASELINED = (
    "kl.in_reward",
    "adv.gae",
    "adv.invariants",
    "adv.reinforce_pp",
    "loss.cispo",
    "loss.gspo",
    "loss.value_clip",
    "agg.token_mean",
    "agg.seq_mean_token_mean",
    "agg.seq_mean_token_sum_norm",
    "step.update",
)
PASSING = (
    "kl.estimators",
    "kl.adaptive_controller",
    "adv.grpo",
    "adv.rloo",
    "loss.ppo_clip",
    "loss.dual_clip",
    "loss.sapo",
    "step.state",
)


@pytest.mark.slow
def test_real_skyrl_matches_its_baseline(skyrl):
    assert baseline_path(skyrl.runtime.version).exists(), skyrl.runtime.version
    report = certify(skyrl, select(None), get_run_profile("ci"))
    results = {r.id: r for r in report.clauses}
    for clause_id in BASELINED:
        assert results[clause_id].status == "deviation", (clause_id, results[clause_id].message)
    for clause_id in PASSING:
        assert results[clause_id].status == "pass", (clause_id, results[clause_id].message)
    for result in report.clauses:
        if result.id not in set(BASELINED) | set(PASSING):
            assert result.status == "skip", (result.id, result.status, result.message)


def test_certify_exits_0_against_the_shipped_baseline(tmp_path):
    from rlconform.conformance.cli import main

    assert main(["certify", "skyrl", "--json", str(tmp_path / "report.json")]) == 0

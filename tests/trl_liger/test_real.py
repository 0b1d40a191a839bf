"""Against real TRL 1.12 + liger-kernel 0.8.5 (pip install 'rlconform[trl-liger]').

The shipped baseline (adapters/trl_liger/baselines/trl-liger-<release>.toml) is held to the
run: every declared break is observed (status deviation: no stale entry, no failure outside
it), every other bound clause passes, and every clause the branch does not bind skips.
"""

from __future__ import annotations

import pytest

from rlconform.adapters.trl_liger.manifest import baseline_path
from rlconform.conformance.profiles import get_run_profile
from rlconform.conformance.registry import select
from rlconform.conformance.runner import certify
from tests.trl_liger.conftest import needs_liger

pytestmark = needs_liger

BASELINED = (
    "kl.importance_weighted",
    "loss.ppo_clip",
    "loss.dual_clip",
    "loss.gspo",
    "loss.cispo",
    "loss.sapo",
    "agg.token_mean",
    "agg.seq_mean_token_mean",
    "agg.seq_mean_token_sum",
    "agg.seq_mean_token_sum_norm",
    "step.update",
    "step.metrics",
)
PASSING = ("kl.estimators", "agg.shard_invariance")


@pytest.mark.slow
def test_real_liger_matches_its_baseline(liger):
    assert baseline_path(liger.runtime.release).exists(), liger.runtime.release
    report = certify(liger, select(None), get_run_profile("ci"))
    results = {r.id: r for r in report.clauses}
    for clause_id in BASELINED:
        assert results[clause_id].status == "deviation", (clause_id, results[clause_id].message)
    for clause_id in PASSING:
        assert results[clause_id].status == "pass", (clause_id, results[clause_id].message)
    for result in report.clauses:
        if result.id not in set(BASELINED) | set(PASSING):
            assert result.status == "skip", (result.id, result.status, result.message)


def test_header_names_the_releases_and_the_branch(liger):
    info = liger.describe()
    assert info["bindings"] == "trl-liger-1.11"
    assert info["liger_kernel"] == "0.8.5" and info["liger_compiled"] == "False"
    assert liger.runtime.release in info["binding_releases"] or info["binding_releases"].endswith(
        "1.12.0"
    )

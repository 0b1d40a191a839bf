"""Against real unsloth-zoo 2026.10.9 on TRL 1.15.0 (``pip install --no-deps
unsloth==2026.10.9 && pip install -e '.[dev,unsloth]'``).

The shipped baseline (adapters/unsloth/baselines/unsloth-zoo-<release>.toml) is held to the
run: every declared break is observed (status deviation: no stale entry, no failure outside
it), every other bound clause passes.
"""

from __future__ import annotations

import pytest

from rlconform.adapters.unsloth.manifest import baseline_path
from rlconform.conformance.profiles import get_run_profile
from rlconform.conformance.registry import select
from rlconform.conformance.runner import certify
from tests.unsloth.conftest import needs_unsloth

pytestmark = needs_unsloth

BASELINED = (
    "kl.estimators",
    "loss.ppo_clip",
    "loss.dual_clip",
    "loss.gspo",
    "loss.cispo",
    "loss.sapo",
    "agg.token_mean",
    "agg.seq_mean_token_mean",
    "agg.seq_mean_token_sum",
    "agg.seq_mean_token_sum_norm",
    "agg.shard_invariance",
    "step.update",
    "step.metrics",
)


@pytest.mark.slow
def test_real_unsloth_matches_its_baseline(unsloth):
    assert baseline_path(unsloth.zoo_runtime.release).exists()
    report = certify(unsloth, select(None), get_run_profile("ci"))
    results = {r.id: r for r in report.clauses}
    for clause_id in BASELINED:
        assert results[clause_id].status == "deviation", (clause_id, results[clause_id].message)
    assert not [r.id for r in report.clauses if r.status in ("fail", "error")]

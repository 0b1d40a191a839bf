"""Against real slime: runs when slime is importable or RLCONFORM_SLIME_PATH names a checkout.

The published report (docs/certification/slime-*.md) comes from the same run. The shipped
baseline declares every break observed on the certified commit, so the certification
passes there: no clause fails or errors, and every baseline entry is observed (a stale one
fails its clause). A fork that adds a break, or fixes one, fails here.
"""

from __future__ import annotations

import pytest

from rlconform.conformance.profiles import get_run_profile
from rlconform.conformance.registry import select
from rlconform.conformance.runner import certify
from tests.slime.conftest import real_slime_path, real_slime_skip_reason

pytestmark = pytest.mark.skipif(
    real_slime_skip_reason() is not None, reason=str(real_slime_skip_reason())
)


@pytest.fixture()
def real_target(isolated_imports):
    from rlconform.adapters.slime import load

    return load(framework_path=real_slime_path())


@pytest.mark.slow
def test_real_slime_matches_its_baseline(real_target):
    report = certify(real_target, select(None), get_run_profile("ci"))
    results = {r.id: r for r in report.clauses}
    broken = {r.id: r.message for r in report.clauses if r.status in ("fail", "error")}
    assert not broken, broken
    for clause_id in real_target.deviations:
        assert results[clause_id].status == "deviation", (clause_id, results[clause_id].message)
    assert results["logprob.alignment"].status == "pass"
    assert {row["op"] for row in report.bindings} >= {
        "seqlen_partitions",
        "apply_kl_in_reward",
        "train_step",
    }
    assert {c.name for c in real_target.trainer_configs()} >= {"default", "ppo_gae"}
    for clause_id in ("step.update", "step.metrics", "step.state"):
        assert results[clause_id].status in ("pass", "deviation"), clause_id


def test_real_slime_version_names_the_commit(real_target):
    version = real_target.describe()["version"]
    assert version.split("+")[0] != ""
    if real_slime_path():
        assert "+git." in version


@pytest.mark.slow
@pytest.mark.parametrize("clause_id", ["step.update", "step.metrics", "step.state"])
def test_reference_targets_pass_under_slimes_configs(real_target, clause_id):
    """CONTRACT step: torchref and the oracle pass under the settings of every config slime
    declares (so a slime finding is never the contract's own)."""
    from tests.conftest import assert_reference_targets_pass_under

    assert_reference_targets_pass_under(real_target.trainer_configs(), clause_id)

"""Against real slime: runs when slime is importable or RLCONFORM_SLIME_PATH names a checkout.

The published report (docs/certification/slime-*.md) comes from the same run; here the
manifest is held to it: every declared deviation is observed, every recorded finding
still fails (a fixed finding tells you to update the manifest), the rest passes.
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


def test_real_slime_matches_its_manifest(real_target):
    from rlconform.adapters.slime.manifest import SLIME_DEVIATIONS, SLIME_FINDINGS

    report = certify(real_target, select(None), get_run_profile("ci"))
    results = {r.id: r for r in report.clauses}
    for clause_id in SLIME_DEVIATIONS:
        if clause_id not in SLIME_FINDINGS:  # else it fails outside its declared scope
            assert results[clause_id].status == "deviation", (
                clause_id,
                results[clause_id].message,
            )
    for clause_id in SLIME_FINDINGS:
        assert results[clause_id].status in ("fail", "error"), (
            f"{clause_id} no longer fails: update SLIME_FINDINGS and the published report"
        )
    for result in report.clauses:
        if result.id not in SLIME_DEVIATIONS and result.id not in SLIME_FINDINGS:
            assert result.status in ("pass", "skip"), (result.id, result.status, result.message)
    assert results["logprob.alignment"].status == "pass"


def test_real_slime_version_names_the_commit(real_target):
    version = real_target.describe()["version"]
    assert version.split("+")[0] != ""
    if real_slime_path():
        assert "+git." in version

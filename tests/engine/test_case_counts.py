"""Every clause result records how many distinct cases ran and the §0a features they
covered, for a passing clause too (what a rerun needs: issue 19)."""

from __future__ import annotations

from rlconform.adapters.torchref import TorchRef
from rlconform.conformance.registry import get
from tests.conftest import certify_one
from tests.engine.targets import without_gspo_target


def test_a_passing_clause_records_its_cases_and_the_features_they_covered():
    result = certify_one(TorchRef(), "adv.grpo")
    assert result.status == "pass"
    assert result.cases >= 10
    covered = set(result.covered_features)
    assert {"singleton_group", "unequal_groups", "empty_response"} <= covered
    assert covered <= set(get("adv.grpo").meets) | {"empty_batch", "no_samples"}
    data = result.as_json()
    assert data["cases"] == result.cases and data["covered_features"] == sorted(covered)


def test_a_skipped_clause_ran_no_case():
    result = certify_one(without_gspo_target(), "loss.gspo")
    assert result.status == "skip" and result.cases == 0 and result.covered_features == []

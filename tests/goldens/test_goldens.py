"""Golden snapshots: the oracle's outputs on every fixture case are reviewed artifacts.

A change to the oracle that changes a golden fails here until the snapshot is deliberately
updated (``pytest tests/goldens --snapshot-update``) and reviewed.
"""

from __future__ import annotations

import pytest

from rlconform.fixtures.registry import build_all, encode
from tests.goldens.tolerant_json import TolerantJSONExtension, close

CASES = build_all()


@pytest.fixture
def snapshot_json(snapshot):
    return snapshot.use_extension(TolerantJSONExtension)


@pytest.mark.parametrize("case", CASES, ids=[f"{c.clause}-{c.name}" for c in CASES])
def test_oracle_output_matches_golden(case, snapshot_json):
    assert encode(case.expected) == snapshot_json


def test_tolerant_comparison_is_not_blind():
    assert close({"x": [1.0, 2.0]}, {"x": [1.0, 2.0 + 1e-15]})
    assert not close({"x": [1.0, 2.0]}, {"x": [1.0, 2.0001]})
    assert not close({"x": [1.0]}, {"x": [1.0, 0.0]})
    assert not close({"x": 1.0}, {"y": 1.0})

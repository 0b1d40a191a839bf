"""Shared helpers for rlconform's own tests."""

from __future__ import annotations

import pytest

from rlconform.adapters.base import Target
from rlconform.adapters.oracle_target import OracleTarget
from rlconform.adapters.torchref import TorchRef
from rlconform.conformance.profiles import get_run_profile
from rlconform.conformance.registry import get
from rlconform.conformance.results import ClauseResult
from rlconform.conformance.runner import run_clause


def certify_one(target: Target, clause_id: str, profile: str = "ci") -> ClauseResult:
    """Run one clause against ``target`` with the CI run profile."""
    return run_clause(get(clause_id), target, get_run_profile(profile))


def assert_caught(target: Target, clause_id: str) -> ClauseResult:
    """A broken variant must fail (not error, not pass) on the clause it breaks."""
    result = certify_one(target, clause_id)
    assert result.status == "fail", (
        f"{clause_id}: expected fail, got {result.status}: {result.message}"
    )
    return result


@pytest.fixture(scope="session")
def torchref() -> TorchRef:
    return TorchRef()


@pytest.fixture(scope="session")
def oracle_target() -> OracleTarget:
    return OracleTarget()

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

# the plugin tests run pytest in-process (tests/engine/test_plugin.py)
pytest_plugins = ["pytester"]


def certify_one(
    target: Target, clause_id: str, profile: str = "ci", *, grading: bool = True
) -> ClauseResult:
    """Run one clause against ``target`` with the CI run profile (graded: severity and the
    minimal case of the mildest failing domain, as a report gives them)."""
    return run_clause(get(clause_id), target, get_run_profile(profile), grading=grading)


def assert_reference_targets_pass_under(configs: list, clause_id: str) -> None:
    """CONTRACT step: torchref and the oracle pass ``clause_id`` under the settings of
    ``configs`` (a framework's declared configs: its findings are never the contract's own)."""
    from rlconform.adapters.base import with_overrides

    assert configs
    for base in (TorchRef(), OracleTarget()):
        target = with_overrides(base, trainer_configs=lambda self: configs)
        result = certify_one(target, clause_id)
        assert result.status == "pass", (type(base).__name__, result.message)


def assert_caught(target: Target, clause_id: str) -> ClauseResult:
    """A broken variant must fail (not error, not pass) on the clause it breaks. Ungraded:
    the first failing case as found (no shrinking, no severity); a test that asserts the
    severity or the minimal case uses ``certify_one``."""
    return _assert_fails(certify_one(target, clause_id, grading=False))


def assert_graded(target: Target, clause_id: str) -> ClauseResult:
    """As ``assert_caught``, graded: the result has the severity and the minimal case of the
    mildest failing domain (for tests that assert them)."""
    return _assert_fails(certify_one(target, clause_id))


def _assert_fails(result: ClauseResult) -> ClauseResult:
    assert result.status == "fail", (
        f"{result.id}: expected fail, got {result.status}: {result.message}"
    )
    return result


@pytest.fixture(scope="session")
def torchref() -> TorchRef:
    return TorchRef()


@pytest.fixture(scope="session")
def oracle_target() -> OracleTarget:
    return OracleTarget()

"""Strategies restricted to a domain (CONTRACT §0a) keep generating, and reach their features.

For every registered clause with a strategy and every domain: ~30 cases drawn under
``features.restricted(domain)`` through the runner's domain filter, with hypothesis' health
checks on (a strategy that leaves too much to the filter fails them), each inside the
domain; every feature the clause ``meets`` is reached by the unrestricted run (plus the
pinned examples) or by the search restricted to the feature's domain; and each (clause,
feature) pair is reached by the search restricted to the feature's domain within the ``ci``
budget (``BUDGET_GAPS``: the pairs that are not yet). Drawn as the runner draws, without
the constants of imported local modules (``generation.independent_of_imports``).
"""

from __future__ import annotations

import functools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlconform.adapters.torchref import TorchRef
from rlconform.conformance import features as feats
from rlconform.conformance.generation import independent_of_imports
from rlconform.conformance.registry import (
    get,
    load_all,  # noqa: E402
)
from rlconform.conformance.runner import case_domain, pinned_cases, resolve_strategy

CLAUSES = tuple(c.id for c in load_all().values() if c.strategy is not None)

DRAWS = 30
COVERAGE_DRAWS = 150


def _draw(clause_id: str, domain: str, draws: int) -> list:
    """``draws`` cases of the clause generated at ``domain`` through the runner's filter."""
    clause = get(clause_id)
    strategy = resolve_strategy(clause, TorchRef())
    limit = feats.domain_rank(domain)
    if limit < feats.domain_rank("hardening"):
        strategy = strategy.filter(lambda c: feats.domain_rank(case_domain(clause, c)) <= limit)
    drawn: list = []

    @settings(max_examples=draws, derandomize=True, database=None, deadline=None)
    @given(st.data())
    def collect(data: st.DataObject) -> None:
        drawn.append(data.draw(strategy))

    # as the runner generates: without the constants of whichever local modules this
    # worker happens to have imported (pytest-xdist distributes test files differently
    # from run to run)
    with feats.restricted(domain), independent_of_imports():
        collect()
    return drawn


@pytest.mark.parametrize("domain", feats.DOMAINS)
@pytest.mark.parametrize("clause_id", CLAUSES)
def test_restricted_generation_stays_in_its_domain(clause_id, domain):
    clause = get(clause_id)
    cases = _draw(clause_id, domain, DRAWS)
    assert len(cases) >= DRAWS // 2
    limit = feats.domain_rank(domain)
    outside = [c for c in cases if feats.domain_rank(case_domain(clause, c)) > limit]
    assert not outside, f"{outside[0]!r} has {sorted(clause.features(outside[0]))}"


@pytest.mark.parametrize("clause_id", CLAUSES)
def test_unrestricted_generation_reaches_every_feature_it_meets(clause_id):
    clause = get(clause_id)
    assert not feats.unknown(clause.meets), clause.meets
    reached: set[str] = set()
    for case in _draw(clause_id, "hardening", COVERAGE_DRAWS) + pinned_cases(clause):
        reached |= clause.features(case)
    # a feature the unrestricted draws miss may still be met where its own domain's search
    # reaches it (the per-pair test below): `meets` says what generation produces at all
    for domain in {
        feats.FEATURES[f].domain for f in set(clause.meets) - reached if f in feats.FEATURES
    }:
        reached |= _reached(clause_id, domain)
    assert set(clause.meets) <= reached, f"never reached: {sorted(set(clause.meets) - reached)}"
    undeclared = reached - set(clause.meets)
    assert not undeclared, f"case_features gives features not in meets: {sorted(undeclared)}"


def _ci_budget(clause_id: str) -> int:
    from rlconform.conformance.profiles import get_run_profile

    return max(1, int(get_run_profile("ci").max_examples * get(clause_id).max_examples_scale))


@functools.cache
def _reached(clause_id: str, domain: str) -> frozenset[str]:
    """The features of the ``ci``-budget search at ``domain`` and of the pinned examples in
    it (one draw per clause and domain, shared by its features' tests)."""
    clause = get(clause_id)
    limit = feats.domain_rank(domain)
    pinned = [c for c in pinned_cases(clause) if feats.domain_rank(case_domain(clause, c)) <= limit]
    reached: set[str] = set()
    for case in _draw(clause_id, domain, _ci_budget(clause_id)) + pinned:
        reached |= clause.features(case)
    return frozenset(reached)


# (clause, feature) pairs whose {domain} search does not reach the feature within the ci
# budget today (found by the test below; open in issue 17): the clause meets the feature
# only in the unrestricted search or in thorough runs, so a break that needs it may be
# graded from a later case. Strict: a pair that starts being reached fails until removed.
BUDGET_GAPS: frozenset[str] = frozenset()

PAIRS = tuple(
    (clause_id, feature)
    for clause_id in CLAUSES
    for feature in sorted(get(clause_id).meets)
    if feature in feats.FEATURES
)


def _pair(clause_id: str, feature: str) -> Any:
    name = f"{clause_id}-{feature}"
    if name not in BUDGET_GAPS:
        return pytest.param(clause_id, feature, id=name)
    gap = pytest.mark.xfail(strict=True, reason="not reached within the ci budget (issue 17)")
    return pytest.param(clause_id, feature, id=name, marks=gap)


@pytest.mark.parametrize(("clause_id", "feature"), [_pair(c, f) for c, f in PAIRS])
def test_each_feature_is_reached_within_the_ci_budget_of_its_domain(clause_id, feature):
    """§0a / issue 17: the search restricted to a feature's domain reaches it with the ``ci``
    budget (generated cases plus the pinned examples of that domain), so the severity of a
    break that needs the feature does not depend on which case happened to come first."""
    domain = feats.FEATURES[feature].domain
    assert f"{clause_id}-{feature}" in BUDGET_GAPS or not BUDGET_GAPS - {
        f"{c}-{f}" for c, f in PAIRS
    }, "a budget gap names a pair that no longer exists"
    assert feature in _reached(clause_id, domain), (
        f"{clause_id}: no case of the {domain} search within {_ci_budget(clause_id)} draws "
        f"has {feature}"
    )

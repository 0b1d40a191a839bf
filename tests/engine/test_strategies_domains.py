"""Strategies restricted to a domain (CONTRACT §0a) keep generating, and reach their features.

For every registered clause with a strategy and every domain: ~30 cases drawn under
``features.restricted(domain)`` through the runner's domain filter, with hypothesis' health
checks on (a strategy that leaves too much to the filter fails them), each inside the
domain; and over the unrestricted run (plus the pinned examples) every feature the clause
``meets`` is reached.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlconform.adapters.torchref import TorchRef
from rlconform.conformance import features as feats
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

    with feats.restricted(domain):
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
    assert set(clause.meets) <= reached, f"never reached: {sorted(set(clause.meets) - reached)}"
    undeclared = reached - set(clause.meets)
    assert not undeclared, f"case_features gives features not in meets: {sorted(undeclared)}"

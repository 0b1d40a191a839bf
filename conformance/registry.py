"""Clause registry keyed by CONTRACT ids: ``@clause(...)`` registers one check function."""

from __future__ import annotations

import dataclasses
import fnmatch
import importlib
from collections.abc import Callable, Sequence
from typing import Any

AREAS: tuple[str, ...] = (
    "schema",
    "filter",
    "mask",
    "layout",
    "logprob",
    "entropy",
    "reward",
    "kl",
    "adv",
    "loss",
    "offpolicy",
    "agg",
    "batch",
    "metrics",
    "step",
    "purity",
)

_CLAUSE_MODULES: tuple[str, ...] = (
    "schema",
    "filter",
    "mask",
    "layout",
    "logprob",
    "reward",
    "kl",
    "advantage",
    "loss",
    "offpolicy",
    "aggregate",
    "batch",
    "metrics",
    "step",
    "purity",
)


@dataclasses.dataclass(frozen=True)
class Clause:
    """One contract clause and the check that certifies it.

    ``check(ctx, case)`` raises ``ClauseMismatch`` when the target breaks the clause.
    ``strategy`` (a hypothesis strategy or a callable ``profile -> strategy``) draws
    cases; ``examples`` are pinned boundary cases that always run first. A clause with
    no strategy runs ``check(ctx, None)`` once. ``applies(target)`` returns a reason to
    skip, or None.

    ``checks`` names every assertion inside the check (``with ctx.check(name):``), so a
    report says ``adv.grpo/advantages`` and a deviation can cover one check only; the
    engine adds ``ENGINE_CHECKS``. ``meets`` lists the CONTRACT §0a features this clause's
    cases can have: the generic feature walker's findings are limited to them, and the
    strategy must reach each (tests/engine/test_features.py). ``case_features(case)`` adds
    features the walker cannot see (e.g. a rejection band that removes every token).
    ``prepare(target, device)`` starts what the check will need in the background before
    the run reaches the clause (agg.shard_invariance's gloo worlds), so that its start-up
    overlaps the clauses before it; it must never decide a verdict.
    """

    id: str
    title: str
    statement: str
    ops: tuple[str, ...]
    check: Callable[[Any, Any], None]
    strategy: Any = None
    examples: tuple[Any, ...] = ()
    applies: Callable[[Any], str | None] | None = None
    max_examples_scale: float = 1.0
    checks: tuple[str, ...] = ()
    meets: tuple[str, ...] = ()
    case_features: Callable[[Any], Any] | None = None
    prepare: Callable[[Any, str], None] | None = None

    @property
    def area(self) -> str:
        return self.id.split(".", 1)[0]

    @property
    def all_checks(self) -> tuple[str, ...]:
        """The clause's own checks and the engine's (``runs``, ``no_mutation`` ...)."""
        return self.checks + tuple(c for c in ENGINE_CHECKS if c not in self.checks)

    def features(self, case: Any) -> frozenset[str]:
        """The §0a features of ``case`` as this clause sees them."""
        from rlconform.conformance.features import generic_features

        found = generic_features(case) & frozenset(self.meets)
        if self.case_features is not None:
            found |= frozenset(self.case_features(case))
        return found


# Checks the engine makes on every clause: the operation returns (``runs``: it does not
# raise on a valid input), leaves its inputs bit-identical (``no_mutation``) and gives the
# same output twice on the pinned examples (``deterministic``).
ENGINE_CHECKS: tuple[str, ...] = ("runs", "no_mutation", "deterministic")


_REGISTRY: dict[str, Clause] = {}


def clause(
    id: str,
    *,
    title: str,
    statement: str,
    ops: Sequence[str],
    strategy: Any = None,
    examples: Sequence[Any] = (),
    applies: Callable[[Any], str | None] | None = None,
    max_examples_scale: float = 1.0,
    checks: Sequence[str] = (),
    meets: Sequence[str] = (),
    case_features: Callable[[Any], Any] | None = None,
    prepare: Callable[[Any, str], None] | None = None,
) -> Callable[[Callable[[Any, Any], None]], Callable[[Any, Any], None]]:
    """Register the decorated ``check(ctx, case)`` under the CONTRACT clause ``id``."""

    def register(check: Callable[[Any, Any], None]) -> Callable[[Any, Any], None]:
        if id in _REGISTRY:
            raise ValueError(f"clause {id!r} is registered twice")
        _REGISTRY[id] = Clause(
            id=id,
            title=title,
            statement=" ".join(statement.split()),
            ops=tuple(ops),
            check=check,
            strategy=strategy,
            examples=tuple(examples),
            applies=applies,
            max_examples_scale=max_examples_scale,
            checks=tuple(checks),
            meets=tuple(meets),
            case_features=case_features,
            prepare=prepare,
        )
        return check

    return register


def load_all() -> dict[str, Clause]:
    """Import every clause module once and return the registry, in contract order."""
    for module in _CLAUSE_MODULES:
        importlib.import_module(f"rlconform.conformance.clauses.{module}")
    order = {area: i for i, area in enumerate(AREAS)}
    return dict(sorted(_REGISTRY.items(), key=lambda kv: (order.get(kv[1].area, 99), kv[0])))


def select(pattern: str | None) -> list[Clause]:
    """Clauses whose id matches the glob ``pattern`` (comma-separated globs allowed)."""
    clauses = list(load_all().values())
    if not pattern:
        return clauses
    globs = [p.strip() for p in pattern.split(",") if p.strip()]
    return [c for c in clauses if any(fnmatch.fnmatchcase(c.id, g) for g in globs)]


def get(clause_id: str) -> Clause:
    clauses = load_all()
    if clause_id not in clauses:
        raise KeyError(f"unknown clause {clause_id!r}")
    return clauses[clause_id]

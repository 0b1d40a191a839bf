"""Profile values a deviation can be explained by: the profile keys there are, and for one
clause the legitimate alternatives to a target's values (for baseline models and the
"passes with profile ..." hint; CONTRACT "profile", conformance/baseline.py).

A legitimate alternative is a value that the contract documents for a key the clause's
check reads (``DOCUMENTED``, the choices CONTRACT §2 and the clause modules name), the
contract's default, or the value some shipped adapter's profile gives it: a choice the
contract allows or a certified framework really makes, never a value invented to make a
check pass.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import importlib
from typing import Any

# The profiles of the shipped adapters (module, attribute); none imports its framework.
SHIPPED_PROFILES: tuple[tuple[str, str], ...] = (
    ("rlconform.adapters.verl.profile", "_PROFILE"),
    ("rlconform.adapters.slime.manifest", "SLIME_PROFILE"),
    ("rlconform.adapters.roll.manifest", "PROFILE"),
    ("rlconform.adapters.trl.manifest", "PROFILE"),
    ("rlconform.adapters.openrlhf.manifest", "PROFILE"),
)
_NOT_CHOICES = ("name", "dtype", "extra")
# Choices the contract names for the core profile fields (CONTRACT §2 adv / kl / reward;
# conformance/clauses/advantage.py): std_ddof 0 or 1, a group of one's two conventions ...
DOCUMENTED: dict[str, tuple[Any, ...]] = {
    "grpo_std_ddof": (1, 0),
    "grpo_singleton": ("mean0_std1", "zero"),
    "rloo_singleton": ("score", "zero"),
    "reward_nonaction_tail": ("last_token", "last_action"),
}


@functools.lru_cache(maxsize=1)
def _shipped() -> tuple[Any, ...]:
    return tuple(getattr(importlib.import_module(m), attr) for m, attr in SHIPPED_PROFILES)


@functools.lru_cache(maxsize=1)
def known_keys() -> tuple[str, ...]:
    """Every profile key: the ``Profile`` fields and each ``extra`` key a clause reads."""
    from rlconform.adapters.base import Profile
    from rlconform.conformance.docs import profile_keys
    from rlconform.conformance.registry import load_all

    keys = {f.name for f in dataclasses.fields(Profile)} - set(_NOT_CHOICES)
    for clause in load_all().values():
        keys |= set(profile_keys(clause))
    return tuple(sorted(keys))


def _hashable(value: Any) -> bool:
    return isinstance(value, (bool, int, float, str))


def alternatives(clause: Any, profile: Any) -> list[tuple[str, Any]]:
    """(key, value) pairs, one key at a time, that differ from ``profile`` for the keys the
    clause reads: the contract default and every shipped adapter's value."""
    from rlconform.conformance.docs import profile_keys

    out: list[tuple[str, Any]] = []
    for key, default_text in profile_keys(clause).items():
        values: list[Any] = []
        try:
            values.append(ast.literal_eval(default_text))
        except (ValueError, SyntaxError):
            pass
        values += list(DOCUMENTED.get(key, ()))
        values += [p.get(key) for p in _shipped() if p.get(key) is not None or key in p.extra]
        mine = profile.get(key, values[0] if values else None)
        for value in values:
            if not _hashable(value) or value == mine or (key, value) in out:
                continue
            out.append((key, value))
    return out

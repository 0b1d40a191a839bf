"""Deviation scopes: which cases a declared deviation covers.

A manifest entry may be a plain rationale (the whole clause deviates) or a
``Deviation(rationale, scope=("padding_garbage", ...))``. With a scope, the runner checks
twice: the clause must fail somewhere (the deviation is observed) and must pass on every
case outside the scope — so a new, undeclared break in the same clause still fails.

Each scope is a predicate over a case (plain data). Predicates walk the case generically:
``pad_value`` keys, and per-sample ``mask`` lists under ``samples``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any


def _walk(value: Any) -> Iterator[tuple[str | None, Any]]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield key, item
            yield from _walk(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _walk(item)


def _sample_masks(case: Any) -> list[list[Any]]:
    masks = []
    for key, item in _walk(case):
        if key == "samples" and isinstance(item, list):
            for sample in item:
                if isinstance(sample, dict):
                    mask = sample.get("mask", sample.get("loss_mask"))
                    if isinstance(mask, list):
                        masks.append(mask)
    return masks


def padding_garbage(case: Any) -> bool:
    """The harness fills padding with something other than 0 (NaN, inf or garbage)."""
    return any(
        key == "pad_value" and isinstance(item, (int, float)) and item != 0
        for key, item in _walk(case)
    ) or any(
        key == "pad_value" and isinstance(item, float) and math.isnan(item)
        for key, item in _walk(case)
    )


def empty_response(case: Any) -> bool:
    """Some sample has L_i = 0."""
    return any(len(mask) == 0 for mask in _sample_masks(case))


def mask_holes(case: Any) -> bool:
    """Some sample has a mask-0 token (a tool observation) inside its response."""
    return any(0 in mask for mask in _sample_masks(case))


def empty_batch(case: Any) -> bool:
    """No sample, or no action token in the whole batch."""
    masks = _sample_masks(case)
    return not masks or not any(any(mask) for mask in masks)


SCOPES: dict[str, Callable[[Any], bool]] = {
    "padding_garbage": padding_garbage,
    "empty_response": empty_response,
    "mask_holes": mask_holes,
    "empty_batch": empty_batch,
}


def in_scope(scope: tuple[str, ...], case: Any) -> bool:
    """True when ``case`` has any feature the scope names."""
    return any(SCOPES[name](case) for name in scope)


def no_action_sample(case: Any) -> bool:
    """Some sample has no action token (L_i = 0, or every mask entry 0)."""
    return any(not any(mask) for mask in _sample_masks(case))


SCOPES["no_action_sample"] = no_action_sample

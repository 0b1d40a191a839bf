"""Deviation scopes: which cases a declared deviation covers.

A manifest entry may be a plain rationale (the whole clause deviates) or a
``Deviation(rationale, scope=("padding_garbage", ...))``. With a scope, the runner checks
twice: the clause must fail somewhere (the deviation is observed) and must pass on every
case outside the scope — so a new, undeclared break in the same clause still fails.

Each scope is a predicate over a case (plain data). Predicates walk the case generically:
``pad_value`` keys, per-sample ``mask`` lists under ``samples``, attention-mask ``rows``
with the case's ``response_width``, and ratio-bound keys (``low``, ``clip_min``...). A scope that covers
every case a clause can generate is a whole-clause deviation in disguise: declare the
narrowest scope that is true.
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


def actionless_sample(case: Any) -> bool:
    """Some sample has no action token: L_i = 0, or every token of it is a hole."""
    return any(not any(mask) for mask in _sample_masks(case))


def empty_batch(case: Any) -> bool:
    """No sample, or no action token in the whole batch."""
    masks = _sample_masks(case)
    return not masks or not any(any(mask) for mask in masks)


def _is_run(values: list[Any], first: int, second: int) -> bool:
    """values is ``first...first second...second`` (either run may be empty)."""
    switched = False
    for value in values:
        if value == second:
            switched = True
        elif value != first or switched:
            return False
    return True


def layout_violation(case: Any) -> bool:
    """An attention-mask row (``attention`` under ``rows``, split by the case's
    ``response_width``) whose prompt part is not left-padded (``0...0 1...1``) or whose
    response part is not right-padded (``1...1 0...0``)."""
    for key, item in _walk(case):
        if key != "rows" or not isinstance(item, list):
            continue
        for row in item:
            attention = row.get("attention") if isinstance(row, dict) else None
            if not isinstance(attention, list):
                continue
            width = case.get("response_width", 0) if isinstance(case, dict) else 0
            split = len(attention) - width
            if not (_is_run(attention[:split], 0, 1) and _is_run(attention[split:], 1, 0)):
                return True
    return False


def zero_width_response(case: Any) -> bool:
    """The case's padded response width (``response_width``) is 0."""
    return any(key == "response_width" and item == 0 for key, item in _walk(case))


def truncated_sample(case: Any) -> bool:
    """Some sample was truncated (``terminated`` false) and carries a ``bootstrap`` value."""
    return any(
        isinstance(sample, dict) and sample.get("terminated") is False and "bootstrap" in sample
        for key, item in _walk(case)
        if key == "samples" and isinstance(item, list)
        for sample in item
    )


def empty_shard(case: Any) -> bool:
    """The case splits its batch into shards (``shards``: sizes) and one of them is empty."""
    return any(
        key == "shards" and isinstance(item, list) and 0 in item for key, item in _walk(case)
    )


def lower_ratio_bound(case: Any) -> bool:
    """The case asks for a positive lower bound on an importance ratio (a ``low``,
    ``clip_low`` or ``clip_min`` key above 0)."""
    return any(
        key in ("low", "clip_low", "clip_min") and isinstance(item, (int, float)) and item > 0
        for key, item in _walk(case)
    )


def sampling_truncation(case: Any) -> bool:
    """The case samples from a truncated support: ``top_k`` above 0 or ``top_p`` below 1."""
    return any(
        (key == "top_k" and isinstance(item, int) and item > 0)
        or (key == "top_p" and isinstance(item, (int, float)) and item < 1)
        for key, item in _walk(case)
    )


def no_tokens(case: Any) -> bool:
    """For cases whose samples carry ``tokens`` instead of masks: no sample, or every
    sample's ``tokens`` list is empty (not one response token in the batch)."""
    found = False
    for key, item in _walk(case):
        if key == "samples" and isinstance(item, list):
            found = True
            if any(isinstance(s, dict) and s.get("tokens") for s in item):
                return False
    return found


SCOPES: dict[str, Callable[[Any], bool]] = {
    "padding_garbage": padding_garbage,
    "empty_response": empty_response,
    "mask_holes": mask_holes,
    "empty_batch": empty_batch,
    "actionless_sample": actionless_sample,
    "layout_violation": layout_violation,
    "zero_width_response": zero_width_response,
    "lower_ratio_bound": lower_ratio_bound,
    "truncated_sample": truncated_sample,
    "empty_shard": empty_shard,
    "sampling_truncation": sampling_truncation,
    "no_tokens": no_tokens,
}


def in_scope(scope: tuple[str, ...], case: Any) -> bool:
    """True when ``case`` has any feature the scope names."""
    return any(SCOPES[name](case) for name in scope)


def no_action_sample(case: Any) -> bool:
    """Some sample has no action token (L_i = 0, or every mask entry 0)."""
    return any(not any(mask) for mask in _sample_masks(case))


SCOPES["no_action_sample"] = no_action_sample

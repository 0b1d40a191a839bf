"""Hypothesis strategies for ragged rollout cases (CONTRACT §3).

A case is plain data (dicts, lists, floats) so that it shrinks well and prints as a
copy-pasteable literal. A batch is a list of per-sample dicts; masks are built from
lengths and hole positions, never by filtering. Boundary classes the contract names are
reachable here and pinned as ``@example``s by the clauses: uneven lengths, L_i = 0 and
L_i = max, mask holes, garbage/NaN padding, singleton and partial groups, all-equal and
nearly-equal rewards, extreme log-ratios, empty batches.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

MAX_LEN = 6

PAD_VALUES = (0.0, float("nan"), float("inf"), -1e30, 7.5)


def pad_values() -> st.SearchStrategy[float]:
    """What the harness writes into padding: zero, NaN, inf or garbage."""
    return st.sampled_from(PAD_VALUES)


def lengths(max_len: int = MAX_LEN, min_len: int = 0) -> st.SearchStrategy[int]:
    """Response lengths, including 0 and ``max_len``."""
    return st.integers(min_len, max_len)


def finite(lo: float = -5.0, hi: float = 5.0) -> st.SearchStrategy[float]:
    return st.floats(lo, hi, allow_nan=False, allow_infinity=False, width=32)


@st.composite
def loss_mask(draw: Any, length: int, holes: bool = True, min_actions: int = 0) -> list[int]:
    """A per-token 0/1 mask of ``length``; holes model tool observations mid-response."""
    if length == 0:
        return []
    if not holes:
        return [1] * length
    mask = draw(st.lists(st.sampled_from([1, 1, 1, 0]), min_size=length, max_size=length))
    if sum(mask) < min_actions:
        mask = [1] * min(length, max(min_actions, 1)) + mask[min(length, max(min_actions, 1)) :]
    return mask


@st.composite
def rewards(draw: Any, n: int) -> list[float]:
    """Scalar rewards for ``n`` samples: general, all-equal, or nearly equal (1.0 vs 1.00001)."""
    kind = draw(st.sampled_from(["general", "binary", "equal", "near_equal"]))
    if kind == "equal":
        value = draw(finite(-2, 2))
        return [value] * n
    if kind == "near_equal":
        return [draw(st.sampled_from([1.0, 1.00001])) for _ in range(n)]
    if kind == "binary":
        return [draw(st.sampled_from([0.0, 1.0])) for _ in range(n)]
    return [draw(finite(-3, 3)) for _ in range(n)]


@st.composite
def group_labels(draw: Any, n: int) -> list[str]:
    """Group labels for ``n`` samples: singleton, partial and interleaved groups."""
    n_groups = draw(st.integers(1, max(1, n)))
    return [f"g{draw(st.integers(0, n_groups - 1))}" for _ in range(n)]


@st.composite
def token_batch(
    draw: Any,
    *,
    fields: tuple[str, ...] = ("values",),
    min_samples: int = 1,
    max_samples: int = 5,
    max_len: int = MAX_LEN,
    min_len: int = 0,
    lo: float = -5.0,
    hi: float = 5.0,
    holes: bool = True,
    with_groups: bool = False,
    with_rewards: bool = False,
) -> dict[str, Any]:
    """A ragged batch: per sample a uid, a length, a loss mask and per-token float fields."""
    n = draw(st.integers(min_samples, max_samples))
    groups = draw(group_labels(n)) if with_groups else None
    scores = draw(rewards(n)) if with_rewards else None
    samples = []
    for i in range(n):
        length = draw(lengths(max_len, min_len))
        sample: dict[str, Any] = {"uid": f"s{i}", "mask": draw(loss_mask(length, holes))}
        for field in fields:
            sample[field] = draw(st.lists(finite(lo, hi), min_size=length, max_size=length))
        if groups is not None:
            sample["group"] = groups[i]
        if scores is not None:
            sample["reward"] = scores[i]
        samples.append(sample)
    return {
        "samples": samples,
        "pad_value": draw(pad_values()),
        "extra_pad": draw(st.integers(0, 2)),
    }


def lengths_of(case: dict[str, Any]) -> list[int]:
    """L_i for each sample of a ``token_batch`` case."""
    return [len(s["mask"]) for s in case["samples"]]


def uids_of(case: dict[str, Any]) -> list[Any]:
    return [s["uid"] for s in case["samples"]]


def width_of_case(case: dict[str, Any]) -> int:
    """Padded width: the longest response plus the case's extra right padding."""
    return max(lengths_of(case), default=0) + case.get("extra_pad", 0)

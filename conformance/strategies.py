"""Hypothesis strategies for ragged rollout cases (CONTRACT §3).

A case is plain data (dicts, lists, floats) so that it shrinks well and prints as a
copy-pasteable literal. A batch is a list of per-sample dicts; masks are built from
lengths and hole positions, never by filtering. Boundary classes the contract names are
reachable here and pinned as ``@example``s by the clauses: uneven lengths, L_i = 0 and
L_i = max, mask holes, garbage/NaN padding, singleton and partial groups, all-equal and
nearly-equal rewards, extreme log-ratios, empty batches.

Every primitive reads the domain generation is restricted to (CONTRACT §0a,
``features.restricted``) when it draws, and leaves out what that domain excludes, so that
a clause explored on the nominal domain gets nominal cases without starving a filter:
no NaN/inf or huge padding below ``hardening``, no L_i = 0, action-less samples,
singleton groups or equal scores below ``edge``.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from rlconform.conformance.features import allows

MAX_LEN = 6

PAD_VALUES = (0.0, float("nan"), float("inf"), -1e30, 7.5)
# What a model computes at padding or mask-0 positions of an ordinary batch: finite numbers.
FINITE_PAD_VALUES = (0.0, 7.5, -3.25)
# Finite garbage at mask-0 positions (a tool observation's value, log-prob or entropy).
HOLE_VALUES = (0.0, 2.5, -4.0)
HARDENING_HOLE_VALUES = (1000.0, float("nan"), float("-inf"))


def pad_values() -> st.SearchStrategy[float]:
    """What the harness writes into padding: zero or finite garbage, and (hardening) NaN,
    inf or a huge value."""
    return st.sampled_from(PAD_VALUES if allows("hardening") else FINITE_PAD_VALUES)


def reward_pad_values() -> st.SearchStrategy[float]:
    """What the harness writes into the padding of token rewards: 0, and (hardening) a
    nonzero or NaN reward where a correct upstream never puts one."""
    if allows("hardening"):
        return st.sampled_from((0.0, 0.0, 0.0, 7.5, float("nan")))
    return st.just(0.0)


def hole_values() -> st.SearchStrategy[float]:
    """Values at mask-0 positions: finite garbage, and (hardening) huge or non-finite."""
    if allows("hardening"):
        return st.sampled_from(HOLE_VALUES + HARDENING_HOLE_VALUES)
    return st.sampled_from(HOLE_VALUES)


def lengths(max_len: int = MAX_LEN, min_len: int = 0) -> st.SearchStrategy[int]:
    """Response lengths, including 0 (edge) and ``max_len``."""
    return st.integers(min_len if allows("edge") else max(min_len, 1), max_len)


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
    if not allows("edge"):
        min_actions = max(min_actions, 1)  # an action-less sample is an edge case
    if sum(mask) < min_actions:
        mask = [1] * min(length, max(min_actions, 1)) + mask[min(length, max(min_actions, 1)) :]
    return mask


@st.composite
def rewards(draw: Any, n: int, labels: list[Any] | None = None) -> list[float]:
    """Scalar rewards for ``n`` samples: general, binary, and (edge) all-equal or nearly
    equal (1.0 vs 1.00001). Below the edge domain no group of ``labels`` (the whole batch
    without labels) has all-equal scores: one member is moved off the common value."""
    kinds = ["general", "binary"] + (["equal", "near_equal"] if allows("edge") else [])
    kind = draw(st.sampled_from(kinds))
    if kind == "equal":
        value = draw(finite(-2, 2))
        return [value] * n
    if kind == "near_equal":
        return [draw(st.sampled_from([1.0, 1.00001])) for _ in range(n)]
    if kind == "binary":
        values = [draw(st.sampled_from([0.0, 1.0])) for _ in range(n)]
    else:
        values = [draw(finite(-3, 3)) for _ in range(n)]
    if not allows("edge"):
        separate_equal_groups(values, labels if labels is not None else [0] * n)
    return values


def separate_equal_groups(values: list[float], labels: list[Any]) -> None:
    """Make every group of two or more distinct (in place): an all-equal group is edge."""
    members: dict[Any, list[int]] = {}
    for i, label in enumerate(labels):
        members.setdefault(label, []).append(i)
    for group in members.values():
        if len(group) < 2:
            continue
        first = values[group[0]]
        if all(abs(values[i] - first) <= 1e-3 * max(1.0, abs(first)) for i in group):
            values[group[-1]] = first + 1.0


@st.composite
def group_labels(draw: Any, n: int) -> list[str]:
    """Group labels for ``n`` samples: partial and interleaved groups, and (edge) groups of
    one. Below the edge domain every group has at least two members (when n >= 2)."""
    if not allows("edge") and n >= 2:
        n_groups = draw(st.integers(1, n // 2))
        labels = [f"g{g}" for g in range(n_groups)] * 2
        labels += [f"g{draw(st.integers(0, n_groups - 1))}" for _ in range(n - len(labels))]
        return list(draw(st.permutations(labels)))
    n_groups = draw(st.integers(1, max(1, n)))
    return [f"g{draw(st.integers(0, n_groups - 1))}" for _ in range(n)]


def fewest_samples(lowest: int = 0) -> int:
    """The fewest samples a batch may have now: 0 (no samples) is an edge case."""
    return lowest if allows("edge") else max(lowest, 1)


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
    """A ragged batch: per sample a uid, a length, a loss mask and per-token float fields
    (finite in [lo, hi] on action tokens, ``hole_values`` garbage at mask-0 positions)."""
    fewest = max(min_samples, 2) if with_groups and not allows("edge") else min_samples
    n = draw(st.integers(fewest, max(fewest, max_samples)))
    groups = draw(group_labels(n)) if with_groups else None
    scores = draw(rewards(n, groups)) if with_rewards else None
    samples = []
    for i in range(n):
        length = draw(lengths(max_len, min_len))
        sample: dict[str, Any] = {"uid": f"s{i}", "mask": draw(loss_mask(length, holes))}
        for field in fields:
            sample[field] = [
                draw(finite(lo, hi)) if m else draw(hole_values()) for m in sample["mask"]
            ]
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

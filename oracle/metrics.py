"""Oracle for the CONTRACT area `metrics` (standard library only, ragged lists, float64).

Bootstrap statistics (best@n, worst@n, maj@n) are given exactly: the expectation and the
standard deviation, over all draws of n samples with replacement, of the statistic of one
draw. An implementation that estimates them by a seeded bootstrap is judged against these
with a tolerance derived from the standard deviation and its number of draws.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

from rlconform.oracle.errors import ContractError


def response_length_metrics(lengths: list[int], max_length: int) -> dict[str, float | None]:
    """metrics.response_length: length statistics with and without aborted samples.

    ``response_length/*`` are over all samples, aborted ones (L = 0) included;
    ``response_length_non_aborted/*`` over samples with L > 0 (None when there is none);
    clip_ratio = share of samples with L == max_length; aborted_ratio = share with L == 0.
    """
    if not lengths:
        raise ContractError("metrics.response_length", "no samples")
    for i, length in enumerate(lengths):
        if not 0 <= length <= max_length:
            raise ContractError(
                "metrics.response_length", f"length {length} outside 0..{max_length}", uid=i
            )
    non_aborted = [length for length in lengths if length > 0]
    out: dict[str, float | None] = {
        "response_length/mean": math.fsum(lengths) / len(lengths),
        "response_length/max": float(max(lengths)),
        "response_length/min": float(min(lengths)),
        "response_length/clip_ratio": sum(1 for x in lengths if x == max_length) / len(lengths),
        "response/aborted_ratio": sum(1 for x in lengths if x == 0) / len(lengths),
    }
    for stat in ("mean", "max", "min", "clip_ratio"):
        out[f"response_length_non_aborted/{stat}"] = None
    if non_aborted:
        out["response_length_non_aborted/mean"] = math.fsum(non_aborted) / len(non_aborted)
        out["response_length_non_aborted/max"] = float(max(non_aborted))
        out["response_length_non_aborted/min"] = float(min(non_aborted))
        out["response_length_non_aborted/clip_ratio"] = sum(
            1 for x in non_aborted if x == max_length
        ) / len(non_aborted)
    return out


def group_by_uid(uids: list[Any]) -> dict[Any, list[int]]:
    """metrics.validation_at_n: sample indices per uid, uids and indices in first-seen order."""
    groups: dict[Any, list[int]] = {}
    for i, uid in enumerate(uids):
        groups.setdefault(uid, []).append(i)
    return groups


def mean_at_n(values: list[float]) -> float:
    """metrics.validation_at_n: mean@N = sum(v) / N."""
    if not values:
        raise ContractError("metrics.validation_at_n", "mean@N of no values")
    return math.fsum(values) / len(values)


def std_at_n(values: list[float]) -> float:
    """metrics.validation_at_n: std@N = sqrt(sum((v - mean)^2) / N) (ddof 0), only for N > 1."""
    if len(values) < 2:
        raise ContractError("metrics.validation_at_n", "std@N is reported only when N > 1")
    mean = mean_at_n(values)
    return math.sqrt(math.fsum((v - mean) ** 2 for v in values) / len(values))


def _moments(outcomes: list[tuple[float, float]]) -> tuple[float, float]:
    """Mean and population std of a discrete distribution given as (probability, value)."""
    mean = math.fsum(p * x for p, x in outcomes)
    var = math.fsum(p * (x - mean) ** 2 for p, x in outcomes)
    return mean, math.sqrt(max(var, 0.0))


def best_at_n(values: list[float], n: int) -> tuple[float, float]:
    """metrics.validation_at_n: E and std of max(v_i1..v_in), indices drawn with replacement.

    With v sorted ascending, P(max is the j-th smallest, 1-based) = (j/N)^n - ((j-1)/N)^n.
    """
    ordered = sorted(values)
    size = len(ordered)
    outcomes = [
        ((j / size) ** n - ((j - 1) / size) ** n, ordered[j - 1]) for j in range(1, size + 1)
    ]
    return _moments(outcomes)


def worst_at_n(values: list[float], n: int) -> tuple[float, float]:
    """metrics.validation_at_n: E and std of min(v_i1..v_in), indices drawn with replacement.

    With v sorted ascending, P(min is the j-th smallest) = ((N-j+1)/N)^n - ((N-j)/N)^n.
    """
    ordered = sorted(values)
    size = len(ordered)
    outcomes = [
        (((size - j + 1) / size) ** n - ((size - j) / size) ** n, ordered[j - 1])
        for j in range(1, size + 1)
    ]
    return _moments(outcomes)


def majority_value(preds: list[Any], values: list[float], tie: str = "first_seen") -> float:
    """metrics.validation_at_n: the value of the majority prediction.

    ``tie`` (profile ``validation_maj_tie``): ``"first_seen"`` (verl) = among the most
    frequent predictions the one appearing first wins, and the value reported is that of
    its first occurrence.
    """
    if tie != "first_seen":
        raise ContractError("metrics.validation_at_n", f"unknown maj tie convention {tie!r}")
    counts: dict[Any, int] = {}
    for pred in preds:
        counts[pred] = counts.get(pred, 0) + 1
    top = max(counts.values())
    winner = next(pred for pred, count in counts.items() if count == top)
    return float(values[preds.index(winner)])


def maj_at_n(
    preds: list[Any], values: list[float], n: int, tie: str = "first_seen"
) -> tuple[float, float]:
    """metrics.validation_at_n: E and std of the majority value of n draws with replacement.

    Enumerates every ordered draw (N^n of them, equally likely): fine for test sizes.
    """
    size = len(values)
    outcomes = []
    for draw in itertools.product(range(size), repeat=n):
        picked = majority_value([preds[i] for i in draw], [values[i] for i in draw], tie)
        outcomes.append((1.0 / size**n, picked))
    return _moments(outcomes)


def reduce_metric(key: str, values: list[float]) -> float:
    """metrics.reduce: by key substring, "max" in key -> max, else "min" in key -> min, else mean."""
    if not values:
        raise ContractError("metrics.reduce", "no values to reduce", field=key)
    if "max" in key:
        return float(max(values))
    if "min" in key:
        return float(min(values))
    return math.fsum(values) / len(values)


def token_accounting(lengths: list[int], keep: list[bool]) -> dict[str, int]:
    """metrics.token_accounting: generated = sum L_i; kept = sum over kept samples; discarded = rest."""
    if len(lengths) != len(keep):
        raise ContractError("metrics.token_accounting", "lengths and keep flags differ in count")
    generated = sum(lengths)
    kept = sum(length for length, k in zip(lengths, keep, strict=True) if k)
    return {"generated": generated, "kept": kept, "discarded": generated - kept}

"""Clauses of the CONTRACT area `metrics`: response-length statistics, validation @N
metrics, key-based reduction of logged metrics, token accounting after filtering."""

from __future__ import annotations

import math
import re
from typing import Any

import torch
from hypothesis import strategies as st

from rlconform.conformance import strategies as cs
from rlconform.conformance.compare import assert_equal, assert_scalar_close
from rlconform.conformance.errors import ClauseMismatch
from rlconform.conformance.features import allows, generic_features
from rlconform.conformance.harness import right_mask, to_float_list
from rlconform.conformance.registry import clause
from rlconform.oracle import metrics as oracle


def _mismatch(clause_id: str, message: str, check: str, **detail: Any) -> ClauseMismatch:
    return ClauseMismatch(f"[{clause_id}] {message}", detail=detail, check=check)


def _number(value: Any) -> float:
    return float(value.item() if isinstance(value, torch.Tensor) else value)


# ---- metrics.response_length -----------------------------------------------------------


@st.composite
def _length_case(draw: Any) -> dict:
    """Lengths up to the maximum (clipped samples); (edge) aborted samples (L = 0)."""
    max_length = draw(st.integers(1, 6))
    boundaries = [0, max_length] if allows("edge") else [max_length]
    length = st.sampled_from(boundaries) | cs.lengths(max_length)
    return {"lengths": draw(st.lists(length, min_size=1, max_size=5)), "max_length": max_length}


_LENGTH_FEATURES = ("empty_response", "empty_batch", "truncated_sample", "extra_padding")


def _length_features(case: dict) -> frozenset[str]:
    """Aborted samples (L = 0), clipped ones (L = T: truncated), T above the longest."""
    width = case["max_length"]
    samples = [{"mask": [1] * n, "truncated": n == width} for n in case["lengths"]]
    view = {"samples": samples, "response_width": width}
    return generic_features(view) & frozenset(_LENGTH_FEATURES)


def _length_check(key: str) -> str:
    """The check of one length metric."""
    if key.endswith("clip_ratio"):
        return "clip_ratio"
    if key == "response/aborted_ratio":
        return "aborted_ratio"
    return "non_aborted" if key.startswith("response_length_non_aborted/") else "all_samples"


_LENGTH_EXAMPLES = (
    # verl's example: T = 4, one aborted row: mean 13/6 vs non-aborted 13/5; clip 1/6 vs 1/5.
    {"lengths": [3, 4, 1, 2, 0, 3], "max_length": 4},
    # Every sample aborted: only the all-sample statistics are defined.
    {"lengths": [0, 0], "max_length": 3},
    # Every sample clipped at the maximum length.
    {"lengths": [5, 5, 5], "max_length": 5},
    # Nothing reaches the maximum length (width wider than any response).
    {"lengths": [1, 0, 2], "max_length": 6},
)


@clause(
    "metrics.response_length",
    title="Response-length metrics with and without aborted samples",
    statement="""From the (B, T) response mask (L_i = row sum, maximum length T):
    response_length/{mean,max,min} over all samples, aborted ones (L = 0) included;
    response_length_non_aborted/{mean,max,min} over samples with L > 0;
    response_length/clip_ratio and response_length_non_aborted/clip_ratio = share of the
    respective samples with L == T; response/aborted_ratio = share with L == 0. When every
    sample is aborted the non-aborted statistics are not constrained.""",
    ops=("response_length_metrics",),
    strategy=_length_case(),
    examples=_LENGTH_EXAMPLES,
    checks=("keys", "all_samples", "non_aborted", "clip_ratio", "aborted_ratio"),
    meets=_LENGTH_FEATURES,
    case_features=_length_features,
)
def check_response_length(ctx: Any, case: dict) -> None:
    lengths, max_length = case["lengths"], case["max_length"]
    expected = oracle.response_length_metrics(lengths, max_length)
    response_mask = right_mask(lengths, max_length, ctx.device)
    actual = ctx.call("response_length_metrics", response_mask)
    missing = [key for key, value in expected.items() if value is not None and key not in actual]
    if missing:
        raise _mismatch(
            "metrics.response_length",
            f"metric(s) {missing} missing; got keys {sorted(actual)}",
            "keys",
            what=missing[0],
            expected="present",
            actual=None,
        )
    for key, value in expected.items():
        if value is None:
            continue
        with ctx.check(_length_check(key)):
            assert_scalar_close(
                "metrics.response_length",
                key,
                value,
                _number(actual[key]),
                tolerance=ctx.tolerance,
                scale=max_length,
            )


# ---- metrics.validation_at_n -----------------------------------------------------------

_BOOTSTRAP_KEY = re.compile(r"^(best|worst|maj)@(\d+)/mean$")
_CONFIDENCE = 1e-6
_MAJ_ENUMERATION_LIMIT = 200_000


def bootstrap_allowance(std: float, spread: float, draws: int | None) -> float:
    """Sampling tolerance of a mean over ``draws`` bootstrap statistics (Bernstein bound).

    |estimate - E| <= sqrt(2 std^2 t / draws) + 2 spread t / (3 draws), t = ln(2 / delta),
    holds with probability >= 1 - delta (delta = 1e-6) for statistics within a range of
    width ``spread`` (max - min of the uid's values). ``draws`` None: exact values are required.
    """
    if not draws:
        return 0.0
    t = math.log(2.0 / _CONFIDENCE)
    return math.sqrt(2.0 * std * std * t / draws) + 2.0 * spread * t / (3.0 * draws)


@st.composite
def _validation_case(draw: Any) -> dict:
    """Uids with N samples each (uneven N), binary or general values; (edge) N = 1 and a uid
    whose values are all equal."""
    n_uids = draw(st.integers(1, 3))
    kinds = ["binary", "general"] + (["equal"] if allows("edge") else [])
    kind = draw(st.sampled_from(kinds))
    samples = []
    fewest = 1 if allows("edge") else 2
    for u in range(n_uids):
        size = draw(st.integers(fewest, 5 if n_uids == 1 else 3))
        common = draw(cs.finite(-3, 3))
        values = []
        for _ in range(size):
            if kind == "binary":
                values.append(draw(st.sampled_from([0.0, 1.0])))
            elif kind == "equal":
                values.append(common)
            else:
                values.append(draw(cs.finite(-3, 3)))
        if not allows("edge"):
            cs.separate_equal_groups(values, [u] * size)
        samples += [
            {"uid": f"p{u}", "value": v, "pred": draw(st.sampled_from("ABC"))} for v in values
        ]
    order = draw(st.permutations(list(range(len(samples)))))
    return {
        "samples": [samples[i] for i in order],
        "with_pred": draw(st.booleans()),
        "seed": draw(st.integers(0, 2**16)),
    }


_VALIDATION_FEATURES = ("singleton_group", "unequal_groups", "equal_scores")


def _validation_features(case: dict) -> frozenset[str]:
    """The uids are the groups and the values their scores."""
    samples = [{"mask": [1], "group": s["uid"], "reward": s["value"]} for s in case["samples"]]
    return generic_features({"samples": samples}) & frozenset(_VALIDATION_FEATURES)


def _samples(uid: str, values: list[float], preds: str) -> list[dict]:
    return [{"uid": uid, "value": v, "pred": p} for v, p in zip(values, preds, strict=True)]


_VALIDATION_EXAMPLES = (
    # verl's example: [1, 0, 1, 1, 0] gives mean@5 0.6, std@5 0.4899 (ddof 0; ddof 1 gives
    # 0.5477); best@2 = 1 - 0.4^2 = 0.84; interleaved with a uid of 3 samples and one of 1.
    {
        "samples": [
            {"uid": "p1", "value": 1.0, "pred": "A"},
            {"uid": "p2", "value": 0.0, "pred": "B"},
            {"uid": "p1", "value": 0.0, "pred": "B"},
            {"uid": "p1", "value": 1.0, "pred": "A"},
            {"uid": "p2", "value": 1.0, "pred": "B"},
            {"uid": "p1", "value": 1.0, "pred": "C"},
            {"uid": "p3", "value": 1.0, "pred": "A"},
            {"uid": "p2", "value": 0.0, "pred": "A"},
            {"uid": "p1", "value": 0.0, "pred": "B"},
        ],
        "with_pred": True,
        "seed": 42,
    },
    # maj ties: votes A, B once each; the first seen wins and reports its first value.
    {"samples": _samples("p0", [1.0, 0.0], "AB"), "with_pred": True, "seed": 0},
    # All-equal values: zero spread, every statistic equals the value.
    {"samples": _samples("p0", [0.5, 0.5, 0.5, 0.5], "ABCA"), "with_pred": False, "seed": 7},
    # N = 1: mean@1 only; no std@1.
    {
        "samples": _samples("p0", [2.5], "A") + _samples("p1", [-1.0], "B"),
        "with_pred": False,
        "seed": 1,
    },
)


def _expected_bootstrap(
    kind: str, values: list[float], preds: list[Any] | None, n: int, tie: str
) -> tuple[float, float] | None:
    if kind == "best":
        return oracle.best_at_n(values, n)
    if kind == "worst":
        return oracle.worst_at_n(values, n)
    if preds is None or len(values) ** n > _MAJ_ENUMERATION_LIMIT:
        return None
    return oracle.maj_at_n(preds, values, n, tie)


@clause(
    "metrics.validation_at_n",
    title="Validation metrics per uid of N samples: mean@N, std@N, best/worst/maj@n",
    statement="""Per uid with N samples: mean@N = mean of the values; std@N = population
    std (ddof 0), reported only when N > 1 (absent when N = 1). best@n/mean, worst@n/mean
    and maj@n/mean are the expected max, min and majority-vote value of n samples drawn
    with replacement; required for n = N when N > 1 (maj only when predictions are given),
    and checked for every other n reported. An implementation estimating them by a seeded
    bootstrap must lie within the sampling tolerance of the exact expectation: a Bernstein
    bound from the statistic's std, the values' range and the number of bootstrap draws,
    profile `validation_n_bootstrap` (default 1000, verl; None = exact). Majority ties:
    profile `validation_maj_tie` (default "first_seen", verl: among the most frequent
    predictions the one drawn first wins, and its first drawn value is reported; over all
    draws this has the expectation of a uniformly random tie-break, so a rule favouring a
    fixed prediction or the best value is detected, first-seen vs last-seen is not).""",
    ops=("validation_metrics",),
    strategy=_validation_case(),
    examples=_VALIDATION_EXAMPLES,
    checks=("uids", "required_keys", "no_std_at_1", "mean", "std", "bootstrap"),
    meets=_VALIDATION_FEATURES,
    case_features=_validation_features,
)
def check_validation_at_n(ctx: Any, case: dict) -> None:
    draws = ctx.profile.get("validation_n_bootstrap", 1000)
    tie = ctx.profile.get("validation_maj_tie", "first_seen")
    samples = case["samples"]
    uids = [s["uid"] for s in samples]
    values = torch.tensor([s["value"] for s in samples], dtype=ctx.dtype, device=ctx.device)
    stored = to_float_list(values)
    preds = [s["pred"] for s in samples] if case["with_pred"] else None
    actual = ctx.call("validation_metrics", uids, values, preds, case["seed"])
    clause_id = "metrics.validation_at_n"
    for uid, members in oracle.group_by_uid(uids).items():
        if uid not in actual:
            raise _mismatch(
                clause_id,
                f"no metrics for uid={uid!r}",
                "uids",
                uid=uid,
                expected="metrics",
                actual=None,
            )
        got = {key: _number(value) for key, value in actual[uid].items()}
        group = [stored[i] for i in members]
        votes = [preds[i] for i in members] if preds is not None else None
        size = len(group)
        scale = max(abs(v) for v in group)
        required = [f"mean@{size}"]
        if size > 1:
            required += [f"std@{size}", f"best@{size}/mean", f"worst@{size}/mean"]
            required += [f"maj@{size}/mean"] if votes is not None else []
        for key in required:
            if key not in got:
                raise _mismatch(
                    clause_id,
                    f"uid={uid!r} (N={size}): metric {key!r} missing; got {sorted(got)}",
                    "required_keys",
                    uid=uid,
                    what=key,
                    expected="present",
                    actual=None,
                )
        if size == 1 and f"std@{size}" in got:
            with ctx.check("no_std_at_1"):
                raise _mismatch(
                    clause_id,
                    f"uid={uid!r}: std@1 reported ({got['std@1']!r}); std@N exists only for N > 1",
                    "no_std_at_1",
                    uid=uid,
                    what="std@1",
                    expected="absent",
                    actual=got["std@1"],
                )
        with ctx.check("mean"):
            assert_scalar_close(
                clause_id,
                f"mean@{size}",
                oracle.mean_at_n(group),
                got[f"mean@{size}"],
                tolerance=ctx.tolerance,
                scale=scale,
                uid=uid,
            )
        if size > 1:
            with ctx.check("std"):
                assert_scalar_close(
                    clause_id,
                    f"std@{size} (population, ddof 0)",
                    oracle.std_at_n(group),
                    got[f"std@{size}"],
                    tolerance=ctx.tolerance,
                    scale=scale,
                    uid=uid,
                )
        spread = max(group) - min(group)
        for key, value in got.items():
            match = _BOOTSTRAP_KEY.match(key)
            if match is None:
                continue
            kind, n = match.group(1), int(match.group(2))
            exact = _expected_bootstrap(kind, group, votes, n, tie)
            if exact is None:
                continue
            mean, std = exact
            sampling = bootstrap_allowance(std, spread, draws)
            allowed = ctx.tolerance.allowed(mean, scale) + sampling
            if not abs(value - mean) <= allowed:
                raise _mismatch(
                    clause_id,
                    f"{key} for sample uid={uid!r} (N={size}): expected {mean!r} (exact, std "
                    f"{std:.4g}), actual {value!r} (|diff| {abs(value - mean):.3g} > allowed "
                    f"{allowed:.3g}: bootstrap sampling {sampling:.3g} for {draws} draws)",
                    "bootstrap",
                    uid=uid,
                    what=key,
                    expected=mean,
                    actual=value,
                    allowed=allowed,
                )


# ---- metrics.reduce --------------------------------------------------------------------

_METRIC_KEYS = (
    "actor/pg_loss",
    "actor/grad_norm",
    "perf/max_memory_allocated_gb",
    "perf/min_step_time_s",
    "response_length/max",
    "response_length/min",
    "critic/score/mean",
    "timing_s/gen",
    "env/terminated_ratio",
)


@st.composite
def _reduce_case(draw: Any) -> dict:
    keys = draw(st.lists(st.sampled_from(_METRIC_KEYS), min_size=1, max_size=5, unique=True))
    return {
        "metrics": {
            key: draw(st.lists(cs.finite(-100, 100), min_size=1, max_size=4)) for key in keys
        }
    }


_REDUCE_EXAMPLES = (
    {
        "metrics": {
            "response_length/max": [3.0, 7.0, 5.0],
            "response_length/min": [3.0, 1.0, 5.0],
            "actor/pg_loss": [1.0, 2.0, 6.0],
        }
    },
    # "max" is tested before "min"; "terminated" contains "min", so the rule takes the min.
    {
        "metrics": {
            "perf/max_min_ratio": [1.0, 4.0],
            "env/terminated_ratio": [0.5, 0.25],
            "critic/score/mean": [1.0],
        }
    },
)


@clause(
    "metrics.reduce",
    title="Reduction of logged metric lists by key substring",
    statement="""A metric logged as a plain list of values (not wrapped in an explicit
    aggregation) is reduced by its key: a key containing "max" -> max; otherwise a key
    containing "min" -> min (a plain substring test: "terminated" contains "min");
    otherwise the mean.""",
    ops=("reduce_metrics",),
    strategy=_reduce_case(),
    examples=_REDUCE_EXAMPLES,
    checks=("keys", "reduction"),
)
def check_reduce(ctx: Any, case: dict) -> None:
    metrics = case["metrics"]
    actual = ctx.call("reduce_metrics", {key: list(values) for key, values in metrics.items()})
    for key, values in metrics.items():
        if key not in actual:
            raise _mismatch(
                "metrics.reduce",
                f"metric {key!r} missing after reduction",
                "keys",
                what=key,
                expected="present",
                actual=None,
            )
        rule = "max" if "max" in key else "min" if "min" in key else "mean"
        with ctx.check("reduction"):
            assert_scalar_close(
                "metrics.reduce",
                f"{key} ({rule} of {values})",
                oracle.reduce_metric(key, values),
                _number(actual[key]),
                tolerance=ctx.tolerance,
                scale=max(abs(v) for v in values),
            )


# ---- metrics.token_accounting ----------------------------------------------------------


@st.composite
def _accounting_case(draw: Any) -> dict:
    """Lengths up to 4096 and keep flags; (edge) no samples, L_i = 0, every sample dropped."""
    n = draw(st.integers(cs.fewest_samples(0), 6))
    shortest = 0 if allows("edge") else 1
    length = st.integers(shortest, 4096) | st.sampled_from([shortest, 2048])
    lengths = draw(st.lists(length, min_size=n, max_size=n))
    keep = draw(st.lists(st.booleans(), min_size=n, max_size=n))
    if not allows("edge") and not any(keep):
        keep[draw(st.integers(0, n - 1))] = True
    return {"lengths": lengths, "keep": keep}


def _accounting_features(case: dict) -> set[str]:
    lengths, keep = case["lengths"], case["keep"]
    found = set() if lengths else {"no_samples"}
    if 0 in lengths:
        found.add("empty_response")
    if lengths and not any(keep):
        found.add("all_rejected")
    return found


_ACCOUNTING_EXAMPLES = (
    # Worked: 64 prompts x 8 samples x 2048 tokens = 1,048,576 generated; keeping a quarter
    # of the groups (every fourth prompt) keeps 262,144 and discards 786,432.
    {"lengths": [2048] * 512, "keep": [(i // 8) % 4 == 0 for i in range(512)]},
    # All filtered out.
    {"lengths": [3, 0, 5], "keep": [False, False, False]},
    # Empty batch.
    {"lengths": [], "keep": []},
)


@clause(
    "metrics.token_accounting",
    title="Generated, kept and discarded token counts after filtering",
    statement="""generated = sum of L_i over all samples; kept = sum of L_i over the
    samples the filter keeps; discarded = generated - kept. Counts are exact integers.""",
    ops=("token_accounting",),
    strategy=_accounting_case(),
    examples=_ACCOUNTING_EXAMPLES,
    checks=("keys", "generated", "kept", "discarded"),
    meets=("no_samples", "empty_response", "all_rejected"),
    case_features=_accounting_features,
)
def check_token_accounting(ctx: Any, case: dict) -> None:
    lengths, keep = case["lengths"], case["keep"]
    expected = oracle.token_accounting(lengths, keep)
    actual = ctx.call(
        "token_accounting",
        torch.tensor(lengths, dtype=torch.int64, device=ctx.device),
        torch.tensor(keep, dtype=torch.bool, device=ctx.device),
    )
    for key, value in expected.items():
        if key not in actual:
            raise _mismatch(
                "metrics.token_accounting",
                f"count {key!r} missing",
                "keys",
                what=key,
                expected=value,
                actual=None,
            )
        with ctx.check(key):
            assert_equal("metrics.token_accounting", f"{key} tokens", value, int(actual[key]))

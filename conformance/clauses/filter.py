"""Clauses of the CONTRACT area `filter`."""

from __future__ import annotations

import copy
import math
from typing import Any

from hypothesis import strategies as st

from rlconform.conformance import strategies as cs
from rlconform.conformance.clauses.schema import (
    rollout_features,
    rollout_samples,
    separate_equal_rewards,
    uids,
)
from rlconform.conformance.compare import assert_equal, assert_rows_close, assert_scalar_close
from rlconform.conformance.errors import ClauseMismatch, ContractError
from rlconform.conformance.features import allows
from rlconform.conformance.registry import clause
from rlconform.conformance.snapshot import first_difference, freeze
from rlconform.oracle import filter as oracle
from rlconform.oracle.schema import scalar_reward


@st.composite
def filter_config(draw: Any) -> dict[str, Any]:
    """A filter config: each key absent (contract default) or drawn."""
    choices = {
        "truncation_policy": st.sampled_from(["keep", "drop"]),
        "min_response_length": st.integers(0, 3),
        "max_response_length": st.integers(1, 6),
        "drop_duplicates": st.booleans(),
        "reward_outlier_z": st.sampled_from([0.5, 1.0, 1.5]),
        "drop_zero_variance_groups": st.booleans(),
        "alert_threshold": st.sampled_from([0.0, 0.25, 0.3, 0.5, 1.0]),
    }
    return {key: draw(value) for key, value in choices.items() if draw(st.booleans())}


def _all_rejected(samples: list[dict[str, Any]], config: dict[str, Any]) -> bool:
    """The filter (contract reward key) drops every sample of a non-empty batch."""
    try:
        kept = oracle.filter_samples(copy.deepcopy(samples), dict(config))["kept"]
    except ContractError:
        return False
    return bool(samples) and not kept


@st.composite
def _filter_case(draw: Any) -> dict[str, Any]:
    """Rollout samples and a config; below edge some sample survives the filter: when every
    one is dropped, the first sample is made clean and the config reset to the defaults."""
    samples = draw(rollout_samples())
    config = draw(filter_config())
    if not allows("edge") and _all_rejected(samples, config):
        config = {}
        first = samples[0]
        length = len(first["response_ids"])
        first["rollout_logprobs"] = [-0.5] * length
        first["loss_mask"] = (first["loss_mask"] + [1] * length)[:length]
        first["status"] = "completed"
        first["reward"] = draw(cs.finite(-3, 3))
        separate_equal_rewards(samples)
    return {
        "samples": samples,
        "config": config,
        "scope": draw(st.sampled_from(["batch", "group"])),
    }


FILTER_FEATURES = (
    "no_samples",
    "empty_response",
    "truncated_sample",
    "singleton_group",
    "unequal_groups",
    "equal_scores",
    "all_rejected",
    "padding_nonfinite",
)


def filter_features(case: dict[str, Any]) -> frozenset[str]:
    """The samples' features (schema.rollout_features), and all_rejected when the filter
    drops every sample."""
    found = rollout_features(case["samples"], FILTER_FEATURES)
    if _all_rejected(case["samples"], case["config"]):
        found |= {"all_rejected"}
    return found


def _sample(uid: Any, group: str = "g0", **fields: Any) -> dict[str, Any]:
    length = len(fields.get("response_ids", [1, 2, 3]))
    base = {
        "uid": uid,
        "group": group,
        "prompt_ids": [5],
        "response_ids": [1, 2, 3],
        "rollout_logprobs": [-0.5] * length,
        "loss_mask": [1] * length,
        "reward": 1.0,
        "status": "completed",
        "weight_version": 0,
        "data_source": "math",
    }
    base.update(fields)
    return base


# CONTRACT filter.stats worked example: 8 samples, one truncated (policy drop), one
# logprob/length mismatch, one missing reward -> 5 kept, rate 0.375, alert raised.
WORKED_EXAMPLE = {
    "samples": [
        _sample("s1", "g0", reward=1.0, response_ids=[1, 2, 3]),
        _sample("s2", "g0", reward=0.0, response_ids=[1, 2, 3, 4, 5, 6], status="truncated"),
        _sample("s3", "g0", reward=1.0, response_ids=[2, 2, 2], rollout_logprobs=[-0.5, -0.5]),
        _sample("s4", "g1", reward=None, response_ids=[3]),
        _sample("s5", "g1", reward=0.0, response_ids=[4, 4]),
        _sample("s6", "g1", reward=0.0, response_ids=[5], status="failed"),
        _sample("s7", "g2", reward=1.0, response_ids=[6, 1]),
        _sample("s8", "g2", reward=0.5, response_ids=[7, 1, 2]),
    ],
    "config": {"truncation_policy": "drop"},
    "scope": "batch",
}

_FILTER_EXAMPLES = (
    WORKED_EXAMPLE,
    # Reason order on samples that match several reasons; "failed" and a kept truncation.
    {
        "samples": [
            _sample("a", status="aborted", reward=None),  # unscored before aborted
            _sample("b", rollout_logprobs=[float("nan")]),  # logprob_mismatch before non_finite
            _sample("c", status="tool_error", reward=float("nan")),  # non_finite before tool_error
            _sample("d", status="tool_error", reward=0.0),
            _sample("e", status="truncated", reward=0.0, response_ids=[4, 5]),  # policy keep: kept
            _sample("f", status="failed", reward=0.0, response_ids=[6]),  # failed but scored: kept
            _sample(
                "g", reward={"score": 1.0, "format": float("inf")}, response_ids=[7]
            ),  # non_finite in a dict
        ],
        "config": {},
        "scope": "group",
    },
    # Duplicates: same group only; the first in input order stays; a dropped first
    # copy does not make the second a duplicate.
    {
        "samples": [
            _sample("a", "g0", response_ids=[1, 2], reward=0.0),
            _sample("b", "g1", response_ids=[1, 2], reward=1.0),
            _sample("c", "g0", response_ids=[1, 2], reward=1.0),
            _sample("d", "g1", response_ids=[3], status="aborted"),
            _sample("e", "g1", response_ids=[3], reward=0.0),
            _sample("f", "g1", response_ids=[], rollout_logprobs=[], loss_mask=[], reward=0.5),
        ],
        "config": {"min_response_length": 0, "max_response_length": 2},
        "scope": "group",
    },
    # All-equal, nearly-equal (1.0 vs 1.00001) and singleton groups; outliers.
    {
        "samples": [
            _sample("a", "g0", reward=1.0, response_ids=[1]),
            _sample("b", "g0", reward=1.0, response_ids=[2]),
            _sample("c", "g1", reward=1.0, response_ids=[1]),
            _sample("d", "g1", reward=1.00001, response_ids=[2]),
            _sample("e", "g2", reward=-40.0, response_ids=[1]),
            _sample("f", "g3", reward={"score": 0.0, "format": 1.0}, response_ids=[1]),
            _sample("g", "g3", reward={"score": 1.0, "format": 1.0}, response_ids=[2]),
        ],
        "config": {"reward_outlier_z": 1.5, "drop_zero_variance_groups": True},
        "scope": "group",
    },
    # Empty batch; all-filtered batch.
    {"samples": [], "config": {}, "scope": "batch"},
    {
        "samples": [_sample("a", reward=None), _sample("b", status="aborted")],
        "config": {"alert_threshold": 0.5},
        "scope": "batch",
    },
    # Rate exactly at the threshold: 3 of 10 = 0.3 is not > 0.30 (a float32 rate is); an
    # ordinary batch (groups of two, distinct rewards).
    {
        "samples": [
            _sample(
                f"s{i}",
                f"g{i // 2}",
                status="aborted" if i < 3 else "completed",
                response_ids=[i, i + 1],
                reward=float(i),
            )
            for i in range(10)
        ],
        "config": {},
        "scope": "batch",
    },
    # L_i = 0 and L_i = max against the length limits.
    {
        "samples": [
            _sample("a", response_ids=[], rollout_logprobs=[], loss_mask=[], reward=1.0),
            _sample("b", response_ids=[1, 2, 3, 4, 5, 6], reward=0.0),
            _sample("c", response_ids=[1, 2], reward=0.5),
        ],
        "config": {"min_response_length": 1, "max_response_length": 5},
        "scope": "batch",
    },
    # A NaN log-prob at a tool token (mask 0, hardening): still non_finite (NaN/inf anywhere
    # in the log-probs), next to a clean sample of its group.
    {
        "samples": [
            _sample("a", "g0", loss_mask=[1, 0, 1], rollout_logprobs=[-0.5, float("nan"), -0.5]),
            _sample("b", "g0", reward=0.0),
        ],
        "config": {},
        "scope": "group",
    },
)


def _run_filter(ctx: Any, case: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    samples, config = case["samples"], case["config"]
    reward_key = ctx.profile.get("reward_key", "score")
    expected = oracle.filter_samples(copy.deepcopy(samples), dict(config), reward_key=reward_key)
    actual = ctx.call("filter_samples", copy.deepcopy(samples), dict(config))
    return expected, actual


def _fate(output: dict[str, Any], uid: Any) -> Any:
    kept = [s.get("uid") for s in output["kept"]]
    dropped = output["dropped"]
    if uid in dropped and uid in kept:
        return ("kept and dropped", dropped[uid])
    if uid in dropped:
        return dropped[uid]
    return "kept" if uid in kept else "<missing>"


@clause(
    "filter.reasons",
    title="Each dropped sample gets exactly one reason, in contract order",
    statement="""Reasons are checked in order: logprob_mismatch, non_finite, unscored,
    tool_error, aborted, truncated (policy drop), too_short, too_long, duplicate (same
    group, identical response ids, first kept), reward_outlier (|z| > k), zero_variance_group;
    the batch-level ones are judged on the samples no earlier reason dropped. Unscored,
    tool failure, task failure and truncation are never merged into one zero reward.
    Config keys (call argument): truncation_policy, min_response_length,
    max_response_length, drop_duplicates, reward_outlier_z, drop_zero_variance_groups.
    Profile key: reward_key (default "score").""",
    ops=("filter_samples",),
    strategy=_filter_case(),
    examples=_FILTER_EXAMPLES,
    checks=("reason", "unknown_uids"),
    meets=FILTER_FEATURES,
    case_features=filter_features,
)
def check_reasons(ctx: Any, case: dict[str, Any]) -> None:
    expected, actual = _run_filter(ctx, case)
    for uid in uids(case["samples"]):
        want, got = _fate(expected, uid), _fate(actual, uid)
        if want != got:
            with ctx.check("reason"):
                raise ClauseMismatch(
                    f"[filter.reasons] sample uid={uid!r}: expected {want!r}, actual {got!r} "
                    f"(config {case['config']!r})",
                    detail={"what": "reason", "uid": uid, "expected": want, "actual": got},
                )
    extra = set(actual["dropped"]) - set(expected["dropped"]) - set(uids(case["samples"]))
    assert_equal(
        "filter.reasons", "reasons for uids not in the input", set(), extra, check="unknown_uids"
    )


@clause(
    "filter.stats",
    title="Filter statistics: counts per reason, rate, token counts, alert",
    statement="""Counts per reason (every reason, zeros included), generated / kept /
    dropped sample counts, filter_rate = dropped / generated, generated / kept / discarded
    response-token counts, and alert = filter_rate > alert_threshold (default 0.30).
    Worked: 8 samples, one truncated, one logprob/length mismatch, one missing reward ->
    5 kept, rate 0.375, alert raised.""",
    ops=("filter_samples",),
    strategy=_filter_case(),
    examples=_FILTER_EXAMPLES,
    checks=("counts", "sample_counts", "token_counts", "filter_rate", "alert"),
    meets=FILTER_FEATURES,
    case_features=filter_features,
)
def check_stats(ctx: Any, case: dict[str, Any]) -> None:
    expected, actual = _run_filter(ctx, case)
    want, got = expected["stats"], actual["stats"]
    with ctx.check("counts"):
        counts = dict(got.get("counts", {}))
        assert_equal("filter.stats", "counts per reason", want["counts"], counts)
    for key in ("generated", "kept", "dropped"):
        with ctx.check("sample_counts"):
            assert_equal("filter.stats", key, want[key], got.get(key))
    for key in ("generated_tokens", "kept_tokens", "discarded_tokens"):
        with ctx.check("token_counts"):
            assert_equal("filter.stats", key, want[key], got.get(key))
    with ctx.check("filter_rate"):
        assert_scalar_close(
            "filter.stats",
            "filter_rate",
            want["filter_rate"],
            got.get("filter_rate", math.nan),
            tolerance=ctx.tolerance,
        )
    assert_equal(
        "filter.stats",
        "alert (filter_rate > alert_threshold)",
        want["alert"],
        got.get("alert"),
        check="alert",
    )


@clause(
    "filter.order",
    title="Kept samples keep their input order and uids",
    statement="""The kept samples come out in input order, each with its uid and fields
    unchanged (bit-identical).""",
    ops=("filter_samples",),
    strategy=_filter_case(),
    examples=_FILTER_EXAMPLES,
    checks=("kept_order", "kept_unchanged"),
    meets=FILTER_FEATURES,
    case_features=filter_features,
)
def check_order(ctx: Any, case: dict[str, Any]) -> None:
    expected, actual = _run_filter(ctx, case)
    kept = [s.get("uid") for s in actual["kept"]]
    assert_equal(
        "filter.order",
        "uids of the kept samples, in order",
        uids(expected["kept"]),
        kept,
        check="kept_order",
    )
    for want, got in zip(expected["kept"], actual["kept"]):
        found = first_difference(freeze(want), freeze(got))
        if found is not None:
            path, e, a = found
            with ctx.check("kept_unchanged"):
                raise ClauseMismatch(
                    f"[filter.order] kept sample uid={want['uid']!r} changed at {list(path)}: "
                    f"expected {e!r}, actual {a!r}",
                    detail={"what": "kept sample", "uid": want["uid"], "expected": e, "actual": a},
                )


def _junk(samples: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The samples interleaved with samples every filter drops (tool_error, aborted,
    unscored), carrying extreme rewards, in the same groups."""
    mixed = []
    kinds = (
        {"status": "tool_error", "reward": 1e3},
        {"status": "aborted", "reward": -1e3},
        {"reward": None},
    )
    for i, sample in enumerate(samples):
        mixed.append(sample)
        junk = dict(copy.deepcopy(sample), uid=f"junk-{i}", **kinds[i % 3])
        junk["response_ids"] = junk["response_ids"] + [99]
        junk["rollout_logprobs"] = [-1.0] * len(junk["response_ids"])
        junk["loss_mask"] = [1] * len(junk["response_ids"])
        mixed.append(junk)
    return mixed


def _conditioning(kept: list[dict[str, Any]], scope: str, reward_key: str) -> dict[Any, float]:
    """Per kept uid, (|r| + |mean|) / std of its pool: the error bound of (r - mean) / std."""
    pools: dict[Any, list[float]] = {}
    for s in kept:
        pools.setdefault(s["group"] if scope == "group" else None, []).append(
            scalar_reward(s["reward"], reward_key, s["uid"], "filter.before_normalize")
        )
    scale = {}
    for s in kept:
        pool = pools[s["group"] if scope == "group" else None]
        mean = math.fsum(pool) / len(pool)
        std = math.sqrt(math.fsum((r - mean) ** 2 for r in pool) / len(pool))
        r = scalar_reward(s["reward"], reward_key, s["uid"], "filter.before_normalize")
        scale[s["uid"]] = 0.0 if len(set(pool)) == 1 else (abs(r) + abs(mean)) / (std + 1e-8)
    return scale


@clause(
    "filter.before_normalize",
    title="Later normalisation uses statistics of the kept samples only",
    statement="""normalize_kept_rewards(samples, config, scope) = (r - mean) / (std + 1e-8)
    with population mean and std over the kept samples of the batch or group (all equal ->
    0): dropped samples (unscored, aborted, tool errors, outliers, ...) neither appear nor
    move the statistics; adding samples that are always dropped changes nothing.
    Tolerance: 16 eps(dtype) (|r| + |mean|) / std per value.""",
    ops=("normalize_kept_rewards",),
    strategy=_filter_case(),
    examples=_FILTER_EXAMPLES,
    checks=("uids", "values", "dropped_ignored"),
    meets=FILTER_FEATURES,
    case_features=filter_features,
)
def check_before_normalize(ctx: Any, case: dict[str, Any]) -> None:
    samples, config, scope = case["samples"], case["config"], case["scope"]
    reward_key = ctx.profile.get("reward_key", "score")
    expected = oracle.normalize_kept_rewards(
        copy.deepcopy(samples), dict(config), scope=scope, reward_key=reward_key
    )
    kept = oracle.filter_samples(copy.deepcopy(samples), dict(config), reward_key=reward_key)[
        "kept"
    ]
    scale = _conditioning(kept, scope, reward_key)
    ids = list(expected)
    for what, batch, checks in (
        ("kept samples", samples, ("uids", "values")),
        ("kept samples, dropped ones interleaved", _junk(samples), ("dropped_ignored",) * 2),
    ):
        actual = ctx.call("normalize_kept_rewards", copy.deepcopy(batch), dict(config), scope=scope)
        with ctx.check(checks[0]):
            assert_equal(
                "filter.before_normalize",
                f"normalised uids ({what})",
                ids,
                list(actual),
                check=checks[0],
            )
            assert_rows_close(
                "filter.before_normalize",
                f"normalised rewards over {what} (scope {scope})",
                [[expected[u]] for u in ids],
                [[actual[u]] for u in ids],
                uids=ids,
                tolerance=ctx.tolerance,
                scale=[[scale[u]] for u in ids],
                check=checks[1],
            )

"""Clauses of the CONTRACT area `reward`.

Inputs are handed to the oracle as the target received them (rounded to its dtype), so
rounding of the case itself is never counted as the implementation's error. Checks:
``padding_zero`` (the placed row is exactly 0 past L_i), ``values`` (the placed or
normalised values, the TD targets), ``count`` (one output per sample).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from hypothesis import strategies as st

from rlconform.conformance import strategies as cs
from rlconform.conformance.compare import assert_equal, assert_rows_close
from rlconform.conformance.features import allows
from rlconform.conformance.harness import (
    assert_padding_zero,
    pad_right,
    right_mask,
    to_float_list,
    unpad_right,
)
from rlconform.conformance.registry import clause
from rlconform.oracle import reward as oracle

NAN = float("nan")

_PLACE_EXAMPLES = (
    # L_i = 0 next to a full-length row: verl writes the reward into column -1 (padding).
    {
        "samples": [
            {"uid": "s0", "mask": [], "reward": 1.0},
            {"uid": "s1", "mask": [1, 1, 1], "reward": 2.0},
        ],
        "pad_value": 0.0,
        "extra_pad": 0,
    },
    # Uneven lengths with extra right padding: column -1 is not L_i - 1.
    {
        "samples": [
            {"uid": "s0", "mask": [1, 1], "reward": 1.0},
            {"uid": "s1", "mask": [1, 1, 1, 1], "reward": -1.0},
        ],
        "pad_value": 0.0,
        "extra_pad": 2,
    },
    # Response ends in a tool observation (mask 0 tail).
    {
        "samples": [{"uid": "s0", "mask": [1, 1, 0, 0], "reward": 3.0}],
        "pad_value": 0.0,
        "extra_pad": 1,
    },
)


def _place_case() -> st.SearchStrategy[dict[str, Any]]:
    return cs.token_batch(fields=(), with_rewards=True, min_samples=0)


PLACE_CHECKS = ("padding_zero", "values")
PLACE_FEATURES = (
    "mask_holes",
    "extra_padding",
    "empty_response",
    "actionless_sample",
    "no_samples",
    "zero_width",
)


@clause(
    "reward.place_last",
    title="Sequence reward on the last response token",
    statement="""A sequence reward goes on the last response token, index L_i-1 (not the last
    column of the padded tensor), or on the last action token when the profile says so; all
    other positions 0; row sums recover the scalar reward; L_i = 0 gives an all-zero row.""",
    ops=("place_reward_last",),
    strategy=_place_case(),
    examples=_PLACE_EXAMPLES,
    checks=PLACE_CHECKS,
    meets=PLACE_FEATURES,
)
def check_place_last(ctx: Any, case: dict[str, Any]) -> None:
    samples = case["samples"]
    lengths = cs.lengths_of(case)
    uids = cs.uids_of(case)
    tail = ctx.profile.reward_nonaction_tail
    expected = [
        oracle.place_reward_last(s["reward"], s["mask"], nonaction_tail=tail, uid=s["uid"])[0]
        for s in samples
    ]
    scores, _ = _scores(ctx, [s["reward"] for s in samples])
    placed = ctx.call("place_reward_last", scores, *_place_masks(ctx, case))
    _check_placed(ctx, "reward.place_last", expected, placed, lengths, uids)


def _place_masks(ctx: Any, case: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
    """(response_mask, loss_mask), both (B, T), of a placement case."""
    width = cs.width_of_case(case)
    response_mask = right_mask(cs.lengths_of(case), width, ctx.device)
    masks = [s["mask"] for s in case["samples"]]
    loss_mask = pad_right(masks, width=width, dtype=response_mask.dtype, device=ctx.device)
    return response_mask, loss_mask


def _check_placed(
    ctx: Any,
    clause_id: str,
    expected: list[list[float]],
    placed: Any,
    lengths: list[int],
    uids: list[Any],
    scale: list[list[float]] | None = None,
) -> None:
    """The placed (B, T) token scores: padding exactly 0, valid positions close to expected."""
    assert_equal(clause_id, "token_level_scores rows", len(lengths), len(placed), check="values")
    with ctx.check("padding_zero"):
        assert_padding_zero(clause_id, "token_level_scores", placed, lengths, uids)
    with ctx.check("values"):
        assert_rows_close(
            clause_id,
            "token_level_scores",
            expected,
            unpad_right(placed, lengths),
            uids=uids,
            tolerance=ctx.tolerance,
            scale=scale,
        )


def _scores(ctx: Any, rewards: list[float]) -> tuple[torch.Tensor, list[float]]:
    """(B,) scores in the target dtype, and the float64 values the target received."""
    scores = pad_right([[r] for r in rewards], width=1, dtype=ctx.dtype, device=ctx.device)[:, 0]
    return scores, to_float_list(scores)


# ---------------------------------------------------------------------------------------
# reward.place_uniform

_UNIFORM_EXAMPLES = (
    # Uneven lengths with extra padding (dividing by the width T is wrong), L_i = 0.
    {
        "samples": [
            {"uid": "s0", "mask": [1, 1], "reward": 1.0},
            {"uid": "s1", "mask": [1, 1, 1, 1], "reward": -2.0},
            {"uid": "s2", "mask": [], "reward": 3.0},
        ],
        "pad_value": 0.0,
        "extra_pad": 2,
    },
    # A tool observation in the middle: r / 3 on the 3 action tokens of L_i = 4 (not r / 4).
    {
        "samples": [{"uid": "s0", "mask": [1, 0, 1, 1], "reward": 2.0}],
        "pad_value": 0.0,
        "extra_pad": 0,
    },
)


@clause(
    "reward.place_uniform",
    title="Sequence reward spread uniformly over the action tokens",
    statement="""r / n_i on each of the n_i action tokens of the sample, 0 on mask-0 tokens and
    on padding, so the row sums to r also when the response has mask holes; no action token:
    an all-zero row.""",
    ops=("place_reward_uniform",),
    strategy=_place_case(),
    examples=_UNIFORM_EXAMPLES,
    checks=PLACE_CHECKS,
    meets=PLACE_FEATURES,
)
def check_place_uniform(ctx: Any, case: dict[str, Any]) -> None:
    """Op ``place_reward_uniform(scores (B,), response_mask (B,T), loss_mask (B,T)) -> (B,T)``."""
    samples = case["samples"]
    lengths = cs.lengths_of(case)
    uids = cs.uids_of(case)
    scores, received = _scores(ctx, [s["reward"] for s in samples])
    expected = [
        oracle.place_reward_uniform(r, s["mask"], uid=s["uid"])
        for r, s in zip(received, samples, strict=True)
    ]
    placed = ctx.call("place_reward_uniform", scores, *_place_masks(ctx, case))
    _check_placed(ctx, "reward.place_uniform", expected, placed, lengths, uids)


# ---------------------------------------------------------------------------------------
# reward.place_discounted

_GAMMAS = (1.0, 0.99, 0.9, 0.5, 0.0)


@st.composite
def _discounted_case(draw: Any) -> dict[str, Any]:
    case = draw(cs.token_batch(fields=(), with_rewards=True, min_samples=0))
    case["gamma"] = draw(st.sampled_from(_GAMMAS))
    return case


_DISCOUNTED_EXAMPLES = (
    # g = 0.5, L = 3 next to L = 1 with extra padding: weights 1/7, 2/7, 4/7 counted from L_i,
    # not from the padded width; L_i = 0 gives an empty row.
    {
        "samples": [
            {"uid": "s0", "mask": [1, 1, 1], "reward": 7.0},
            {"uid": "s1", "mask": [1], "reward": -1.0},
            {"uid": "s2", "mask": [], "reward": 2.0},
        ],
        "pad_value": 0.0,
        "extra_pad": 2,
        "gamma": 0.5,
    },
    # g = 0: everything on the last action token; g = 1: uniform r / n_i.
    {
        "samples": [{"uid": "s0", "mask": [1, 1, 1, 1], "reward": 2.0}],
        "pad_value": 0.0,
        "extra_pad": 1,
        "gamma": 0.0,
    },
    {
        "samples": [{"uid": "s0", "mask": [1, 1, 1, 1], "reward": 2.0}],
        "pad_value": 0.0,
        "extra_pad": 0,
        "gamma": 1.0,
    },
)


@clause(
    "reward.place_discounted",
    title="Sequence reward spread over the action tokens with a discount towards the end",
    statement="""Over the n_i action tokens in order, the k-th gets r * g^(n_i-1-k) /
    sum_j g^(n_i-1-j); mask-0 tokens and padding 0; each row with an action token sums to r
    (mask holes included); no action token: an all-zero row.""",
    ops=("place_reward_discounted",),
    strategy=_discounted_case(),
    examples=_DISCOUNTED_EXAMPLES,
    checks=PLACE_CHECKS,
    meets=PLACE_FEATURES,
)
def check_place_discounted(ctx: Any, case: dict[str, Any]) -> None:
    """Op ``place_reward_discounted(scores (B,), response_mask (B,T), loss_mask (B,T),
    gamma) -> (B,T)``."""
    samples = case["samples"]
    lengths = cs.lengths_of(case)
    uids = cs.uids_of(case)
    gamma = case["gamma"]
    scores, received = _scores(ctx, [s["reward"] for s in samples])
    expected = [
        oracle.place_reward_discounted(r, s["mask"], gamma, uid=s["uid"])
        for r, s in zip(received, samples, strict=True)
    ]
    placed = ctx.call("place_reward_discounted", scores, *_place_masks(ctx, case), gamma)
    scale = [[r] * n for r, n in zip(received, lengths, strict=True)]
    _check_placed(ctx, "reward.place_discounted", expected, placed, lengths, uids, scale)


# ---------------------------------------------------------------------------------------
# reward.normalize_batch
#
# Conditioning. Two-pass (x - mean) / (std + eps) in a working precision with unit roundoff
# u rounds the mean by about u * max|x| (a sum of <= 5 terms, then a division); x - mean is
# then exact when x and mean are close (Sterbenz), and that error reaches the output divided
# by std + eps, while std itself changes only to second order. So the allowed error is
# NORMALIZE_K * u * (max_k |x_k| + |mean|) / (std + eps) on top of CONTRACT §4's rtol/atol.
# On rewards like [1.0, 1.00001, 1.0, 1.0] in float32 (std ~4e-6) that allows ~0.05, while
# E[x^2] - mean^2 leaves a variance of a few u (or 0, or negative): outputs off by ~1.
NORMALIZE_K = 4.0


@st.composite
def _normalize_case(draw: Any) -> dict[str, Any]:
    """Rewards of kept and dropped samples; a dropped sample may hold anything (a filter
    drops non-finite rewards: that is why it was dropped)."""
    n = draw(st.integers(cs.fewest_samples(0), 5))
    keep = draw(st.lists(st.booleans(), min_size=n, max_size=n))
    if not allows("edge") and n and not any(keep):
        keep[0] = True  # a batch whose samples were all dropped is an edge case
    kept_rewards = draw(cs.rewards(sum(keep)))
    rewards = iter(kept_rewards)
    dropped = st.sampled_from((float("nan"), float("inf"), 7.5, 0.0))
    samples = [
        {"uid": f"s{i}", "reward": next(rewards) if k else draw(dropped), "kept": k}
        for i, k in enumerate(keep)
    ]
    return {"samples": samples}


def _normalize_features(case: dict[str, Any]) -> set[str]:
    """no_samples; all_rejected (every sample dropped); equal_scores among the kept."""
    samples = case["samples"]
    kept = [s["reward"] for s in samples if s["kept"]]
    if not samples:
        return {"no_samples"}
    if not kept:
        return {"all_rejected"}
    spread = max(kept) - min(kept) if all(math.isfinite(r) for r in kept) else math.inf
    if len(kept) > 1 and spread <= 1e-4 * max(1.0, max(abs(r) for r in kept)):
        return {"equal_scores"}
    return set()


_NORMALIZE_EXAMPLES = (
    # CONTRACT worked example: [1, 3, 2, 4] -> [-1.342, 0.447, -0.447, 1.342]; a dropped
    # sample with a NaN reward next to them must not enter mean or std.
    {
        "samples": [
            {"uid": "s0", "reward": 1.0, "kept": True},
            {"uid": "s1", "reward": 3.0, "kept": True},
            {"uid": "drop", "reward": NAN, "kept": False},
            {"uid": "s2", "reward": 2.0, "kept": True},
            {"uid": "s3", "reward": 4.0, "kept": True},
        ]
    },
    # Nearly equal rewards (1.0 vs 1.00001): E[x^2] - mean^2 cancels in float32.
    {
        "samples": [
            {"uid": "s0", "reward": 1.0, "kept": True},
            {"uid": "s1", "reward": 1.00001, "kept": True},
            {"uid": "s2", "reward": 1.0, "kept": True},
            {"uid": "s3", "reward": 1.0, "kept": True},
        ]
    },
    {
        "samples": [
            {"uid": "s0", "reward": 1.00001, "kept": True},
            {"uid": "s1", "reward": 1.0, "kept": True},
            {"uid": "s2", "reward": 1.00001, "kept": True},
            {"uid": "s3", "reward": 1.0, "kept": True},
            {"uid": "s4", "reward": 1.00001, "kept": True},
        ]
    },
    # All equal (not exactly representable in binary, so a rounded mean differs from them):
    # exactly 0, never a rounding residue divided by ~0. A dropped outlier is ignored.
    {
        "samples": [
            {"uid": "s0", "reward": 0.1, "kept": True},
            {"uid": "s1", "reward": 0.1, "kept": True},
            {"uid": "s2", "reward": 0.1, "kept": True},
            {"uid": "drop", "reward": 7.5, "kept": False},
        ]
    },
    # A single kept sample, and the empty batch.
    {
        "samples": [
            {"uid": "s0", "reward": 2.5, "kept": True},
            {"uid": "drop", "reward": float("inf"), "kept": False},
        ]
    },
    {"samples": []},
)


@clause(
    "reward.normalize_batch",
    title="Batch reward normalisation over kept samples",
    statement="""(r - mean) / (std + eps) over kept samples, population std (ddof 0), eps 1e-8;
    all-equal rewards give all zeros (never divide by ~0). Dropped samples take no part in
    the statistics and their outputs are ignored. Worked: [1, 3, 2, 4] -> mean 2.5, std
    1.118..., -> [-1.342, 0.447, -0.447, 1.342].""",
    ops=("normalize_rewards",),
    strategy=_normalize_case(),
    examples=_NORMALIZE_EXAMPLES,
    checks=("count", "values"),
    meets=("no_samples", "all_rejected", "equal_scores"),
    case_features=_normalize_features,
)
def check_normalize_batch(ctx: Any, case: dict[str, Any]) -> None:
    """Op ``normalize_rewards(scores (B,), keep (B,) bool) -> (B,)``. Profile keys
    ``reward_norm_std_ddof`` (contract 0) and ``reward_norm_eps`` (contract 1e-8). Allowed
    error: see ``NORMALIZE_K`` above; all-equal kept rewards must come out within atol of 0."""
    samples = case["samples"]
    ddof = ctx.profile.get("reward_norm_std_ddof", 0)
    eps = ctx.profile.get("reward_norm_eps", 1e-8)
    scores, received = _scores(ctx, [s["reward"] for s in samples])
    keep_flags = [bool(s["kept"]) for s in samples]
    keep = torch.tensor(keep_flags, dtype=torch.bool, device=ctx.device)
    expected = oracle.normalize_rewards(
        received, keep_flags, ddof=ddof, eps=eps, uids=[s["uid"] for s in samples]
    )
    actual = to_float_list(ctx.call("normalize_rewards", scores, keep))
    assert_equal(
        "reward.normalize_batch", "number of outputs", len(samples), len(actual), check="count"
    )
    kept = [i for i, k in enumerate(keep_flags) if k]
    kept_values = [received[i] for i in kept]
    if len(set(kept_values)) > 1:
        mean = math.fsum(kept_values) / len(kept_values)
        dof = max(len(kept_values) - ddof, 1)
        std = math.sqrt(math.fsum((x - mean) ** 2 for x in kept_values) / dof)
        conditioning = (max(abs(x) for x in kept_values) + abs(mean)) / (std + eps)
    else:
        conditioning = 0.0
    assert_rows_close(
        "reward.normalize_batch",
        "normalized rewards",
        [[expected[i]] for i in kept],
        [[actual[i]] for i in kept],
        uids=[samples[i]["uid"] for i in kept],
        tolerance=ctx.tolerance,
        scale=[[conditioning] for _ in kept],
        k=NORMALIZE_K,
        check="values",
    )


# ---------------------------------------------------------------------------------------
# reward.td_target

_TD_GAMMAS = (0.9, 1.0, 0.5, 0.0)


@st.composite
def _td_case(draw: Any) -> dict[str, Any]:
    """Per sample a reward, a bootstrap value V_boot and whether the collector truncated it;
    a terminated sample's V_boot is garbage (NaN or a huge value at hardening) that must be
    ignored."""
    n = draw(st.integers(cs.fewest_samples(0), 5))
    scores = draw(cs.rewards(n))
    samples = []
    for i in range(n):
        truncated = draw(st.booleans())
        bootstrap = draw(cs.finite()) if truncated else draw(cs.hole_values())
        samples.append(
            {"uid": f"s{i}", "reward": scores[i], "bootstrap": bootstrap, "truncated": truncated}
        )
    return {"samples": samples, "gamma": draw(st.sampled_from(_TD_GAMMAS))}


def _td_features(case: dict[str, Any]) -> set[str]:
    """no_samples; truncated_sample; a non-finite / huge V_boot a terminated sample ignores."""
    samples = case["samples"]
    found = set() if samples else {"no_samples"}
    for sample in samples:
        boot = sample["bootstrap"]
        if sample["truncated"]:
            found.add("truncated_sample")
        elif not math.isfinite(boot):
            found.add("padding_nonfinite")
        elif abs(boot) > 88:
            found.add("overflow")
        elif boot != 0:
            found.add("padding_finite")
    return found


_TD_EXAMPLES = (
    # CONTRACT worked example: r 0.2, V_boot 0.8, gamma 0.9 -> terminated 0.2, truncated 0.92.
    {
        "samples": [
            {"uid": "terminated", "reward": 0.2, "bootstrap": 0.8, "truncated": False},
            {"uid": "truncated", "reward": 0.2, "bootstrap": 0.8, "truncated": True},
        ],
        "gamma": 0.9,
    },
    # Each truncated sample bootstraps from its own V_boot; a terminated one ignores its
    # V_boot even when it is NaN; gamma 0 leaves r.
    {
        "samples": [
            {"uid": "s0", "reward": 0.2, "bootstrap": -3.0, "truncated": True},
            {"uid": "s1", "reward": 1.0, "bootstrap": NAN, "truncated": False},
            {"uid": "s2", "reward": -1.0, "bootstrap": 2.5, "truncated": True},
        ],
        "gamma": 0.5,
    },
    {"samples": [{"uid": "s0", "reward": 1.5, "bootstrap": 4.0, "truncated": True}], "gamma": 0.0},
    {"samples": [], "gamma": 0.9},
)


@clause(
    "reward.td_target",
    title="TD target: bootstrap only truncated trajectories, from V_boot",
    statement="""Terminated: target = r; truncated by the collector (task could continue):
    target = r + gamma * V_boot, V_boot the value of the state after the trajectory's last
    response token (the bootstrap value adv.gae takes), never the next episode's first; a
    terminated trajectory's V_boot is ignored, whatever it holds. Worked: r 0.2, V 0.8, gamma
    0.9 -> 0.2 vs 0.92.""",
    ops=("td_targets",),
    strategy=_td_case(),
    examples=_TD_EXAMPLES,
    checks=("count", "values"),
    meets=("no_samples", "truncated_sample", "padding_finite", "padding_nonfinite", "overflow"),
    case_features=_td_features,
)
def check_td_target(ctx: Any, case: dict[str, Any]) -> None:
    """Op ``td_targets(scores (B,), bootstrap_value (B,), truncated (B,) bool, gamma) ->
    (B,)``."""
    samples = case["samples"]
    uids = cs.uids_of(case)
    gamma = case["gamma"]
    scores, rewards = _scores(ctx, [s["reward"] for s in samples])
    bootstrap, received = _scores(ctx, [s["bootstrap"] for s in samples])
    truncated_flags = [bool(s["truncated"]) for s in samples]
    truncated = torch.tensor(truncated_flags, dtype=torch.bool, device=ctx.device)
    expected = [
        oracle.td_target(r, v, cut, gamma, uid=u)
        for r, v, cut, u in zip(rewards, received, truncated_flags, uids, strict=True)
    ]
    scale = [
        abs(r) + (2 * abs(gamma * v) if cut else 0.0)
        for r, v, cut in zip(rewards, received, truncated_flags, strict=True)
    ]
    actual = to_float_list(ctx.call("td_targets", scores, bootstrap, truncated, gamma))
    assert_equal("reward.td_target", "number of targets", len(samples), len(actual), check="count")
    assert_rows_close(
        "reward.td_target",
        "TD targets",
        [[e] for e in expected],
        [[a] for a in actual],
        uids=uids,
        tolerance=ctx.tolerance,
        scale=[[x] for x in scale],
        check="values",
    )

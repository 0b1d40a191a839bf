"""Clauses of the CONTRACT area `kl`.

Profile keys read here: ``kl_ref_clamp`` (clamp of ref - logp in k3, contract default 20;
None = no clamp), ``k3_value_clamp`` (clamp of the k3 value, default 10; None = none),
``kl_is_log_ratio_clamp`` (clamp of logp - old inside the importance ratio, default 20;
slime: None) and ``kl_metric_reduction`` (``token_mean``, the default, or ``sample_mean``
as verl's ``actor/reward_kl_penalty``).

Without a clamp a value may overflow (e.g. k3 with no clamps at ref - logp > 88 in float32):
an infinite value is then accepted where the exact value exceeds the dtype's range, and the
gradient is checked only where the value is finite (CONTRACT kl.estimators).

Checks: ``value`` (the estimator's value on valid positions), ``grad`` (d value / d logp,
weighted by an upstream gradient), ``differentiable`` (a gradient path exists); kl.in_reward:
``padding_zero``, ``rewards``, ``metric``; kl.adaptive_controller: ``value``.

Float tolerance: CONTRACT §4 plus ``16 eps * scale`` where ``scale`` is the rounding
conditioning of the formula at that token (``estimator_conditioning``), e.g.
exp(x) (1 + |x|) + |x| + 1 for k3: exp(x) carries the relative rounding of x = ref - logp.
The oracle receives the inputs rounded to the target's dtype, as the target does. Where a
statistic lies within rounding of a clamp bound the gradient jumps (e.g. 0 vs w kl), so
the expectation there may come from the clamp constants nudged by 16 eps either way
(``nudged_clamps``); everywhere else only the given constants match.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from hypothesis import strategies as st

from rlconform.conformance import strategies as cs
from rlconform.conformance.compare import (
    assert_rows_close,
    assert_scalar_close,
    overflowed,
    with_actual_at,
)
from rlconform.conformance.errors import ClauseMismatch, TargetError
from rlconform.conformance.features import allows
from rlconform.conformance.harness import assert_padding_zero, pad_right, unpad_right
from rlconform.conformance.registry import clause
from rlconform.oracle import kl as oracle

BASE_MODES = ("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3")
STRAIGHT_THROUGH_MODES = tuple(mode + "+" for mode in BASE_MODES)

NAN = float("nan")
INF = float("inf")


# --- strategies (also used by the offpolicy clauses) -------------------------------------


@st.composite
def logprob_value(draw: Any) -> float:
    """A log-prob: mostly ordinary (-6, 0]; sometimes (edge) extreme down to -60, so
    log-ratios exceed 20; (hardening) down to -110, beyond the float32 exp limit 88 and
    at -100; sometimes a round value that makes exact ties."""
    kinds = ["ordinary", "ordinary", "ordinary", "round"] + (["extreme"] if allows("edge") else [])
    kind = draw(st.sampled_from(kinds))
    if kind == "ordinary":
        return draw(cs.finite(-6.0, 0.0))
    if kind == "extreme":
        return draw(cs.finite(-110.0 if allows("hardening") else -60.0, -20.0))
    return draw(st.sampled_from((0.0, -0.5, -1.0) + ((-100.0,) if allows("hardening") else ())))


@st.composite
def logprob_batch(
    draw: Any,
    *,
    fields: tuple[str, ...],
    weights: tuple[str, ...] = (),
    min_samples: int = 1,
    max_samples: int = 5,
) -> dict[str, Any]:
    """A ragged batch with per-token log-prob ``fields`` and ordinary float ``weights``
    (upstream gradients, scores), mask holes, L_i = 0 and L_i = max, garbage padding.
    Token scores at mask holes are rewards on a tool observation: 0 below the edge domain."""
    n = draw(st.integers(cs.fewest_samples(min_samples), max(max_samples, min_samples)))
    samples = []
    for i in range(n):
        length = draw(cs.lengths())
        sample: dict[str, Any] = {"uid": f"s{i}", "mask": draw(cs.loss_mask(length))}
        for field in fields:
            sample[field] = draw(st.lists(logprob_value(), min_size=length, max_size=length))
        for field in weights:
            sample[field] = [
                draw(cs.finite(-2.0, 2.0)) if m or field != "scores" or allows("edge") else 0.0
                for m in sample["mask"]
            ]
        samples.append(sample)
    return {
        "samples": samples,
        "pad_value": draw(cs.pad_values()),
        "extra_pad": draw(st.integers(0, 2)),
    }


KL_FEATURES = (
    "mask_holes",
    "padding_finite",
    "extra_padding",
    "empty_response",
    "actionless_sample",
    "extreme_log_ratio",
    "padding_nonfinite",
    "overflow",
    "zero_width",
)


# --- helpers ------------------------------------------------------------------------------


def target_rows(ctx: Any, rows: Sequence[Sequence[float]]) -> list[list[float]]:
    """Ragged rows as the target receives them (rounded to its dtype), back in float64."""
    return unpad_right(pad_right(rows, dtype=ctx.dtype), [len(r) for r in rows])


def field_rows(ctx: Any, case: dict[str, Any], field: str) -> list[list[float]]:
    return target_rows(ctx, [s[field] for s in case["samples"]])


def padded(
    ctx: Any, case: dict[str, Any], rows: Sequence[Sequence[float]], fill: float
) -> torch.Tensor:
    return ctx.floats(rows, fill=fill, width=cs.width_of_case(case))


def action_mask(ctx: Any, case: dict[str, Any]) -> torch.Tensor:
    """(B, T) int64 action-token mask: the loss mask with its holes, 0 on padding."""
    return pad_right(
        [s["mask"] for s in case["samples"]],
        width=cs.width_of_case(case),
        dtype=torch.int64,
        device=ctx.device,
    )


def gradient(
    clause_id: str, op: str, output: Any, leaf: torch.Tensor, upstream: torch.Tensor
) -> torch.Tensor:
    """d sum(upstream * output) / d leaf through the target's autograd graph.

    An output with no gradient path is a mismatch: the contract fixes d/dlogprob."""
    if not isinstance(output, torch.Tensor) or not output.requires_grad:
        raise ClauseMismatch(
            f"[{clause_id}] {op}: the output carries no gradient with respect to logprob "
            "(detached?); the contract fixes d/dlogprob",
            detail={"what": "gradient", "expected": "a gradient path", "actual": "none"},
            check="differentiable",
        )
    try:
        (grad,) = torch.autograd.grad(
            output, leaf, grad_outputs=upstream.to(output.dtype), allow_unused=True
        )
    except Exception as exc:  # the target's backward failed
        raise TargetError(f"{op} (backward)", exc) from exc
    return torch.zeros_like(leaf) if grad is None else grad


def closest(
    candidates: Sequence[Sequence[Sequence[float]]], actual: Sequence[Sequence[float]]
) -> list[list[float]]:
    """Per element, the candidate expectation nearest to the target's value (NaN matches
    only NaN). Candidates are the oracle's answers for inputs or constants within rounding."""

    def distance(e: float, a: float) -> float:
        if math.isnan(e) or math.isnan(a):
            return 0.0 if math.isnan(e) and math.isnan(a) else math.inf
        return 0.0 if e == a else abs(e - a)

    return [
        [
            min((c[i][t] for c in candidates), key=lambda e: distance(e, a))
            for t, a in enumerate(row)
        ]
        for i, row in enumerate(actual)
    ]


def accept_overflow(
    ctx: Any,
    expected: list[list[float]],
    actual: list[list[float]],
    expected_grad: list[list[float]],
    actual_grad: list[list[float]],
) -> tuple[list[list[float]], list[list[float]]]:
    """Without a clamp a value may overflow: where the exact value exceeds the dtype's range
    an infinite value of the same sign is accepted, and the gradient there is not checked
    (finiteness of the gradient is required only where the value is finite)."""
    positions = overflowed(expected, actual, torch.finfo(ctx.dtype).max)
    return (
        with_actual_at(expected, actual, positions),
        with_actual_at(expected_grad, actual_grad, positions),
    )


def nudged_clamps(clamps: dict[str, float | None], eps: float) -> list[dict[str, float | None]]:
    """The clamp constants as given, all widened and all narrowed by 16 eps (relative): a
    statistic within rounding of a clamp bound may land on either side of it, and the
    gradient jumps there."""

    def scaled(factor: float) -> dict[str, float | None]:
        return {k: None if v is None else v * factor for k, v in clamps.items()}

    return [clamps, scaled(1.0 + 16.0 * eps), scaled(1.0 - 16.0 * eps)]


def estimator_conditioning(
    estimator: str,
    logp: float,
    ref: float,
    *,
    ref_clamp: float | None,
    value_clamp: float | None,
) -> tuple[float, float]:
    """Rounding scales of (value, d value / d logp): each is accurate to about eps * scale.

    A clamped k3 value is exact (the clamp bound, gradient 0): scale 0."""
    diff = abs(logp - ref)
    if estimator in ("k1", "abs"):
        return diff, 0.0
    if estimator == "k2":
        return diff * diff, diff
    value, _ = oracle.k3(logp, ref, ref_clamp=ref_clamp, value_clamp=None)
    if value_clamp is not None and abs(value) > value_clamp:
        return 0.0, 0.0
    x = ref - logp
    if ref_clamp is not None:
        x = max(-ref_clamp, min(ref_clamp, x))
    e = oracle.exp_or_inf(x)
    return e * (1.0 + abs(x)) + abs(x) + 1.0, e * (1.0 + abs(x)) + 1.0


def _weighted_grads(
    upstream: Sequence[Sequence[float]], rows: Sequence[tuple[list[float], list[float]]]
) -> list[list[float]]:
    """upstream * d value / d logp per token, from the oracle's (values, grads) rows."""
    return [
        [w * g for w, g in zip(up, grads, strict=True)]
        for up, (_, grads) in zip(upstream, rows, strict=True)
    ]


def _clamps(ctx: Any) -> dict[str, float | None]:
    return {
        "ref_clamp": ctx.profile.get("kl_ref_clamp", 20.0),
        "value_clamp": ctx.profile.get("k3_value_clamp", 10.0),
    }


# --- kl.estimators and kl.straight_through -------------------------------------------------


def _penalty_case(modes: tuple[str, ...]) -> st.SearchStrategy[dict[str, Any]]:
    return st.tuples(
        logprob_batch(fields=("logp", "ref"), weights=("upstream",)), st.sampled_from(modes)
    ).map(lambda pair: {**pair[0], "mode": pair[1]})


def _check_kl_penalty(ctx: Any, case: dict[str, Any], clause_id: str) -> None:
    samples = case["samples"]
    lengths, uids = cs.lengths_of(case), cs.uids_of(case)
    logp, ref = field_rows(ctx, case, "logp"), field_rows(ctx, case, "ref")
    upstream = field_rows(ctx, case, "upstream")
    mode = case["mode"]
    clamps = _clamps(ctx)
    candidates = [
        [
            oracle.kl_penalty(lp, rf, mode, uid=s["uid"], **c)
            for lp, rf, s in zip(logp, ref, samples, strict=True)
        ]
        for c in nudged_clamps(clamps, ctx.tolerance.eps)
    ]
    estimator, straight = oracle.split_mode(mode, clause_id)
    scales = [
        [estimator_conditioning(estimator, a, b, **clamps) for a, b in zip(lp, rf, strict=True)]
        for lp, rf in zip(logp, ref, strict=True)
    ]
    logprob = padded(ctx, case, logp, case["pad_value"]).requires_grad_(True)
    ref_logprob = padded(ctx, case, ref, case["pad_value"])
    out = ctx.call("kl_penalty", logprob, ref_logprob, mode)
    grad = gradient(clause_id, "kl_penalty", out, logprob, padded(ctx, case, upstream, 0.0))
    actual_values, actual_grads = unpad_right(out, lengths), unpad_right(grad, lengths)
    expected_values, expected_grads = accept_overflow(
        ctx,
        closest([[values for values, _ in rows] for rows in candidates], actual_values),
        actual_values,
        closest([_weighted_grads(upstream, rows) for rows in candidates], actual_grads),
        actual_grads,
    )
    with ctx.check("value"):
        assert_rows_close(
            clause_id,
            f"kl_penalty({mode!r}) value",
            expected_values,
            actual_values,
            uids=uids,
            tolerance=ctx.tolerance,
            scale=[[s[0] for s in row] for row in scales],
        )
    grad_scale = [
        [
            (abs(a - b) if straight else s[1]) * abs(w)
            for a, b, s, w in zip(lp, rf, row, up, strict=True)
        ]
        for lp, rf, row, up in zip(logp, ref, scales, upstream, strict=True)
    ]
    with ctx.check("grad"):
        assert_rows_close(
            clause_id,
            f"kl_penalty({mode!r}) upstream-weighted d/dlogprob",
            expected_grads,
            actual_grads,
            uids=uids,
            tolerance=ctx.tolerance,
            scale=grad_scale,
        )


def _penalty_example(mode: str, samples: list[dict[str, Any]], pad: float, extra: int = 1) -> dict:
    return {"samples": samples, "pad_value": pad, "extra_pad": extra, "mode": mode}


# verl 0.9.1 [ran]: logp - ref = [0.2, -0.4, -29.9, 25.0] gives low_var_kl values
# [0.0187, 0.0918, 10.0, 10.0] and gradients [0.1813, -0.4918, 0, 0].
_VERL_ROW = {
    "uid": "s0",
    "mask": [1, 1, 1, 1],
    "logp": [-0.8, -1.4, -30.0, -5.0],
    "ref": [-1.0, -1.0, -0.1, -30.0],
    "upstream": [1.0, 1.0, 1.0, 1.0],
}
# |ref - logp| above 88 (float32 exp overflows) and above 709 (float64 overflows); L_i = 0.
_OVERFLOW_ROWS = [
    {
        "uid": "s0",
        "mask": [1, 1, 1, 1],
        "logp": [-100.0, -0.25, -1000.0, -99.0],
        "ref": [-0.5, -100.0, -0.1, -1.5],
        "upstream": [1.0, -0.5, 2.0, 1.5],
    },
    {"uid": "s1", "mask": [], "logp": [], "ref": [], "upstream": []},
]
# An exact tie (abs' gradient 0), a mask hole, logp near -100 and ordinary values.
_MIXED_ROWS = [
    {
        "uid": "s0",
        "mask": [1, 0, 1],
        "logp": [-1.0, -2.0, -0.5],
        "ref": [-1.0, -0.5, -2.0],
        "upstream": [1.0, 0.75, -1.25],
    },
    {
        "uid": "s1",
        "mask": [1, 1, 1, 1, 1, 1],
        "logp": [-99.5, -3.0, -0.125, -0.0, -21.0, -6.0],
        "ref": [-0.0, -3.5, -0.25, -100.0, -0.5, -5.0],
        "upstream": [0.5, -1.0, 2.0, 1.0, -0.25, 1.5],
    },
]

_ESTIMATOR_EXAMPLES = (
    _penalty_example("low_var_kl", [_VERL_ROW], NAN),
    _penalty_example("k3", _OVERFLOW_ROWS, INF, 0),
    _penalty_example("abs", _MIXED_ROWS, -1e30),
    _penalty_example("kl", _MIXED_ROWS, 7.5, 2),
    _penalty_example("k1", _OVERFLOW_ROWS, NAN),
    _penalty_example("mse", _MIXED_ROWS, NAN),
    _penalty_example("k2", _OVERFLOW_ROWS, 0.0),
    _penalty_example("low_var_kl", _MIXED_ROWS, NAN),
)


@clause(
    "kl.estimators",
    title="KL estimators k1, abs, k2 (mse), k3 (low_var_kl) and their gradients",
    statement="""k1 = logp - ref; abs = |logp - ref|; k2 (mse) = 0.5 (logp - ref)^2;
    k3 (low_var_kl) = exp(ref - logp) - (ref - logp) - 1 with the profile clamps of
    (ref - logp) (kl_ref_clamp, default +-20) and of the k3 value (k3_value_clamp, default
    +-10). Aliases kl/k1, abs, mse/k2, low_var_kl/k3. The gradient with respect to logp is
    the analytic derivative of the clamped form and is finite everywhere, also for
    |ref - logp| > 88 where float32 exp overflows. Element-wise: padding is ignored.""",
    ops=("kl_penalty",),
    strategy=_penalty_case(BASE_MODES),
    examples=_ESTIMATOR_EXAMPLES,
    checks=("value", "grad", "differentiable"),
    meets=KL_FEATURES,
)
def check_estimators(ctx: Any, case: dict[str, Any]) -> None:
    _check_kl_penalty(ctx, case, "kl.estimators")


_STRAIGHT_THROUGH_EXAMPLES = (
    # verl [ran]: k3+ keeps the k3 values and has gradient [0.2, -0.4, -29.9, 25.0].
    _penalty_example("k3+", [_VERL_ROW], NAN),
    _penalty_example("low_var_kl+", _OVERFLOW_ROWS, INF, 0),
    _penalty_example("abs+", _MIXED_ROWS, -1e30),
    _penalty_example("k1+", _MIXED_ROWS, NAN),
    _penalty_example("kl+", _OVERFLOW_ROWS, 7.5),
    _penalty_example("mse+", _MIXED_ROWS, 0.0),
)


@clause(
    "kl.straight_through",
    title="Straight-through KL: the estimator's value with the k2 gradient",
    statement="""Mode k3+ (and k1+, abs+, low_var_kl+ ...): the forward value is that of the
    named estimator (clamps included), the gradient is the k2 gradient, d/dlogp =
    logp - ref, everywhere (also where the k3 clamps are active).""",
    ops=("kl_penalty",),
    strategy=_penalty_case(STRAIGHT_THROUGH_MODES),
    examples=_STRAIGHT_THROUGH_EXAMPLES,
    checks=("value", "grad", "differentiable"),
    meets=KL_FEATURES,
)
def check_straight_through(ctx: Any, case: dict[str, Any]) -> None:
    _check_kl_penalty(ctx, case, "kl.straight_through")


# --- kl.importance_weighted ----------------------------------------------------------------


def _weighted_case() -> st.SearchStrategy[dict[str, Any]]:
    return st.tuples(
        logprob_batch(fields=("logp", "ref", "old"), weights=("upstream",)),
        st.sampled_from(BASE_MODES),
    ).map(lambda pair: {**pair[0], "mode": pair[1]})


def _weighted_conditioning(
    estimator: str,
    lp: float,
    rf: float,
    od: float,
    *,
    ref_clamp: float | None,
    value_clamp: float | None,
    log_ratio_clamp: float | None,
) -> tuple[float, float]:
    """Rounding scales of w * kl and of its derivative (w carries exp's relative rounding of
    the log-ratio, eps (1 + |logp - old|)). A clamped kl is exact before the weighting."""
    kl, dkl = oracle.estimate(estimator, lp, rf, ref_clamp=ref_clamp, value_clamp=value_clamp)
    kl_scale, dkl_scale = estimator_conditioning(
        estimator, lp, rf, ref_clamp=ref_clamp, value_clamp=value_clamp
    )
    log_ratio = lp - od
    if log_ratio_clamp is not None:
        log_ratio = max(-log_ratio_clamp, min(log_ratio_clamp, log_ratio))
    w = oracle.exp_or_inf(log_ratio)
    spread = 1.0 + abs(log_ratio)
    return (
        w * (abs(kl) * spread + kl_scale),
        w * ((abs(kl) + abs(dkl)) * spread + kl_scale + dkl_scale),
    )


_WEIGHTED_ROWS = [
    # logp - old beyond +-20 (ratio clamp), logp near -100, and w * k3 > 10 while k3 < 10
    # (the value clamp acts on the KL before the weighting: the product may exceed 10).
    {
        "uid": "s0",
        "mask": [1, 1, 1, 1, 1],
        "logp": [-1.0, -0.5, -100.0, -1.0, -2.0],
        "ref": [-3.0, -0.25, -1.0, -1.0, -2.5],
        "old": [-4.0, -30.0, -0.5, -1.0, -1.5],
        "upstream": [1.0, -1.0, 0.5, 2.0, 1.0],
    },
    {"uid": "s1", "mask": [], "logp": [], "ref": [], "old": [], "upstream": []},
    {
        "uid": "s2",
        "mask": [1, 0, 1],
        "logp": [-0.125, -6.0, -21.0],
        "ref": [-0.5, -6.0, -0.5],
        "old": [-0.25, -5.0, -22.0],
        "upstream": [-1.5, 1.0, 0.25],
    },
]

_WEIGHTED_EXAMPLES = tuple(
    {"samples": _WEIGHTED_ROWS, "pad_value": pad, "extra_pad": 1, "mode": mode}
    for mode, pad in (
        ("low_var_kl", NAN),
        ("k3", INF),
        ("kl", -1e30),
        ("k1", 7.5),
        ("abs", NAN),
        ("mse", 0.0),
        ("k2", NAN),
    )
) + tuple(
    # a sample with tokens but no action token (actionless_sample: every token a hole, with
    # garbage there) next to an ordinary one; finite padding
    {
        "samples": [
            {
                "uid": "s0",
                "mask": [1, 1],
                "logp": [-1.0, -0.5],
                "ref": [-1.5, -0.25],
                "old": [-0.75, -0.5],
                "upstream": [1.0, -0.5],
            },
            {
                "uid": "s1",
                "mask": [0, 0],
                "logp": [-2.0, -9.0],
                "ref": [-0.5, -1.0],
                "old": [-4.0, -1.0],
                "upstream": [1.0, 1.0],
            },
        ],
        "pad_value": 7.5,
        "extra_pad": 1,
        "mode": mode,
    }
    for mode in ("low_var_kl", "k1")
)


@clause(
    "kl.importance_weighted",
    title="Importance-weighted (unbiased) KL",
    statement="""kl = w * kl_est(logp, ref) with w = exp(clamp(logp - old,
    +-kl_is_log_ratio_clamp)) (slime use_unbiased_kl; profile clamp default 20, slime none).
    The ratio carries gradient (it is not detached: the estimator of KL(pi || ref) from
    samples of old needs it): d/dlogp = w' kl_est + w kl_est'. The k3 value clamp applies to
    the KL before it is weighted. Element-wise: padding is ignored.""",
    ops=("importance_weighted_kl",),
    strategy=_weighted_case(),
    examples=_WEIGHTED_EXAMPLES,
    checks=("value", "grad", "differentiable"),
    meets=KL_FEATURES,
)
def check_importance_weighted(ctx: Any, case: dict[str, Any]) -> None:
    clause_id = "kl.importance_weighted"
    samples = case["samples"]
    lengths, uids = cs.lengths_of(case), cs.uids_of(case)
    logp, ref = field_rows(ctx, case, "logp"), field_rows(ctx, case, "ref")
    old, upstream = field_rows(ctx, case, "old"), field_rows(ctx, case, "upstream")
    mode = case["mode"]
    clamps = dict(_clamps(ctx), log_ratio_clamp=ctx.profile.get("kl_is_log_ratio_clamp", 20.0))
    candidates = [
        [
            oracle.importance_weighted_kl(lp, rf, od, mode, uid=s["uid"], **c)
            for lp, rf, od, s in zip(logp, ref, old, samples, strict=True)
        ]
        for c in nudged_clamps(clamps, ctx.tolerance.eps)
    ]
    estimator, _ = oracle.split_mode(mode, clause_id)
    scales = [
        [
            _weighted_conditioning(estimator, a, b, c, **clamps)
            for a, b, c in zip(lp, rf, od, strict=True)
        ]
        for lp, rf, od in zip(logp, ref, old, strict=True)
    ]
    logprob = padded(ctx, case, logp, case["pad_value"]).requires_grad_(True)
    out = ctx.call(
        "importance_weighted_kl",
        logprob,
        padded(ctx, case, ref, case["pad_value"]),
        padded(ctx, case, old, case["pad_value"]),
        mode,
    )
    grad = gradient(
        clause_id, "importance_weighted_kl", out, logprob, padded(ctx, case, upstream, 0.0)
    )
    actual_values, actual_grads = unpad_right(out, lengths), unpad_right(grad, lengths)
    expected_values, expected_grads = accept_overflow(
        ctx,
        closest([[values for values, _ in rows] for rows in candidates], actual_values),
        actual_values,
        closest([_weighted_grads(upstream, rows) for rows in candidates], actual_grads),
        actual_grads,
    )
    with ctx.check("value"):
        assert_rows_close(
            clause_id,
            f"importance_weighted_kl({mode!r}) value",
            expected_values,
            actual_values,
            uids=uids,
            tolerance=ctx.tolerance,
            scale=[[s[0] for s in row] for row in scales],
        )
    with ctx.check("grad"):
        assert_rows_close(
            clause_id,
            f"importance_weighted_kl({mode!r}) upstream-weighted d/dlogprob",
            expected_grads,
            actual_grads,
            uids=uids,
            tolerance=ctx.tolerance,
            scale=[
                [s[1] * abs(w) for s, w in zip(row, up, strict=True)]
                for row, up in zip(scales, upstream, strict=True)
            ],
        )


# --- kl.in_reward --------------------------------------------------------------------------


def _in_reward_case() -> st.SearchStrategy[dict[str, Any]]:
    return st.tuples(
        logprob_batch(fields=("old", "ref"), weights=("scores",), min_samples=0),
        st.sampled_from(BASE_MODES),
        st.one_of(st.sampled_from((0.0, 0.001, 0.1, 1.0)), cs.finite(0.0, 2.0)),
    ).map(lambda t: {**t[0], "mode": t[1], "beta": t[2]})


_IN_REWARD_ROWS = [
    {
        "uid": "s0",
        "mask": [1, 0, 1, 1],
        "old": [-0.5, -3.0, -100.0, -1.25],
        "ref": [-0.75, -0.5, -0.5, -1.25],
        "scores": [0.0, 0.0, 0.0, 1.0],
    },
    {"uid": "s1", "mask": [], "old": [], "ref": [], "scores": []},
    # No action token at all (tool output only): no KL, and nothing for the metric.
    {"uid": "s2", "mask": [0, 0], "old": [-2.0, -1.0], "ref": [-0.5, -4.0], "scores": [0.0, 0.5]},
    {
        "uid": "s3",
        "mask": [1, 1, 1, 1, 1, 1],
        "old": [-1.0, -2.0, -0.25, -30.0, -0.125, -4.0],
        "ref": [-1.5, -1.0, -0.25, -0.5, -99.0, -3.0],
        "scores": [0.0, 0.0, 0.0, 0.0, 0.0, -1.0],
    },
]

_IN_REWARD_EXAMPLES = (
    {"samples": _IN_REWARD_ROWS, "pad_value": NAN, "extra_pad": 1, "mode": "kl", "beta": 0.1},
    {
        "samples": _IN_REWARD_ROWS,
        "pad_value": INF,
        "extra_pad": 0,
        "mode": "low_var_kl",
        "beta": 0.05,
    },
    {"samples": _IN_REWARD_ROWS, "pad_value": -1e30, "extra_pad": 2, "mode": "abs", "beta": 1.0},
    {"samples": _IN_REWARD_ROWS, "pad_value": 7.5, "extra_pad": 1, "mode": "mse", "beta": 0.5},
    {"samples": [], "pad_value": NAN, "extra_pad": 2, "mode": "kl", "beta": 0.1},
)


@clause(
    "kl.in_reward",
    title="KL penalty in the reward",
    statement="""token_rewards = token_scores - beta * kl * valid_mask with kl from old_logprob
    vs ref_logprob (valid_mask = action tokens: no penalty on mask holes); padding stays 0
    even when the padded log-probs are NaN/inf/garbage. The reported KL metric is its mean
    over action tokens (kl_metric_reduction: token_mean, or sample_mean where a sample
    without action tokens counts as 0, as verl).""",
    ops=("apply_kl_in_reward",),
    strategy=_in_reward_case(),
    examples=_IN_REWARD_EXAMPLES,
    checks=("padding_zero", "rewards", "metric"),
    meets=(*KL_FEATURES, "hole_reward", "empty_batch", "no_samples"),
)
def check_in_reward(ctx: Any, case: dict[str, Any]) -> None:
    clause_id = "kl.in_reward"
    samples = case["samples"]
    lengths, uids = cs.lengths_of(case), cs.uids_of(case)
    old, ref = field_rows(ctx, case, "old"), field_rows(ctx, case, "ref")
    scores = field_rows(ctx, case, "scores")
    masks = [s["mask"] for s in samples]
    mode, beta = case["mode"], float(case["beta"])
    clamps = _clamps(ctx)
    reduction = ctx.profile.get("kl_metric_reduction", "token_mean")
    expected = [
        oracle.kl_in_reward(sc, od, rf, m, beta=beta, mode=mode, uid=s["uid"], **clamps)
        for sc, od, rf, m, s in zip(scores, old, ref, masks, samples, strict=True)
    ]
    expected_metric = oracle.kl_in_reward_metric(
        old, ref, masks, mode=mode, reduction=reduction, **clamps
    )
    estimator, _ = oracle.split_mode(mode, clause_id)
    kl_sizes = [
        [
            abs(oracle.estimate(estimator, a, b, **clamps)[0])
            + estimator_conditioning(estimator, a, b, **clamps)[0]
            for a, b in zip(od, rf, strict=True)
        ]
        for od, rf in zip(old, ref, strict=True)
    ]
    token_rewards, metric = ctx.call(
        "apply_kl_in_reward",
        padded(ctx, case, scores, 0.0),
        padded(ctx, case, old, case["pad_value"]),
        padded(ctx, case, ref, case["pad_value"]),
        action_mask(ctx, case),
        beta,
        mode,
    )
    with ctx.check("padding_zero"):
        assert_padding_zero(clause_id, "token_level_rewards", token_rewards, lengths, uids)
    with ctx.check("rewards"):
        assert_rows_close(
            clause_id,
            f"token_level_rewards (mode {mode!r}, beta {beta!r})",
            expected,
            unpad_right(token_rewards, lengths),
            uids=uids,
            tolerance=ctx.tolerance,
            scale=[
                [abs(s) + beta * k for s, k in zip(sc, row, strict=True)]
                for sc, row in zip(scores, kl_sizes, strict=True)
            ],
        )
    metric_scale = math.fsum(
        math.fsum(k for k, m in zip(row, mask, strict=True) if m)
        for row, mask in zip(kl_sizes, masks, strict=True)
    )
    assert_scalar_close(
        clause_id,
        f"KL metric ({reduction})",
        expected_metric,
        float(metric),
        tolerance=ctx.tolerance,
        scale=metric_scale,
        check="metric",
    )


# --- kl.adaptive_controller ----------------------------------------------------------------


def _real(lo: float, hi: float) -> st.SearchStrategy[float]:
    """Controller arithmetic is Python float (float64) in every framework."""
    return st.floats(lo, hi, allow_nan=False, allow_infinity=False)


@st.composite
def _controller_case(draw: Any) -> dict[str, Any]:
    steps = draw(
        st.lists(
            st.tuples(
                st.one_of(_real(-0.5, 5.0), st.sampled_from((0.0, 0.1, 1.0))),
                st.sampled_from((1, 8, 64, 256)),
            ),
            min_size=1,
            max_size=6,
        )
    )
    return {
        "kind": draw(st.sampled_from(("adaptive", "adaptive", "fixed"))),
        "init": draw(_real(0.001, 1.0)),
        "target_kl": draw(st.one_of(st.sampled_from((0.1, 6.0)), _real(0.01, 2.0))),
        "horizon": draw(st.sampled_from((1, 100, 10000))),
        "steps": [list(step) for step in steps],
    }


_CONTROLLER_EXAMPLES = (
    # verl [ran], target 0.05, n_steps / horizon = 0.1: 0.1 -> 0.1 -> 0.102 -> 0.09996 -> 0.101959.
    {
        "kind": "adaptive",
        "init": 0.1,
        "target_kl": 0.05,
        "horizon": 100,
        "steps": [[0.05, 10], [0.5, 10], [0.0, 10], [0.06, 10]],
    },
    # Errors inside the clip (+-0.1), a negative k1 KL, and n_steps > horizon.
    {
        "kind": "adaptive",
        "init": 0.2,
        "target_kl": 1.0,
        "horizon": 4,
        "steps": [[1.1, 8], [0.9, 2], [-0.3, 1], [3.0, 1]],
    },
    {
        "kind": "fixed",
        "init": 0.001,
        "target_kl": 0.1,
        "horizon": 10000,
        "steps": [[5.0, 256], [0.0, 1]],
    },
)


@clause(
    "kl.adaptive_controller",
    title="Fixed and adaptive KL coefficient controllers",
    statement="""Adaptive: err = clip(current_kl / target_kl - 1, -0.2, 0.2); value *= 1 +
    err * n_steps / horizon, checked over a sequence of updates, each fed the previous
    result. Fixed: the value never changes.""",
    ops=("kl_controller_update",),
    strategy=_controller_case(),
    examples=_CONTROLLER_EXAMPLES,
    checks=("value",),
    meets=(),
)
def check_adaptive_controller(ctx: Any, case: dict[str, Any]) -> None:
    clause_id = "kl.adaptive_controller"
    kind, target_kl, horizon = case["kind"], case["target_kl"], case["horizon"]
    expected, actual = float(case["init"]), float(case["init"])
    for index, (current_kl, n_steps) in enumerate(case["steps"]):
        expected = oracle.kl_controller_update(
            kind, expected, current_kl, n_steps, target_kl=target_kl, horizon=horizon
        )
        actual = float(
            ctx.call("kl_controller_update", kind, actual, current_kl, n_steps, target_kl, horizon)
        )
        assert_scalar_close(
            clause_id,
            f"{kind} coefficient after update {index} (current_kl={current_kl!r}, "
            f"n_steps={n_steps}, target_kl={target_kl!r}, horizon={horizon!r})",
            expected,
            actual,
            tolerance=ctx.tolerance,
            check="value",
        )

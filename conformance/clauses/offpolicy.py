"""Clauses of the CONTRACT area `offpolicy`.

Operations take the action-token mask (``response_mask``: 0 on mask holes and padding) and
return (B, T) weights or masks. They are compared on action tokens; what an operation puts
at padding and mask-0 positions is ignored by what consumes it, so any finite value passes
there (NaN/inf would poison a masked multiply: check ``off_action_finite``). Padded inputs
are garbage and must not leak into action tokens. Thresholds are operation arguments drawn
by the case. Checks: ``weights`` (or ``mask``, OPSM), ``off_action_finite``, ``value``
(logprob_gap).

Profile keys read here: ``is_sequence_log_ratio`` (the contract's ``sequence_log_ratio``:
``sum``, the default: the sequence ratio is exp of the summed token log-ratios, as TRL;
``mean``: exp of their mean, the geometric mean), ``is_log_ratio_clamp`` (a clamp of the
log-ratio before exp, verl 20; default none) and ``logprob_gap_reduction`` (the contract's
``reduction``: ``token_mean``, the default, or ``sample_mean`` as slime's per-sample means
averaged over samples).

Tolerance: a ratio exp(x) is accurate to about eps (1 + |x|) relative (x's own rounding),
so values get ``scale = |w| (1 + |x|)``. A keep/reject decision whose statistic lies within
rounding of its threshold may go either way: the check accepts the oracle's answer for the
inputs nudged by 16 eps (1 + |x|) in either direction (never for x = 0 exactly, where a
ratio of exactly 1 is exact in every dtype, so the inclusive bounds stay checked). Drawn
thresholds avoid 1.0: for tiny x a float32 exp rounds to exactly 1 while float64 does not,
and a band edge at 1 (or the band [1, 1]) would then be undecidable; pinned cases check
those edges with log-ratios that are exactly 0.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
from hypothesis import strategies as st

from rlconform.conformance import strategies as cs
from rlconform.conformance.clauses.kl import (
    action_mask,
    closest,
    field_rows,
    logprob_batch,
    padded,
)
from rlconform.conformance.compare import assert_rows_close, assert_rows_equal, assert_scalar_close
from rlconform.conformance.errors import ClauseMismatch
from rlconform.conformance.features import allows
from rlconform.conformance.harness import to_float_list, unpad_right
from rlconform.conformance.registry import clause
from rlconform.oracle import offpolicy as oracle

NAN = float("nan")
INF = float("inf")

Rows = list[list[float]]


def _nudged(base: Rows, other: Rows, direction: float, eps: float) -> Rows:
    """``base`` moved so that each (other - base) grows by 16 eps (1 + |other - base|)
    in ``direction``; tokens where other == base stay exact."""
    return [
        [
            b - direction * 16.0 * eps * (1.0 + abs(o - b)) if o != b else b
            for b, o in zip(row, orow, strict=True)
        ]
        for row, orow in zip(base, other, strict=True)
    ]


def _ratio_candidates(
    ctx: Any, old: Rows, rollout: Rows, weights: Callable[[Rows, Rows], Rows]
) -> list[Rows]:
    """The oracle's weights for the given inputs and for x = old - rollout nudged both ways."""
    eps = ctx.tolerance.eps
    return [
        weights(old, rollout),
        weights(old, _nudged(rollout, old, 1.0, eps)),
        weights(old, _nudged(rollout, old, -1.0, eps)),
    ]


def _ratio_scale(values: Rows, old: Rows, rollout: Rows, masks: Sequence[Sequence[int]]) -> Rows:
    """|w| (1 + |x|) per action token, x = old - rollout (token-level ratios)."""
    return [
        [
            abs(w) * (1.0 + abs(o - r)) if m else 0.0
            for w, o, r, m in zip(vrow, orow, rrow, mrow, strict=True)
        ]
        for vrow, orow, rrow, mrow in zip(values, old, rollout, masks, strict=True)
    ]


def _check_weights(
    ctx: Any,
    case: dict[str, Any],
    clause_id: str,
    op: str,
    weights: Callable[[Rows, Rows], Rows],
    args: tuple[Any, ...],
    spread: Callable[[Rows, Rows, Sequence[Sequence[int]]], Rows] = _ratio_scale,
) -> None:
    lengths, uids = cs.lengths_of(case), cs.uids_of(case)
    masks = [s["mask"] for s in case["samples"]]
    old, rollout = field_rows(ctx, case, "old"), field_rows(ctx, case, "rollout")
    out = ctx.call(
        op,
        padded(ctx, case, old, case["pad_value"]),
        padded(ctx, case, rollout, case["pad_value"]),
        action_mask(ctx, case),
        *args,
    )
    with ctx.check("off_action_finite"):
        assert_off_actions_finite(clause_id, f"{op} weights", out, masks, uids)
    actual = on_actions(unpad_right(out, lengths), masks)
    expected = closest(_ratio_candidates(ctx, old, rollout, weights), actual)
    with ctx.check("weights"):
        assert_rows_close(
            clause_id,
            f"{op} weights (arguments {args!r}, action tokens)",
            expected,
            actual,
            uids=uids,
            tolerance=ctx.tolerance,
            scale=spread(expected, old, rollout, masks),
        )


def on_actions(rows: Rows, masks: Sequence[Sequence[int]]) -> Rows:
    """Rows with every mask-0 position set to 0 (those positions are ignored)."""
    return [
        [float(v) if m else 0.0 for v, m in zip(row, mask, strict=True)]
        for row, mask in zip(rows, masks, strict=True)
    ]


def assert_off_actions_finite(
    clause_id: str, what: str, out: Any, masks: Sequence[Sequence[int]], uids: Sequence[Any]
) -> None:
    """Weights and masks at padding and mask-0 positions may be anything finite."""
    for i, row in enumerate(to_float_list(out)):
        for t, value in enumerate(row):
            action = t < len(masks[i]) and masks[i][t]
            if not action and not math.isfinite(value):
                where = "padding" if t >= len(masks[i]) else "a mask-0 token"
                raise ClauseMismatch(
                    f"[{clause_id}] {what}: {value!r} on {where} at sample uid={uids[i]!r}, "
                    f"column {t} (L_i={len(masks[i])}): a masked multiply of the loss would "
                    "turn it into NaN (any finite value is ignored)",
                    detail={"what": what, "uid": uids[i], "token": t, "actual": value},
                )


def _clamp(ctx: Any) -> float | None:
    return ctx.profile.get("is_log_ratio_clamp")


OFFPOLICY_FEATURES = (
    "mask_holes",
    "padding_finite",
    "extra_padding",
    "empty_response",
    "actionless_sample",
    "empty_batch",
    "no_samples",
    "extreme_log_ratio",
    "padding_nonfinite",
    "overflow",
    "zero_width",
)


def _all_rejected(weights: Callable[[dict[str, Any]], Rows]) -> Callable[[Any], set[str]]:
    """A feature function: ``all_rejected`` when the rule removes every action token of a
    batch that has some (the oracle's answer on the case's own float64 values)."""

    def features(case: Any) -> set[str]:
        masks = [s["mask"] for s in case["samples"]]
        if not any(any(m) for m in masks):
            return set()
        kept = weights(case)
        return set() if any(w for row in kept for w in row) else {"all_rejected"}

    return features


def _case_rows(case: dict[str, Any], field: str) -> Rows:
    return [list(s[field]) for s in case["samples"]]


def _keep_one(case: dict[str, Any]) -> dict[str, Any]:
    """Below the edge domain, give the first action token a ratio of exactly 1 (inside every
    band drawn here), so that a band cannot reject the whole batch (``all_rejected``)."""
    if allows("edge"):
        return case
    for sample in case["samples"]:
        if 1 in sample["mask"]:
            t = sample["mask"].index(1)
            sample["rollout"][t] = sample["old"][t]
            break
    return case


def _ratio_case(**thresholds: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    return st.tuples(
        logprob_batch(fields=("old", "rollout"), min_samples=0), st.fixed_dictionaries(thresholds)
    ).map(lambda pair: {**pair[0], **pair[1]})


# Ratios above and below the bounds, a log-ratio of +99.5 (exp overflows float32), -99.5,
# an exact ratio of 1, a mask hole with an extreme log-ratio, L_i = 0.
_RATIO_ROWS = [
    {
        "uid": "s0",
        "mask": [1, 1, 0, 1, 1, 1],
        "old": [-0.5, -3.0, -0.5, -0.0, -100.0, -1.0],
        "rollout": [-1.5, -0.25, -100.0, -99.5, -0.5, -1.0],
    },
    {"uid": "s1", "mask": [], "old": [], "rollout": []},
    {"uid": "s2", "mask": [1, 1, 1], "old": [-2.0, -0.75, -4.0], "rollout": [-2.25, -0.5, -3.5]},
]


def _ratio_examples(**thresholds: Any) -> tuple[dict[str, Any], ...]:
    return tuple(
        {"samples": _RATIO_ROWS, "pad_value": pad, "extra_pad": extra, **thresholds}
        for pad, extra in ((NAN, 1), (INF, 0), (-1e30, 2))
    )


# --- offpolicy.tis -------------------------------------------------------------------------


@clause(
    "offpolicy.tis",
    title="Truncated importance sampling weights",
    statement="""w = clamp(exp(old - rollout), low, high) per action token (the weight that
    multiplies the per-token policy loss; slime defaults low 0, high 2); 0 off the action
    tokens, whatever the padded log-probs hold.""",
    ops=("tis_weights",),
    strategy=_ratio_case(
        low=st.sampled_from((0.0, 0.5, 0.8, None)), high=st.sampled_from((1.2, 2.0, 5.0))
    ),
    examples=_ratio_examples(low=0.0, high=2.0) + _ratio_examples(low=0.5, high=1.2)[:1],
    checks=("off_action_finite", "weights"),
    meets=OFFPOLICY_FEATURES,
)
def check_tis(ctx: Any, case: dict[str, Any]) -> None:
    masks = [s["mask"] for s in case["samples"]]
    low, high = case["low"], case["high"]

    def weights(old: Rows, rollout: Rows) -> Rows:
        return [
            oracle.tis_weights(o, r, m, low=low, high=high, log_ratio_clamp=_clamp(ctx))
            for o, r, m in zip(old, rollout, masks, strict=True)
        ]

    _check_weights(ctx, case, "offpolicy.tis", "tis_weights", weights, (low, high))


# --- offpolicy.icepop ----------------------------------------------------------------------


def _band(lows: tuple[Any, ...], highs: tuple[Any, ...]) -> st.SearchStrategy[tuple[Any, Any]]:
    """(low, high) with every drawn low below every drawn high."""
    return st.tuples(st.sampled_from(lows), st.sampled_from(highs))


def _icepop_case() -> st.SearchStrategy[dict[str, Any]]:
    return st.tuples(
        logprob_batch(fields=("old", "rollout"), min_samples=0),
        _band((0.0, 0.5, 0.8), (1.2, 2.0, 5.0)),
    ).map(lambda pair: _keep_one({**pair[0], "low": pair[1][0], "high": pair[1][1]}))


@clause(
    "offpolicy.icepop",
    title="ICEPOP: reject tokens whose ratio leaves the band",
    statement="""w = ratio = exp(old - rollout) where low <= ratio <= high (bounds inclusive),
    0 outside (rejection, not clamping); compared on action tokens, any finite value off
    them.""",
    ops=("icepop_weights",),
    strategy=_icepop_case(),
    # [1, 1] keeps only ratios of exactly 1: both bounds are inclusive.
    examples=_ratio_examples(low=0.5, high=2.0) + _ratio_examples(low=1.0, high=1.0)[:1],
    checks=("off_action_finite", "weights"),
    meets=(*OFFPOLICY_FEATURES, "all_rejected"),
    case_features=_all_rejected(
        lambda c: [
            oracle.icepop_weights(o, r, s["mask"], low=c["low"], high=c["high"])
            for o, r, s in zip(_case_rows(c, "old"), _case_rows(c, "rollout"), c["samples"])
        ]
    ),
)
def check_icepop(ctx: Any, case: dict[str, Any]) -> None:
    masks = [s["mask"] for s in case["samples"]]
    low, high = case["low"], case["high"]

    def weights(old: Rows, rollout: Rows) -> Rows:
        return [
            oracle.icepop_weights(o, r, m, low=low, high=high, log_ratio_clamp=_clamp(ctx))
            for o, r, m in zip(old, rollout, masks, strict=True)
        ]

    _check_weights(ctx, case, "offpolicy.icepop", "icepop_weights", weights, (low, high))


# --- offpolicy.opsm ------------------------------------------------------------------------


@st.composite
def _opsm_case(draw: Any) -> dict[str, Any]:
    case = draw(logprob_batch(fields=("logp", "old"), min_samples=0))
    for sample in case["samples"]:
        sample["advantage"] = draw(
            st.one_of(cs.finite(-2.0, 2.0), st.sampled_from((0.0, -1.0, 1.0, -1e-6)))
        )
    if not allows("edge"):
        # a negative advantage on every sample could mask the whole batch (edge)
        for sample in case["samples"][:1]:
            sample["advantage"] = abs(sample["advantage"])
    case["delta"] = draw(st.sampled_from((1e-4, 0.05, 0.5, 0.0)))
    return case


_OPSM_ROWS = [
    # A < 0, seq_kl = (1 + 0.5 + 0) / 3 = 0.5 > delta: masked out entirely.
    {
        "uid": "s0",
        "mask": [1, 1, 1],
        "logp": [-2.0, -1.0, -0.5],
        "old": [-1.0, -0.5, -0.5],
        "advantage": -1.0,
    },
    # A >= 0 with the same large seq_kl: kept.
    {
        "uid": "s1",
        "mask": [1, 1, 1],
        "logp": [-2.0, -1.0, -0.5],
        "old": [-1.0, -0.5, -0.5],
        "advantage": 0.5,
    },
    # A = 0 exactly: kept.
    {"uid": "s2", "mask": [1, 1], "logp": [-3.0, -1.0], "old": [-1.0, -1.0], "advantage": 0.0},
    # A < 0 but seq_kl < 0 (the policy moved towards the sample): kept. The hole's huge
    # (old - logp) would flip the decision if it were counted.
    {
        "uid": "s3",
        "mask": [1, 0, 1, 1],
        "logp": [-0.5, -100.0, -1.0, -0.25],
        "old": [-1.0, -0.5, -1.5, -0.25],
        "advantage": -2.0,
    },
    {"uid": "s4", "mask": [], "logp": [], "old": [], "advantage": -1.0},
    # A < 0, seq_kl = 0.0625 (the mean, not the sum 0.1875): dropped for delta 1e-4, kept
    # for delta 0.1.
    {
        "uid": "s5",
        "mask": [1, 1, 1],
        "logp": [-1.0625, -2.0625, -0.5625],
        "old": [-1.0, -2.0, -0.5],
        "advantage": -0.5,
    },
]

_OPSM_EXAMPLES = tuple(
    {"samples": _OPSM_ROWS, "pad_value": pad, "extra_pad": extra, "delta": delta}
    for pad, extra, delta in ((NAN, 1, 1e-4), (INF, 0, 0.1), (-1e30, 2, 0.0))
)


@clause(
    "offpolicy.opsm",
    title="Off-policy sequence masking (OPSM)",
    statement="""seq_kl = sum((old - logp) mask) / sum(mask) over the action tokens; a
    sequence with A < 0 and seq_kl > delta is masked out entirely (every token 0);
    otherwise the mask is the action-token mask (compared on action tokens; any finite value
    off them). Advantages arrive as (B, T), constant along each sequence.""",
    ops=("opsm_mask",),
    strategy=_opsm_case(),
    examples=_OPSM_EXAMPLES,
    checks=("off_action_finite", "mask"),
    meets=(*OFFPOLICY_FEATURES, "all_rejected"),
    case_features=_all_rejected(
        lambda c: [
            oracle.opsm_keep(lp, od, s["mask"], s["advantage"], delta=c["delta"])
            for lp, od, s in zip(_case_rows(c, "logp"), _case_rows(c, "old"), c["samples"])
        ]
    ),
)
def check_opsm(ctx: Any, case: dict[str, Any]) -> None:
    clause_id = "offpolicy.opsm"
    samples = case["samples"]
    lengths, uids = cs.lengths_of(case), cs.uids_of(case)
    masks = [s["mask"] for s in samples]
    logp, old = field_rows(ctx, case, "logp"), field_rows(ctx, case, "old")
    advantages = [float(s["advantage"]) for s in samples]
    delta = case["delta"]
    out = ctx.call(
        "opsm_mask",
        padded(ctx, case, logp, case["pad_value"]),
        padded(ctx, case, old, case["pad_value"]),
        padded(
            ctx,
            case,
            [[a] * n for a, n in zip(advantages, lengths, strict=True)],
            case["pad_value"],
        ),
        action_mask(ctx, case),
        delta,
    )
    with ctx.check("off_action_finite"):
        assert_off_actions_finite(clause_id, "opsm mask", out, masks, uids)
    actual = on_actions(unpad_right(out, lengths), masks)

    def keep(logp_rows: Rows) -> Rows:
        return [
            [float(k) for k in oracle.opsm_keep(lp, od, m, a, delta=delta)]
            for lp, od, m, a in zip(logp_rows, old, masks, advantages, strict=True)
        ]

    eps = ctx.tolerance.eps
    candidates = [
        keep(logp),
        keep(_nudged(logp, old, 1.0, eps)),
        keep(_nudged(logp, old, -1.0, eps)),
    ]
    assert_rows_equal(
        clause_id,
        f"opsm mask (delta {delta!r}, action tokens)",
        closest(candidates, actual),
        actual,
        uids=uids,
        check="mask",
    )


# --- offpolicy.is_correction ---------------------------------------------------------------


def _is_case() -> st.SearchStrategy[dict[str, Any]]:
    return st.tuples(
        logprob_batch(fields=("old", "rollout"), min_samples=0),
        st.sampled_from(oracle.IS_CORRECTION_MODES),
        _band((None, 0.5, 0.8), (3.0, 3.0, 2.0, 1.2)),
    ).map(lambda t: _keep_one({**t[0], "mode": t[1], "clip_min": t[2][0], "clip_max": t[2][1]}))


def _sequence_spread(
    values: Rows, old: Rows, rollout: Rows, masks: Sequence[Sequence[int]]
) -> Rows:
    """|w| (1 + sum |x_t|): a sequence ratio carries the rounding of all its log-ratios."""
    scales = []
    for vrow, orow, rrow, mrow in zip(values, old, rollout, masks, strict=True):
        spread = 1.0 + math.fsum(abs(o - r) for o, r, m in zip(orow, rrow, mrow, strict=True) if m)
        scales.append([abs(w) * spread if m else 0.0 for w, m in zip(vrow, mrow, strict=True)])
    return scales


_IS_EXAMPLES = tuple(
    {
        "samples": _RATIO_ROWS,
        "pad_value": pad,
        "extra_pad": 1,
        "mode": mode,
        "clip_min": low,
        "clip_max": high,
    }
    for mode, pad, low, high in (
        ("token_truncate", NAN, None, 3.0),
        ("token_mask", INF, 0.5, 3.0),
        ("sequence_truncate", -1e30, None, 3.0),
        ("sequence_mask", NAN, None, 3.0),
        ("token_mask", 7.5, 1.0, 1.0),
    )
) + (
    # Sequence ratios near 1 that pass the band: exp(sum) = exp(0.25) vs exp(mean).
    {
        "samples": [
            {
                "uid": "s0",
                "mask": [1, 0, 1],
                "old": [-1.0, -0.5, -2.0],
                "rollout": [-1.125, -9.0, -2.125],
            },
            {"uid": "s1", "mask": [1, 1], "old": [-0.5, -1.5], "rollout": [-0.25, -1.5]},
        ],
        "pad_value": NAN,
        "extra_pad": 1,
        "mode": "sequence_mask",
        "clip_min": 0.5,
        "clip_max": 3.0,
    },
)


@clause(
    "offpolicy.is_correction",
    title="Rollout-vs-train importance-sampling correction (TRL modes)",
    statement="""token_truncate / token_mask: r_t = exp(old_t - rollout_t); sequence_truncate /
    sequence_mask: one ratio per sequence, exp of the sum over action tokens of the
    log-ratios (profile is_sequence_log_ratio=sum, TRL; =mean: geometric mean). *_truncate
    clamps r to [clip_min, clip_max]; *_mask keeps r inside the band (inclusive) and gives
    0 outside. clip_max default 3.0, clip_min default none. Compared on action tokens; any
    finite value off them. Profile is_log_ratio_clamp: a clamp before exp.""",
    ops=("is_correction_weights",),
    strategy=_is_case(),
    examples=_IS_EXAMPLES,
    checks=("off_action_finite", "weights"),
    meets=(*OFFPOLICY_FEATURES, "all_rejected"),
    case_features=_all_rejected(
        lambda c: [
            oracle.is_correction_weights(
                o, r, s["mask"], mode=c["mode"], clip_min=c["clip_min"], clip_max=c["clip_max"]
            )
            for o, r, s in zip(_case_rows(c, "old"), _case_rows(c, "rollout"), c["samples"])
        ]
    ),
)
def check_is_correction(ctx: Any, case: dict[str, Any]) -> None:
    masks = [s["mask"] for s in case["samples"]]
    mode, clip_min, clip_max = case["mode"], case["clip_min"], case["clip_max"]
    sequence_log_ratio = ctx.profile.get("is_sequence_log_ratio", "sum")

    def weights(old: Rows, rollout: Rows) -> Rows:
        return [
            oracle.is_correction_weights(
                o,
                r,
                m,
                mode=mode,
                clip_min=clip_min,
                clip_max=clip_max,
                sequence_log_ratio=sequence_log_ratio,
                log_ratio_clamp=_clamp(ctx),
            )
            for o, r, m in zip(old, rollout, masks, strict=True)
        ]

    _check_weights(
        ctx,
        case,
        "offpolicy.is_correction",
        "is_correction_weights",
        weights,
        (mode, clip_min, clip_max),
        _sequence_spread if mode.startswith("sequence_") else _ratio_scale,
    )


# --- offpolicy.logprob_gap -----------------------------------------------------------------


_GAP_EXAMPLES = (
    {"samples": _RATIO_ROWS, "pad_value": NAN, "extra_pad": 1},
    {"samples": _RATIO_ROWS, "pad_value": 7.5, "extra_pad": 2},
    # Only tool tokens: nothing to average.
    {
        "samples": [{"uid": "s0", "mask": [0, 0], "old": [-1.0, -2.0], "rollout": [-3.0, -0.5]}],
        "pad_value": INF,
        "extra_pad": 1,
    },
    {"samples": [], "pad_value": NAN, "extra_pad": 1},
)


@clause(
    "offpolicy.logprob_gap",
    title="Train-vs-rollout log-prob gap metric",
    statement="""train_rollout_logprob_abs_diff = mean over action tokens of |old - rollout|
    (profile logprob_gap_reduction: token_mean over the batch, or sample_mean, a sample
    without action tokens counting as 0); padding and mask holes do not count; nothing to
    average gives 0.""",
    ops=("logprob_gap",),
    strategy=logprob_batch(fields=("old", "rollout"), min_samples=0),
    examples=_GAP_EXAMPLES,
    checks=("value",),
    meets=OFFPOLICY_FEATURES,
)
def check_logprob_gap(ctx: Any, case: dict[str, Any]) -> None:
    masks = [s["mask"] for s in case["samples"]]
    old, rollout = field_rows(ctx, case, "old"), field_rows(ctx, case, "rollout")
    reduction = ctx.profile.get("logprob_gap_reduction", "token_mean")
    expected = oracle.logprob_gap(old, rollout, masks, reduction=reduction)
    actual = ctx.call(
        "logprob_gap",
        padded(ctx, case, old, case["pad_value"]),
        padded(ctx, case, rollout, case["pad_value"]),
        action_mask(ctx, case),
    )
    if isinstance(actual, torch.Tensor):
        actual = actual.detach().to("cpu", torch.float64).item()
    # A mean of n rounded terms is accurate to about eps * sum |terms|.
    scale = math.fsum(
        abs(o - r)
        for orow, rrow, mrow in zip(old, rollout, masks, strict=True)
        for o, r, m in zip(orow, rrow, mrow, strict=True)
        if m
    )
    assert_scalar_close(
        "offpolicy.logprob_gap",
        f"train_rollout_logprob_abs_diff ({reduction})",
        expected,
        float(actual),
        tolerance=ctx.tolerance,
        scale=scale,
        check="value",
    )

"""Clauses of the CONTRACT area `logprob`, and `entropy.from_logits`.

Log-prob tolerance. log_softmax(x / tau)[v] = x_v / tau - logsumexp(x / tau) loses about
eps(dtype) * (|x_v / tau| + |logsumexp|) to rounding, and |logsumexp| <= max|x / tau| + |lp|,
so each compared log-prob gets the conditioning ``scale = 2 max_u |x_u| / tau + |lp|``.
Entropy H = logsumexp(x) - sum p x cancels the same way: ``scale = 2 max_u |x_u| + H``.
An overflowing ``log(sum(exp(x)))`` (inf), a wrong row or a wrong temperature is off by
O(1) and fails.

Inputs are handed to the oracle as the target received them (rounded to its dtype), so
rounding of the case itself is never counted as the implementation's error.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from hypothesis import strategies as st

from rlconform.conformance import strategies as cs
from rlconform.conformance.compare import assert_equal, assert_rows_close, assert_scalar_close
from rlconform.conformance.features import allows, pad_value_features
from rlconform.conformance.harness import (
    assert_padding_zero,
    pad_left,
    pad_right,
    right_mask,
    to_float_list,
    unpad_right,
)
from rlconform.conformance.registry import clause
from rlconform.oracle import logprob as oracle

NAN = float("nan")
LN = math.log

# Logits for sampling cases lie on a 0.25 grid (exact in every float dtype) and are distinct
# within a row, so top-k never meets a tie unless a pinned example asks for one.
_GRID = [i / 4 for i in range(-16, 17)]
_TEMPERATURES = (1.0, 0.5, 0.7, 1.5, 2.0)
_TOP_PS = (0.3, 0.5, 0.7, 0.9)
# Generated top-p thresholds stay this far from every cumulative mass: exact ties (the mass
# before a token equals top_p) are outside the contract, since membership is then decided
# by rounding (vLLM/HF drop such a token, SGLang keeps it), which no tolerance can arbitrate.
_TOP_P_MARGIN = 1e-3

# The features of the logits clauses (the walker reads samples with ``tokens`` or ``mask``,
# logits rows as per-token values, ``pad_value`` / ``extra_pad`` and sampling parameters).
LOGITS_FEATURES = (
    "empty_response",
    "empty_batch",
    "extra_padding",
    "sampling_truncation",
    "padding_finite",
    "padding_nonfinite",
    "overflow",
    "zero_width",
)


def _extra_pad(draw: Any, lengths: list[int]) -> int:
    """Extra right padding: 0-2 columns, at least 1 below hardening when every response is
    empty (a zero-width tensor is a hardening input)."""
    fewest = 1 if not allows("hardening") and max(lengths, default=0) == 0 else 0
    return draw(st.integers(fewest, 2))


def _logits_tensor(
    rows_per_sample: list[list[list[float]]], width: int, vocab: int, fill: float, ctx: Any
) -> torch.Tensor:
    """Right-pad per-sample logits rows into (B, width, V); padding rows hold ``fill``."""
    out = torch.full((len(rows_per_sample), width, vocab), fill, dtype=ctx.dtype)
    for i, rows in enumerate(rows_per_sample):
        if rows:
            out[i, : len(rows)] = torch.tensor(rows, dtype=ctx.dtype)
    return out.to(ctx.device)


def _logprob_scale(row: list[float], temperature: float, logprob: float) -> float:
    return 2.0 * max(abs(x) for x in row) / temperature + abs(logprob)


def _entropy_scale(row: list[float], value: float) -> float:
    return 2.0 * max(abs(x) for x in row) + abs(value)


def _check_token_rows(
    ctx: Any,
    clause_id: str,
    what: str,
    expected: list[list[float]],
    actual: Any,
    lengths: list[int],
    uids: list[Any],
    scale: list[list[float]],
    width: int,
) -> None:
    """A (B, T) per-token output: its shape, padding exactly 0 (check ``padding_zero``),
    valid positions close to expected (check ``logprobs``)."""
    shape = tuple(getattr(actual, "shape", ()))
    assert_equal(clause_id, f"{what} shape", (len(lengths), width), shape, check="shape")
    with ctx.check("padding_zero"):
        assert_padding_zero(clause_id, what, actual, lengths, uids)
    assert_rows_close(
        clause_id,
        what,
        expected,
        unpad_right(actual, lengths),
        uids=uids,
        tolerance=ctx.tolerance,
        scale=scale,
        check="logprobs",
    )


TOKEN_ROW_CHECKS = ("shape", "padding_zero", "logprobs")


# ---------------------------------------------------------------------------------------
# logprob.alignment


@st.composite
def _alignment_case(draw: Any) -> dict[str, Any]:
    """Full sequences with logits for every real position; (edge) L_i = 0; padding logits
    rows hold the pad value (hardening: NaN, inf or huge)."""
    vocab = draw(st.integers(2, 5))
    samples = []
    for i in range(draw(st.integers(1, 4))):
        prompt = draw(st.lists(st.integers(0, vocab - 1), min_size=1, max_size=3))
        length = draw(cs.lengths())
        response = draw(st.lists(st.integers(0, vocab - 1), min_size=length, max_size=length))
        logits = draw(
            st.lists(
                st.lists(cs.finite(-8, 8), min_size=vocab, max_size=vocab),
                min_size=len(prompt) + len(response),
                max_size=len(prompt) + len(response),
            )
        )
        samples.append({"uid": f"s{i}", "prompt": prompt, "response": response, "logits": logits})
    return {
        "vocab": vocab,
        "temperature": draw(st.sampled_from(_TEMPERATURES)),
        "samples": samples,
        "pad_value": draw(cs.pad_values()),
        "pad_token": draw(st.integers(0, vocab - 1)),
        "extra_pad": _extra_pad(draw, [len(s["response"]) for s in samples]),
        "extra_prompt_pad": draw(st.integers(0, 1)),
    }


def _alignment_features(case: dict[str, Any]) -> set[str]:
    """The pad value sits in every logits row that is not a real position: prompt padding
    (left) and response padding (right)."""
    samples = case["samples"]
    prompt_width = max(len(s["prompt"]) for s in samples) + case["extra_prompt_pad"]
    width = max(len(s["response"]) for s in samples) + case["extra_pad"]
    padded = any(len(s["prompt"]) < prompt_width or len(s["response"]) < width for s in samples)
    return pad_value_features(case["pad_value"]) if padded else set()


_ALIGNMENT_EXAMPLES = (
    # Uneven prompts (P = 1 and 3) and responses (L = 3 and 0); NaN in every padded position.
    {
        "vocab": 3,
        "temperature": 1.0,
        "samples": [
            {
                "uid": "s0",
                "prompt": [2],
                "response": [0, 1, 2],
                "logits": [[2.0, 0.0, -1.0], [0.0, 3.0, 0.5], [-1.0, 0.0, 2.5], [1.0, 1.0, 1.0]],
            },
            {
                "uid": "s1",
                "prompt": [1, 0, 2],
                "response": [],
                "logits": [[0.5, 0.0, 0.0], [0.0, 0.5, 0.0], [0.0, 0.0, 0.5]],
            },
        ],
        "pad_value": NAN,
        "pad_token": 0,
        "extra_pad": 1,
        "extra_prompt_pad": 1,
    },
    # Full-length response, no spare column: the last logits row is real and unused.
    {
        "vocab": 2,
        "temperature": 0.5,
        "samples": [
            {
                "uid": "s0",
                "prompt": [0, 1],
                "response": [1, 0],
                "logits": [[0.0, 0.0], [1.0, -1.0], [-2.0, 2.0], [4.0, -4.0]],
            },
            {
                "uid": "s1",
                "prompt": [1],
                "response": [0],
                "logits": [[3.0, 0.0], [0.0, 3.0]],
            },
        ],
        "pad_value": 7.5,
        "pad_token": 1,
        "extra_pad": 0,
        "extra_prompt_pad": 0,
    },
    # Huge logits: log(sum(exp(x))) overflows in float32; log_softmax must not.
    {
        "vocab": 3,
        "temperature": 1.0,
        "samples": [
            {
                "uid": "s0",
                "prompt": [0],
                "response": [2, 1],
                "logits": [[100.0, 99.0, 101.0], [-100.0, 100.0, 0.0], [0.0, 0.0, 0.0]],
            }
        ],
        "pad_value": -1e30,
        "pad_token": 0,
        "extra_pad": 1,
        "extra_prompt_pad": 0,
    },
)


@clause(
    "logprob.alignment",
    title="Response token j is scored by logits row P + j - 1",
    statement="""For a full sequence, the log-prob of the token at absolute position p comes from
    the logits row p-1. Response token j of a sample with prompt length P uses row P+j-1
    (canonical layout: prompts left-padded, responses right-padded to width R; padding
    logits may be NaN/inf/garbage and the output is 0 past L_i).""",
    ops=("response_logprobs",),
    strategy=_alignment_case(),
    examples=_ALIGNMENT_EXAMPLES,
    checks=TOKEN_ROW_CHECKS,
    meets=LOGITS_FEATURES,
    case_features=_alignment_features,
)
def check_alignment(ctx: Any, case: dict[str, Any]) -> None:
    """Op ``response_logprobs(logits (B,S,V), input_ids (B,S), attention_mask (B,S),
    response_width R, temperature) -> (B,R)``; S = prompt width + R."""
    samples = case["samples"]
    uids = [s["uid"] for s in samples]
    prompt_lengths = [len(s["prompt"]) for s in samples]
    lengths = [len(s["response"]) for s in samples]
    prompt_width = max(prompt_lengths) + case["extra_prompt_pad"]
    width = max(lengths) + case["extra_pad"]
    columns = [
        list(range(prompt_width - p, prompt_width + n))
        for p, n in zip(prompt_lengths, lengths, strict=True)
    ]
    logits = torch.full(
        (len(samples), prompt_width + width, case["vocab"]), case["pad_value"], dtype=ctx.dtype
    )
    for i, s in enumerate(samples):
        logits[i, columns[i]] = torch.tensor(s["logits"], dtype=ctx.dtype)
    logits = logits.to(ctx.device)
    fill = case["pad_token"]
    prompt_ids = pad_left([s["prompt"] for s in samples], width=prompt_width, fill=fill)
    response_ids = pad_right(
        [s["response"] for s in samples], width=width, fill=fill, dtype=torch.int64
    )
    input_ids = torch.cat([prompt_ids, response_ids], dim=1).to(ctx.device)
    prompt_mask = pad_left([[1] * p for p in prompt_lengths], width=prompt_width)
    attention_mask = torch.cat([prompt_mask, right_mask(lengths, width)], dim=1).to(ctx.device)

    received = to_float_list(logits)
    temperature = case["temperature"]
    expected, scale = [], []
    for i, s in enumerate(samples):
        rows = [received[i][c] for c in columns[i]]
        values = oracle.response_logprobs(
            rows,
            s["prompt"] + s["response"],
            prompt_lengths[i],
            temperature=temperature,
            uid=s["uid"],
        )
        expected.append(values)
        scale.append(
            [
                _logprob_scale(rows[prompt_lengths[i] + j - 1], temperature, v)
                for j, v in enumerate(values)
            ]
        )
    actual = ctx.call(
        "response_logprobs", logits, input_ids, attention_mask, width, temperature=temperature
    )
    _check_token_rows(
        ctx,
        "logprob.alignment",
        "response log-probs",
        expected,
        actual,
        lengths,
        uids,
        scale,
        width,
    )


# ---------------------------------------------------------------------------------------
# logprob.sampling_distribution


def _top_p_margin(row: list[float], temperature: float, top_k: int, top_p: float) -> float:
    """Distance from top_p to the nearest cumulative mass of the top-k-renormalised probs."""
    if top_p >= 1.0:
        return math.inf
    top_k_only = oracle.sampling_support(row, temperature=temperature, top_k=top_k)
    logprobs = oracle.log_softmax([x / temperature for x in row], support=top_k_only)
    masses = sorted((math.exp(logprobs[v]) for v in top_k_only), reverse=True)
    return min(abs(math.fsum(masses[: m + 1]) - top_p) for m in range(len(masses)))


@st.composite
def _sampling_case(draw: Any) -> dict[str, Any]:
    """Distinct grid logits, temperature, top-k and a top-p chosen clear of every row's
    cumulative masses (exact ties are out of contract); the sampled token is drawn from the
    support. (edge) L_i = 0; padding rows hold the pad value."""
    vocab = draw(st.integers(2, 5))
    temperature = draw(st.sampled_from(_TEMPERATURES))
    top_k = draw(st.sampled_from([-1, 1, 2, 3]))
    rows_per_sample = [
        [
            draw(st.lists(st.sampled_from(_GRID), min_size=vocab, max_size=vocab, unique=True))
            for _ in range(draw(cs.lengths(max_len=4)))
        ]
        for _ in range(draw(st.integers(1, 4)))
    ]
    rows = [row for sample_rows in rows_per_sample for row in sample_rows]
    clear = [
        p
        for p in _TOP_PS
        if all(_top_p_margin(row, temperature, top_k, p) >= _TOP_P_MARGIN for row in rows)
    ]
    top_p = draw(st.sampled_from([1.0, *clear]))
    samples = []
    for i, logits in enumerate(rows_per_sample):
        tokens = [
            draw(
                st.sampled_from(
                    oracle.sampling_support(row, temperature=temperature, top_k=top_k, top_p=top_p)
                )
            )
            for row in logits
        ]
        samples.append({"uid": f"s{i}", "logits": logits, "tokens": tokens})
    return {
        "vocab": vocab,
        "temperature": temperature,
        "top_k": top_k,
        "top_p": top_p,
        "samples": samples,
        "pad_value": draw(cs.pad_values()),
        "extra_pad": _extra_pad(draw, [len(s["tokens"]) for s in samples]),
    }


_SAMPLING_EXAMPLES = (
    # CONTRACT worked example: p = [0.8, 0.2], temperature 2 -> [2/3, 1/3].
    {
        "vocab": 2,
        "temperature": 2.0,
        "top_k": -1,
        "top_p": 1.0,
        "samples": [
            {"uid": "s0", "logits": [[LN(0.8), LN(0.2)], [LN(0.8), LN(0.2)]], "tokens": [1, 0]}
        ],
        "pad_value": 0.0,
        "extra_pad": 1,
    },
    # top-k = 2 of 4: the token is renormalised over {0, 1}; L = 0 next to it, NaN padding.
    {
        "vocab": 4,
        "temperature": 1.0,
        "top_k": 2,
        "top_p": 1.0,
        "samples": [
            {
                "uid": "s0",
                "logits": [[2.0, 1.0, 0.0, -1.0], [0.0, 0.5, 1.5, -0.5]],
                "tokens": [1, 2],
            },
            {"uid": "s1", "logits": [], "tokens": []},
        ],
        "pad_value": NAN,
        "extra_pad": 1,
    },
    # top-p = 0.5 with temperature 0.7: the nuclei are {0} and {2, 1}.
    {
        "vocab": 4,
        "temperature": 0.7,
        "top_k": -1,
        "top_p": 0.5,
        "samples": [
            {
                "uid": "s0",
                "logits": [[3.0, 2.0, 1.0, 0.0], [0.0, 0.25, 0.5, -0.25]],
                "tokens": [0, 1],
            }
        ],
        "pad_value": float("inf"),
        "extra_pad": 2,
    },
    # top-k then top-p (on the top-k-renormalised distribution), temperature 1.5.
    {
        "vocab": 5,
        "temperature": 1.5,
        "top_k": 3,
        "top_p": 0.75,
        "samples": [
            {"uid": "s0", "logits": [[1.0, 2.0, 0.0, -1.0, 1.5]], "tokens": [4]},
            {
                "uid": "s1",
                "logits": [[0.0, -2.0, 3.0, 2.75, 2.5], [1.0, 0.0, -1.0, -2.0, -3.0]],
                "tokens": [3, 1],
            },
        ],
        "pad_value": -1e30,
        "extra_pad": 0,
    },
    # A tie at the k-th logit (profile key top_k_ties): "keep" renormalises over {0, 1, 2},
    # "exact" over {0} and one of the tied pair; token 0 is in the support either way.
    {
        "vocab": 4,
        "temperature": 1.0,
        "top_k": 2,
        "top_p": 1.0,
        "samples": [{"uid": "s0", "logits": [[2.0, 1.0, 1.0, 0.0]], "tokens": [0]}],
        "pad_value": 0.0,
        "extra_pad": 0,
    },
)


@clause(
    "logprob.sampling_distribution",
    title="Behaviour log-prob from the distribution actually sampled",
    statement="""The behaviour log-prob is taken from the distribution actually sampled: logits /
    temperature, restricted to the top-k / top-p support and renormalised (exact top-p ties,
    where the mass before a token equals top_p, are outside the contract: cases avoid them).
    Worked: p = [0.8, 0.2], temperature 2 -> [2/3, 1/3]; a new policy giving the second
    token 0.25 has ratio 0.75, the raw 0.2 would give 1.25.""",
    ops=("sampling_logprobs",),
    strategy=_sampling_case(),
    examples=_SAMPLING_EXAMPLES,
    checks=TOKEN_ROW_CHECKS,
    meets=LOGITS_FEATURES,
)
def check_sampling_distribution(ctx: Any, case: dict[str, Any]) -> None:
    """Op ``sampling_logprobs(logits (B,T,V), responses (B,T), response_mask (B,T),
    temperature, top_k, top_p) -> (B,T)``; logits are response-aligned (row t scores
    response token t). Order: temperature, top-k, top-p on the top-k-renormalised
    probabilities (vLLM, SGLang, HF). top_k <= 0 and top_p >= 1 disable. top-p keeps a token
    while the mass before it is < top_p. Profile key ``top_k_ties``: ``"keep"`` (default;
    all tokens tied with the k-th largest logit stay, vLLM/HF) or ``"exact"`` (exactly k,
    SGLang)."""
    samples = case["samples"]
    uids = [s["uid"] for s in samples]
    lengths = [len(s["tokens"]) for s in samples]
    width = max(lengths, default=0) + case["extra_pad"]
    logits = _logits_tensor(
        [s["logits"] for s in samples], width, case["vocab"], case["pad_value"], ctx
    )
    responses = pad_right(
        [s["tokens"] for s in samples], width=width, dtype=torch.int64, device=ctx.device
    )
    response_mask = right_mask(lengths, width, ctx.device)
    temperature, top_k, top_p = case["temperature"], case["top_k"], case["top_p"]
    ties = ctx.profile.get("top_k_ties", "keep")
    received = to_float_list(logits)
    expected, scale = [], []
    for i, s in enumerate(samples):
        rows = received[i][: lengths[i]]
        values = [
            oracle.sampling_logprob(
                row,
                token,
                temperature=temperature,
                top_k=top_k,
                top_p=top_p,
                top_k_ties=ties,
                uid=s["uid"],
            )
            for row, token in zip(rows, s["tokens"], strict=True)
        ]
        expected.append(values)
        scale.append([_logprob_scale(r, temperature, v) for r, v in zip(rows, values, strict=True)])
    actual = ctx.call(
        "sampling_logprobs",
        logits,
        responses,
        response_mask,
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
    )
    what = "behaviour log-probs"
    _check_token_rows(
        ctx, "logprob.sampling_distribution", what, expected, actual, lengths, uids, scale, width
    )


# ---------------------------------------------------------------------------------------
# logprob.keep_sampling_mask


@st.composite
def _support_case(draw: Any) -> dict[str, Any]:
    vocab = draw(st.integers(2, 5))
    samples = []
    for i in range(draw(st.integers(1, 4))):
        logits, tokens, kept = [], [], []
        for _ in range(draw(cs.lengths(max_len=4))):
            logits.append(draw(st.lists(cs.finite(-8, 8), min_size=vocab, max_size=vocab)))
            token = draw(st.integers(0, vocab - 1))
            others = draw(st.sets(st.integers(0, vocab - 1)))
            tokens.append(token)
            kept.append(sorted(others | {token}))
        samples.append({"uid": f"s{i}", "logits": logits, "tokens": tokens, "kept": kept})
    return {
        "vocab": vocab,
        "temperature": draw(st.sampled_from(_TEMPERATURES)),
        "samples": samples,
        "pad_value": draw(cs.pad_values()),
        "pad_keep": draw(st.sampled_from([0, 1])),
        "extra_pad": _extra_pad(draw, [len(s["tokens"]) for s in samples]),
    }


_SUPPORT_EXAMPLES = (
    # Kept set {token} alone gives log-prob 0; the full set gives plain log_softmax; a padded
    # keep-mask of all zeros must not turn into NaN in the output.
    {
        "vocab": 3,
        "temperature": 1.0,
        "samples": [
            {
                "uid": "s0",
                "logits": [[1.0, 2.0, 3.0], [1.0, 2.0, 3.0], [0.0, -1.0, 5.0]],
                "tokens": [1, 1, 0],
                "kept": [[1], [0, 1, 2], [0, 1]],
            },
            {"uid": "s1", "logits": [], "tokens": [], "kept": []},
        ],
        "pad_value": NAN,
        "pad_keep": 0,
        "extra_pad": 1,
    },
    # Temperature 2 with a nucleus of two out of four tokens.
    {
        "vocab": 4,
        "temperature": 2.0,
        "samples": [
            {"uid": "s0", "logits": [[4.0, 2.0, 0.0, -2.0]], "tokens": [1], "kept": [[0, 1]]},
        ],
        "pad_value": 0.0,
        "pad_keep": 1,
        "extra_pad": 1,
    },
)


@clause(
    "logprob.keep_sampling_mask",
    title="Recomputed log-probs renormalise over the rollout's kept tokens",
    statement="""Recomputing on the rollout's support (KSM) renormalises over the kept token set
    only: log_softmax(logits / temperature) with every token outside the per-position keep
    mask excluded from the normaliser.""",
    ops=("logprobs_on_support",),
    strategy=_support_case(),
    examples=_SUPPORT_EXAMPLES,
    checks=TOKEN_ROW_CHECKS,
    meets=LOGITS_FEATURES,
)
def check_keep_sampling_mask(ctx: Any, case: dict[str, Any]) -> None:
    """Op ``logprobs_on_support(logits (B,T,V), responses (B,T), keep_mask (B,T,V) bool,
    response_mask (B,T), temperature) -> (B,T)``; logits response-aligned. The sampled token
    is always in its kept set (the rollout drew it from there)."""
    samples = case["samples"]
    uids = [s["uid"] for s in samples]
    lengths = [len(s["tokens"]) for s in samples]
    width = max(lengths, default=0) + case["extra_pad"]
    vocab = case["vocab"]
    logits = _logits_tensor([s["logits"] for s in samples], width, vocab, case["pad_value"], ctx)
    responses = pad_right(
        [s["tokens"] for s in samples], width=width, dtype=torch.int64, device=ctx.device
    )
    keep_mask = torch.full((len(samples), width, vocab), bool(case["pad_keep"]), dtype=torch.bool)
    for i, s in enumerate(samples):
        for t, kept in enumerate(s["kept"]):
            keep_mask[i, t] = False
            keep_mask[i, t, kept] = True
    keep_mask = keep_mask.to(ctx.device)
    response_mask = right_mask(lengths, width, ctx.device)
    temperature = case["temperature"]
    received = to_float_list(logits)
    expected, scale = [], []
    for i, s in enumerate(samples):
        rows = received[i][: lengths[i]]
        values = [
            oracle.support_logprob(row, token, kept, temperature=temperature, uid=s["uid"])
            for row, token, kept in zip(rows, s["tokens"], s["kept"], strict=True)
        ]
        expected.append(values)
        scale.append([_logprob_scale(r, temperature, v) for r, v in zip(rows, values, strict=True)])
    actual = ctx.call(
        "logprobs_on_support", logits, responses, keep_mask, response_mask, temperature=temperature
    )
    what = "log-probs on the kept support"
    _check_token_rows(
        ctx, "logprob.keep_sampling_mask", what, expected, actual, lengths, uids, scale, width
    )


# ---------------------------------------------------------------------------------------
# entropy.from_logits


@st.composite
def _entropy_case(draw: Any) -> dict[str, Any]:
    vocab = draw(st.integers(1, 5))
    offset = draw(st.sampled_from([0.0, 0.0, 60.0, -60.0]))
    samples = []
    for i in range(draw(st.integers(1, 4))):
        length = draw(cs.lengths(max_len=4))
        row = st.lists(cs.finite(-8, 8).map(lambda x: x + offset), min_size=vocab, max_size=vocab)
        samples.append(
            {
                "uid": f"s{i}",
                "mask": draw(cs.loss_mask(length)),
                "logits": draw(st.lists(row, min_size=length, max_size=length)),
            }
        )
    return {
        "vocab": vocab,
        "samples": samples,
        "pad_value": draw(cs.pad_values()),
        "extra_pad": _extra_pad(draw, [len(s["mask"]) for s in samples]),
    }


_ENTROPY_EXAMPLES = (
    # Uniform over 4 -> ln 4; near one-hot -> ~0; a tool-observation hole (mask 0) and zero
    # padding (entropy ln 4 there) must both stay out of the mean.
    {
        "vocab": 4,
        "samples": [
            {
                "uid": "s0",
                "mask": [1, 0, 1],
                "logits": [[0.0, 0.0, 0.0, 0.0], [5.0, 0.0, 0.0, 0.0], [30.0, 0.0, 0.0, 0.0]],
            },
            {"uid": "s1", "mask": [1], "logits": [[1.0, 2.0, 3.0, 4.0]]},
        ],
        "pad_value": 0.0,
        "extra_pad": 2,
    },
    # Huge logits (logsumexp must be stabilised), L = 0 next to it, NaN padding.
    {
        "vocab": 3,
        "samples": [
            {"uid": "s0", "mask": [1, 1], "logits": [[100.0, 100.5, 99.0], [-100.0, 50.0, 50.0]]},
            {"uid": "s1", "mask": [], "logits": []},
        ],
        "pad_value": NAN,
        "extra_pad": 1,
    },
    # No valid position at all: the mean is 0, not NaN.
    {
        "vocab": 2,
        "samples": [{"uid": "s0", "mask": [0, 0], "logits": [[1.0, 0.0], [0.0, 1.0]]}],
        "pad_value": float("inf"),
        "extra_pad": 1,
    },
)


@clause(
    "entropy.from_logits",
    title="Entropy from logits, averaged over valid positions only",
    statement="""H = logsumexp(x) - sum(softmax(x) * x) per position; averaged over valid
    positions only (padding and mask-0 positions, whatever their logits, never enter the
    mean); no valid position gives 0.""",
    ops=("entropy_from_logits", "entropy_mean"),
    strategy=_entropy_case(),
    examples=_ENTROPY_EXAMPLES,
    checks=("shape", "per_position", "mean", "empty_mean"),
    meets=(
        "mask_holes",
        "actionless_sample",
        "empty_response",
        "empty_batch",
        "extra_padding",
        "padding_finite",
        "padding_nonfinite",
        "overflow",
        "zero_width",
    ),
)
def check_entropy_from_logits(ctx: Any, case: dict[str, Any]) -> None:
    """Ops ``entropy_from_logits(logits (B,T,V)) -> (B,T)`` (compared on response positions;
    padding ignored) and ``entropy_mean(logits (B,T,V), mask (B,T)) -> ()``; the mean of no
    valid position is check ``empty_mean``."""
    samples = case["samples"]
    uids = [s["uid"] for s in samples]
    lengths = cs.lengths_of(case)
    width = cs.width_of_case(case)
    logits = _logits_tensor(
        [s["logits"] for s in samples], width, case["vocab"], case["pad_value"], ctx
    )
    mask = pad_right(
        [s["mask"] for s in samples], width=width, dtype=torch.int64, device=ctx.device
    )
    received = [rows[:n] for rows, n in zip(to_float_list(logits), lengths, strict=True)]
    expected = [[oracle.entropy(row) for row in rows] for rows in received]
    scale = [
        [_entropy_scale(row, h) for row, h in zip(rows, values, strict=True)]
        for rows, values in zip(received, expected, strict=True)
    ]
    per_token = ctx.call("entropy_from_logits", logits)
    with ctx.check("per_position"):
        shape = tuple(getattr(per_token, "shape", ()))
        assert_equal(
            "entropy.from_logits", "per-position entropy shape", (len(samples), width), shape
        )
        assert_rows_close(
            "entropy.from_logits",
            "per-position entropy",
            expected,
            unpad_right(per_token, lengths),
            uids=uids,
            tolerance=ctx.tolerance,
            scale=scale,
        )
    masks = [s["mask"] for s in samples]
    mean = ctx.call("entropy_mean", logits, mask)
    valid_scales = [
        x for row, m in zip(scale, masks, strict=True) for x, v in zip(row, m, strict=True) if v
    ]
    assert_scalar_close(
        "entropy.from_logits",
        "entropy mean over valid positions"
        if valid_scales
        else "entropy mean of no valid position",
        oracle.entropy_mean(received, masks, uids=uids),
        float(mean),
        tolerance=ctx.tolerance,
        scale=max(valid_scales, default=0.0),
        check="mean" if valid_scales else "empty_mean",
    )

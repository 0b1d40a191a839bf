"""Clauses of the CONTRACT area `mask`."""

from __future__ import annotations

import copy
import math
from typing import Any

import torch
from hypothesis import strategies as st

from rlconform.conformance import strategies as cs
from rlconform.conformance.compare import assert_equal, assert_rows_equal, assert_scalar_close
from rlconform.conformance.errors import ClauseMismatch, ContractError, TargetError
from rlconform.conformance.features import allows, generic_features, pad_value_features
from rlconform.conformance.harness import assert_padding_zero, pad_right, right_mask, unpad_right
from rlconform.conformance.registry import clause
from rlconform.oracle import mask as oracle

# ---------------------------------------------------------------------------------------
# mask.response_from_eos
# ---------------------------------------------------------------------------------------

_EOS_EXAMPLES = (
    # EOS at position 0 (length-1 mask), EOS last, no EOS (all ones), tokens after EOS.
    {
        "width": 5,
        "eos": 1,
        "rows": [
            {"uid": "s0", "ids": [1, 4, 4, 4, 4]},
            {"uid": "s1", "ids": [3, 4, 5, 0, 1]},
            {"uid": "s2", "ids": [3, 4, 5, 0, 2]},
            {"uid": "s3", "ids": [2, 1, 3, 1, 1]},
        ],
    },
    # pad id == EOS id (a common tokenizer setup) and several EOS ids.
    {
        "width": 6,
        "eos": [1, 2],
        "rows": [
            {"uid": "s0", "ids": [5, 4, 1, 1, 1, 1]},
            {"uid": "s1", "ids": [5, 2, 4, 1, 4, 4]},
            {"uid": "s2", "ids": [5, 5, 5, 5, 5, 5]},
        ],
    },
    # Width 0 and the empty batch.
    {"width": 0, "eos": 1, "rows": [{"uid": "s0", "ids": []}, {"uid": "s1", "ids": []}]},
    {"width": 3, "eos": 1, "rows": []},
)


@st.composite
def _eos_case(draw: Any) -> dict[str, Any]:
    """Rows of response ids; (edge) no rows, (hardening) width 0."""
    width = draw(st.integers(0 if allows("hardening") else 1, cs.MAX_LEN))
    n = draw(st.integers(cs.fewest_samples(0), 4))
    eos = draw(
        st.one_of(
            st.integers(1, 3), st.lists(st.integers(1, 3), min_size=1, max_size=2, unique=True)
        )
    )
    rows = [
        {"uid": f"s{i}", "ids": draw(st.lists(st.integers(0, 5), min_size=width, max_size=width))}
        for i in range(n)
    ]
    return {"width": width, "eos": eos, "rows": rows}


def _eos_features(case: dict[str, Any]) -> set[str]:
    """no_samples, zero_width, and truncated_sample for a row without EOS (stopped by the
    length limit)."""
    rows, eos = case["rows"], case["eos"]
    eos_ids = {eos} if isinstance(eos, int) else set(eos)
    found = set() if rows else {"no_samples"}
    if rows and case["width"] == 0:
        found.add("zero_width")
    if any(r["ids"] and not eos_ids & set(r["ids"]) for r in rows):
        found.add("truncated_sample")
    return found


@clause(
    "mask.response_from_eos",
    title="Response mask from the first EOS",
    statement="""The response mask is 1 up to and including the first EOS token and 0 after
    it, whatever the ids after it (pad id irrelevant); no EOS gives all ones; the EOS may be
    one id or a list of ids (verl get_response_mask).""",
    ops=("response_mask_from_eos",),
    strategy=_eos_case(),
    examples=_EOS_EXAMPLES,
    checks=("shape", "response_mask"),
    meets=("no_samples", "zero_width", "truncated_sample"),
    case_features=_eos_features,
)
def check_response_from_eos(ctx: Any, case: dict[str, Any]) -> None:
    rows, width = case["rows"], case["width"]
    uids = [r["uid"] for r in rows]
    expected = [oracle.response_mask_from_eos(r["ids"], case["eos"]) for r in rows]
    response_ids = torch.tensor(
        [r["ids"] for r in rows], dtype=torch.int64, device=ctx.device
    ).reshape(len(rows), width)
    eos = copy.deepcopy(case["eos"])
    mask = ctx.call("response_mask_from_eos", response_ids, eos)
    assert_equal(
        "mask.response_from_eos",
        "response_mask shape",
        (len(rows), width),
        tuple(getattr(mask, "shape", ())),
        check="shape",
    )
    assert_rows_equal(
        "mask.response_from_eos",
        "response_mask",
        expected,
        unpad_right(mask, [width] * len(rows)),
        uids=uids,
        check="response_mask",
    )


# ---------------------------------------------------------------------------------------
# mask.response_from_attention
# ---------------------------------------------------------------------------------------

_ATTENTION_EXAMPLES = (
    # Conforming: P_i = 0, L_i = 0, L_i = R, full prompt.
    {
        "prompt_width": 3,
        "response_width": 3,
        "rows": [
            {"uid": "s0", "attention": [0, 1, 1, 1, 1, 0]},
            {"uid": "s1", "attention": [0, 0, 0, 1, 0, 0]},
            {"uid": "s2", "attention": [1, 1, 1, 0, 0, 0]},
            {"uid": "s3", "attention": [0, 0, 1, 1, 1, 1]},
        ],
    },
    # Violations that must be detected, one kind per case.
    {
        "prompt_width": 3,
        "response_width": 2,
        "rows": [
            {"uid": "s0", "attention": [0, 1, 1, 1, 0]},
            {"uid": "s1", "attention": [1, 1, 0, 1, 1]},  # right-padded prompt
        ],
    },
    {
        "prompt_width": 2,
        "response_width": 3,
        "rows": [
            {"uid": "s0", "attention": [1, 1, 0, 1, 1]},  # left-padded response
        ],
    },
    {
        "prompt_width": 2,
        "response_width": 4,
        "rows": [
            {"uid": "s0", "attention": [0, 1, 1, 0, 1, 0]},  # hole in the response
        ],
    },
    {
        "prompt_width": 4,
        "response_width": 1,
        "rows": [
            {"uid": "s0", "attention": [0, 1, 0, 1, 1]},  # hole in the prompt
        ],
    },
    # R = 0 (the last 0 columns, not the whole row) and the empty batch.
    {"prompt_width": 3, "response_width": 0, "rows": [{"uid": "s0", "attention": [0, 1, 1]}]},
    {"prompt_width": 2, "response_width": 2, "rows": []},
)

_CORRUPTIONS = (
    "flip",
    "prompt_right_padded",
    "prompt_hole",
    "response_hole",
    "response_left_padded",
)


@st.composite
def _attention_case(draw: Any) -> dict[str, Any]:
    """Conforming rows (left-padded prompts, right-padded responses); (edge) L_i = 0 and no
    rows; (hardening) R = 0 and one layout violation."""
    prompt_width = draw(st.integers(0, 3))
    response_width = draw(st.integers(0 if allows("hardening") else 1, 3))
    width = prompt_width + response_width
    rows = []
    for i in range(draw(st.integers(cs.fewest_samples(0), 4))):
        p = draw(st.integers(0, prompt_width))
        n = draw(st.integers(0 if allows("edge") else min(1, response_width), response_width))
        attention = [0] * (prompt_width - p) + [1] * p + [1] * n + [0] * (response_width - n)
        rows.append({"uid": f"s{i}", "attention": attention})
    corruption = draw(st.sampled_from(("none",) + (_CORRUPTIONS if allows("hardening") else ())))
    if rows and width and corruption != "none":
        row = rows[draw(st.integers(0, len(rows) - 1))]["attention"]
        if corruption == "flip":
            column = draw(st.integers(0, width - 1))
            row[column] = 1 - row[column]
        elif corruption == "prompt_right_padded":
            row[:prompt_width] = sorted(row[:prompt_width], reverse=True)
        elif corruption == "prompt_hole" and prompt_width >= 3:
            row[:prompt_width] = [0] * (prompt_width - 3) + [1, 0, 1]
        elif corruption == "response_hole" and response_width >= 3:
            row[prompt_width:] = [1, 0, 1] + [0] * (response_width - 3)
        elif corruption == "response_left_padded":
            row[prompt_width:] = sorted(row[prompt_width:])
    return {"prompt_width": prompt_width, "response_width": response_width, "rows": rows}


def _attention_features(case: dict[str, Any]) -> set[str]:
    """A response width larger than every conforming row's response (the walker reads the
    layout itself: violations, L_i = 0, R = 0, no rows)."""
    width = case["response_width"]
    if not case["rows"] or width == 0 or _first_violation(case) is not None:
        return set()
    longest = max(sum(r["attention"][len(r["attention"]) - width :]) for r in case["rows"])
    return {"extra_padding"} if 0 < longest < width else set()


def _first_violation(case: dict[str, Any]) -> ContractError | None:
    for row in case["rows"]:
        try:
            oracle.response_mask_from_attention(
                row["attention"], case["response_width"], uid=row["uid"]
            )
        except ContractError as violation:
            return violation
    return None


@clause(
    "mask.response_from_attention",
    title="Response mask = last R columns of the attention mask",
    statement="""With left-padded prompts and right-padded responses of width R, the response
    mask is the last R columns of the attention mask. An attention mask that violates that
    layout (right-padded prompt, left-padded response, a hole, a value other than 0/1) must
    be rejected with an error, never silently read as a response mask (tool observations are
    attended: their 0s belong to the loss mask, inside the response only).""",
    ops=("response_mask_from_attention",),
    strategy=_attention_case(),
    examples=_ATTENTION_EXAMPLES,
    checks=("shape", "response_mask", "rejects_violation", "rejection_message"),
    meets=("no_samples", "empty_response", "extra_padding", "zero_width", "layout_violation"),
    case_features=_attention_features,
)
def check_response_from_attention(ctx: Any, case: dict[str, Any]) -> None:
    rows, response_width = case["rows"], case["response_width"]
    width = case["prompt_width"] + response_width
    uids = [r["uid"] for r in rows]
    attention_mask = torch.tensor(
        [r["attention"] for r in rows], dtype=torch.int64, device=ctx.device
    ).reshape(len(rows), width)
    violation = _first_violation(case)
    if violation is not None:
        _expect_rejection(ctx, attention_mask, response_width, violation)
        return
    expected = [oracle.response_mask_from_attention(r["attention"], response_width) for r in rows]
    mask = ctx.call("response_mask_from_attention", attention_mask, response_width)
    assert_equal(
        "mask.response_from_attention",
        "response_mask shape",
        (len(rows), response_width),
        tuple(getattr(mask, "shape", ())),
        check="shape",
    )
    assert_rows_equal(
        "mask.response_from_attention",
        "response_mask",
        expected,
        unpad_right(mask, [response_width] * len(rows)),
        uids=uids,
        check="response_mask",
    )


def _expect_rejection(
    ctx: Any, attention_mask: torch.Tensor, response_width: int, violation: ContractError
) -> None:
    """The op must raise (any exception with a message) on a layout it cannot trust."""
    try:
        returned = ctx.call("response_mask_from_attention", attention_mask, response_width)
    except TargetError as failure:  # the implementation's own error type is fine
        raised = failure.original
        if not str(raised).strip():
            raise ClauseMismatch(
                f"[mask.response_from_attention] the layout violation was rejected with "
                f"{type(raised).__name__} but an empty message; it should say what is wrong "
                f"({str(violation).split('] ', 1)[-1]})",
                detail={"uid": violation.uid, "expected": str(violation), "actual": repr(raised)},
                check="rejection_message",
            ) from None
        return
    reason = str(violation).split("] ", 1)[-1]
    raise ClauseMismatch(
        f"[mask.response_from_attention] layout violation not detected: {reason}; the op "
        f"returned a response mask of shape {tuple(getattr(returned, 'shape', ()))} instead of "
        "raising an error",
        detail={"uid": violation.uid, "expected": "an error", "actual": "a response mask"},
        check="rejects_violation",
    )


# ---------------------------------------------------------------------------------------
# mask.loss
# ---------------------------------------------------------------------------------------

_LOSS_EXAMPLES = (
    # CONTRACT worked number: 20 positions (2 x 10), 4 + 5 = 9 action tokens holding 2.0
    # and 4.0 -> mean over actions 28/9 = 3.111..., not 28/20.
    {
        "samples": [
            {
                "uid": "s0",
                "mask": [1, 1, 0, 1, 1, 0],
                "values": [2.0, 2.0, 0.0, 2.0, 2.0, 0.0],
                "keep": 1,
            },
            {"uid": "s1", "mask": [1, 1, 1, 1, 1], "values": [4.0, 4.0, 4.0, 4.0, 4.0], "keep": 1},
        ],
        "pad_value": 0.0,
        "pad_mask": 0,
        "extra_pad": 4,
    },
    # The same batch with NaN at every masked position and 1s in the padded loss mask.
    {
        "samples": [
            {
                "uid": "s0",
                "mask": [1, 1, 0, 1, 1, 0],
                "values": [2.0, 2.0, 0.0, 2.0, 2.0, 0.0],
                "keep": 1,
            },
            {"uid": "s1", "mask": [1, 1, 1, 1, 1], "values": [4.0, 4.0, 4.0, 4.0, 4.0], "keep": 1},
        ],
        "pad_value": float("nan"),
        "pad_mask": 1,
        "extra_pad": 4,
    },
    # A sample dropped by the task keep-mask, L_i = 0, a tool-observation hole, inf padding.
    {
        "samples": [
            {"uid": "s0", "mask": [1, 1, 1], "values": [1.0, 2.0, 3.0], "keep": 0},
            {"uid": "s1", "mask": [], "values": [], "keep": 1},
            {"uid": "s2", "mask": [1, 0, 0, 1], "values": [-1.0, 9.0, 9.0, 0.5], "keep": 1},
        ],
        "pad_value": float("inf"),
        "pad_mask": 1,
        "extra_pad": 1,
    },
    # No valid token at all (a pure tool observation, an all-filtered rest) and the empty batch.
    {
        "samples": [
            {"uid": "s0", "mask": [0, 0], "values": [1.0, 1.0], "keep": 1},
            {"uid": "s1", "mask": [1, 1, 1], "values": [2.0, 2.0, 2.0], "keep": 0},
        ],
        "pad_value": -1e30,
        "pad_mask": 1,
        "extra_pad": 0,
    },
    # The keep-mask drops every action token (all_rejected), with clean padding (edge only).
    {
        "samples": [
            {"uid": "s0", "mask": [1, 0], "values": [3.0, 0.0], "keep": 0},
            {"uid": "s1", "mask": [1, 1, 1], "values": [2.0, 2.0, 2.0], "keep": 0},
        ],
        "pad_value": 0.0,
        "pad_mask": 0,
        "extra_pad": 1,
    },
    {"samples": [], "pad_value": 0.0, "pad_mask": 0, "extra_pad": 2},
)


@st.composite
def _loss_case(draw: Any) -> dict[str, Any]:
    """token_batch with per-sample keep flags; values at mask-0 positions are replaced by the
    pad value (what the check hands the target there). Below edge some kept sample has an
    action token; (hardening) 1s in the padded loss mask."""
    case = draw(cs.token_batch(fields=("values",), min_samples=cs.fewest_samples(0)))
    for sample in case["samples"]:
        sample["keep"] = draw(st.sampled_from([1, 1, 1, 0]))
        sample["values"] = [v if m else 0.0 for v, m in zip(sample["values"], sample["mask"])]
    if not allows("edge") and not any(s["keep"] and any(s["mask"]) for s in case["samples"]):
        next(s for s in case["samples"] if any(s["mask"]))["keep"] = 1
    case["pad_mask"] = draw(st.sampled_from([0, 1])) if allows("hardening") else 0
    return case


def _loss_features(case: dict[str, Any]) -> set[str]:
    """What the walker cannot see: the pad value also sits at mask-0 positions and on every
    token of a sample the keep-mask drops; 1s in the padded loss mask break the padding
    convention; a keep-mask that drops every action token rejects the whole batch."""
    samples = case["samples"]
    width = cs.width_of_case(case)
    padded = any(len(s["mask"]) < width for s in samples)
    masked = padded or any(not s["keep"] or 0 in s["mask"] for s in samples if s["mask"])
    found = pad_value_features(case["pad_value"]) if masked else set()
    if padded and case["pad_mask"]:
        found.add("layout_violation")
    if any(any(s["mask"]) for s in samples) and not any(
        s["keep"] and any(s["mask"]) for s in samples
    ):
        found.add("all_rejected")
    return found


@clause(
    "mask.loss",
    title="Valid tokens and the masked mean",
    statement="""valid = response ∩ non-padding ∩ per-token loss_mask ∩ task keep-mask; the
    number of valid tokens equals the sum over samples of their action-token counts; a
    masked mean divides by that number (never by the padded size) and never reads values
    at masked positions (NaN/inf there is ignored). Worked: 20 positions, 9 action tokens
    holding 2.0 (x4) and 4.0 (x5) -> 28/9.""",
    ops=("valid_token_mask", "masked_mean"),
    strategy=_loss_case(),
    examples=_LOSS_EXAMPLES,
    checks=("valid_shape", "valid_padding", "valid_mask", "valid_count", "masked_mean"),
    meets=(
        "no_samples",
        "empty_response",
        "actionless_sample",
        "mask_holes",
        "empty_batch",
        "all_rejected",
        "extra_padding",
        "padding_finite",
        "padding_nonfinite",
        "overflow",
        "zero_width",
        "layout_violation",
    ),
    case_features=_loss_features,
)
def check_loss_mask(ctx: Any, case: dict[str, Any]) -> None:
    """Profile key ``masked_mean_empty`` (default 0.0): the masked mean of no valid token.

    Tolerance of the mean: a sum of n float terms divided by n is off by at most about
    n * eps * mean|v|, so the per-element scale is sum|v| over valid tokens.
    """
    samples = case["samples"]
    lengths = cs.lengths_of(case)
    uids = cs.uids_of(case)
    width = cs.width_of_case(case)
    expected_valid = [
        oracle.valid_token_mask([1] * len(s["mask"]), s["mask"], s["keep"], uid=s["uid"])
        for s in samples
    ]
    response_mask = right_mask(lengths, width, ctx.device)
    loss_mask = pad_right(
        [s["mask"] for s in samples],
        width=width,
        fill=case["pad_mask"],
        dtype=torch.int64,
        device=ctx.device,
    )
    keep_mask = torch.tensor([s["keep"] for s in samples], dtype=torch.int64, device=ctx.device)
    valid = ctx.call("valid_token_mask", response_mask, loss_mask, keep_mask)
    assert_equal(
        "mask.loss",
        "valid mask shape",
        (len(samples), width),
        tuple(getattr(valid, "shape", ())),
        check="valid_shape",
    )
    with ctx.check("valid_padding"):
        assert_padding_zero("mask.loss", "valid mask", valid, lengths, uids)
    with ctx.check("valid_mask"):
        assert_rows_equal(
            "mask.loss", "valid mask", expected_valid, unpad_right(valid, lengths), uids=uids
        )
    with ctx.check("valid_count"):
        action_tokens = sum(sum(s["mask"]) for s in samples if s["keep"])
        assert_equal(
            "mask.loss", "sum(valid) vs action-token count", action_tokens, int(valid.sum())
        )

    pad = case["pad_value"]
    values = [
        [v if m else pad for v, m in zip(s["values"], row, strict=True)]
        for s, row in zip(samples, expected_valid, strict=True)
    ]
    empty = ctx.profile.get("masked_mean_empty", 0.0)
    expected_mean = oracle.masked_mean(values, expected_valid, empty=empty)
    selected = [
        abs(v)
        for row, m_row in zip(values, expected_valid, strict=True)
        for v, m in zip(row, m_row, strict=True)
        if m
    ]
    mean = ctx.call(
        "masked_mean",
        pad_right(values, width=width, fill=pad, dtype=ctx.dtype, device=ctx.device),
        pad_right(expected_valid, width=width, dtype=torch.int64, device=ctx.device),
    )
    assert_scalar_close(
        "mask.loss",
        f"masked mean over {len(selected)} valid of {len(samples) * width} positions",
        expected_mean,
        float(mean),
        tolerance=ctx.tolerance,
        scale=math.fsum(selected),
        check="masked_mean",
    )


# ---------------------------------------------------------------------------------------
# mask.multi_turn
# ---------------------------------------------------------------------------------------

_SYSTEM = {"role": "system", "header": [90, 91], "content": [10, 11]}
_USER = {"role": "user", "header": [90, 92], "content": [20, 21, 22]}
_ASSISTANT = {"role": "assistant", "header": [90, 93], "content": [30, 31, 99]}
_TOOL = {"role": "tool", "header": [90, 94], "content": [40]}

_MULTI_TURN_EXAMPLES = (
    # system, user, assistant, tool, assistant: only assistant content (with its end token).
    {"conversations": [{"uid": "c0", "messages": [_SYSTEM, _USER, _ASSISTANT, _TOOL, _ASSISTANT]}]},
    # step_loss_mask = 0 silences one assistant turn; a think block leads another turn.
    {
        "conversations": [
            {
                "uid": "c0",
                "messages": [_USER, {**_ASSISTANT, "step_loss_mask": 0}, _USER, _ASSISTANT],
            },
            {"uid": "c1", "messages": [_USER, {**_ASSISTANT, "think": [50, 51, 52]}]},
        ]
    },
    # Uneven lengths (right padding), an empty conversation, an assistant turn without
    # header or content.
    {
        "conversations": [
            {"uid": "c0", "messages": []},
            {"uid": "c1", "messages": [{"role": "assistant", "header": [], "content": [30]}]},
            {
                "uid": "c2",
                "messages": [_USER, {"role": "assistant", "header": [90, 93], "content": []}],
            },
        ]
    },
    {"conversations": []},
)


@st.composite
def _message(draw: Any) -> dict[str, Any]:
    role = draw(st.sampled_from(oracle.ROLES))
    tokens = st.integers(0, 30)
    message: dict[str, Any] = {
        "role": role,
        "header": draw(st.lists(tokens, max_size=2)),
        "content": draw(st.lists(tokens, max_size=3)),
    }
    if draw(st.booleans()):
        message["step_loss_mask"] = draw(st.sampled_from([1, 0]))
    if role == "assistant" and draw(st.booleans()):
        message["think"] = draw(st.lists(tokens, max_size=2))
    return message


_TRAINED_TURN = {"role": "assistant", "header": [90, 93], "content": [30]}


@st.composite
def _multi_turn_case(draw: Any) -> dict[str, Any]:
    """Conversations of random turns; (edge) no conversation, an empty conversation, one
    without a trained token. Below edge every conversation ends with a trained turn if it has
    none."""
    n = draw(st.integers(cs.fewest_samples(0), 3))
    conversations = []
    for i in range(n):
        messages = draw(st.lists(_message(), max_size=4))
        if not allows("edge") and not any(oracle.multi_turn_loss_mask(messages)):
            messages.append(dict(_TRAINED_TURN))
        conversations.append({"uid": f"c{i}", "messages": messages})
    return {"conversations": conversations}


_MULTI_TURN_FEATURES = (
    "no_samples",
    "empty_response",
    "actionless_sample",
    "mask_holes",
    "empty_batch",
)


def _multi_turn_features(case: dict[str, Any]) -> frozenset[str]:
    """The features of the conversations' loss masks (read by the walker)."""
    masks = [{"mask": oracle.multi_turn_loss_mask(c["messages"])} for c in case["conversations"]]
    return generic_features({"samples": masks}) & frozenset(_MULTI_TURN_FEATURES)


@clause(
    "mask.multi_turn",
    title="Multi-turn loss mask",
    statement="""Per message (tokens = header + think + content): assistant content = 1, the
    assistant's header/role prefix = 0, system/user/tool tokens = 0, a message with
    step_loss_mask = 0 is all 0; tokens of a leading think block = 0 only when the profile
    says so. Conversations are right-padded with 0.""",
    ops=("multi_turn_loss_mask",),
    strategy=_multi_turn_case(),
    examples=_MULTI_TURN_EXAMPLES,
    checks=("rows", "loss_mask", "padding_zero"),
    meets=_MULTI_TURN_FEATURES,
    case_features=_multi_turn_features,
)
def check_multi_turn(ctx: Any, case: dict[str, Any]) -> None:
    """Profile key ``mask_think_block`` (default False): zero the think block of assistant turns."""
    conversations = case["conversations"]
    uids = [c["uid"] for c in conversations]
    mask_think = bool(ctx.profile.get("mask_think_block", False))
    expected = [
        oracle.multi_turn_loss_mask(c["messages"], mask_think_block=mask_think, uid=c["uid"])
        for c in conversations
    ]
    lengths = [len(row) for row in expected]
    mask = ctx.call("multi_turn_loss_mask", copy.deepcopy([c["messages"] for c in conversations]))
    assert_equal(
        "mask.multi_turn",
        "number of rows",
        len(conversations),
        int(mask.shape[0]),
        check="rows",
    )
    with ctx.check("loss_mask"):
        assert_rows_equal(
            "mask.multi_turn", "loss_mask", expected, unpad_right(mask, lengths), uids=uids
        )
    assert_padding_zero("mask.multi_turn", "loss_mask", mask, lengths, uids, check="padding_zero")

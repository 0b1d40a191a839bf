"""Clauses of the CONTRACT area `layout`.

Ragged inputs are handed to the target as lists of 1-D tensors (ids int64, float fields
in the target dtype), one per sample; the per-token fields of a case are the response ids,
``rollout_logprobs`` and ``loss_mask``. Float fields are float32-representable, so every
layout conversion must be bit-exact.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from hypothesis import strategies as st

from rlconform.conformance import strategies as cs
from rlconform.conformance.compare import assert_equal, assert_rows_equal
from rlconform.conformance.errors import ClauseMismatch
from rlconform.conformance.features import allows, generic_features, pad_value_features
from rlconform.conformance.harness import to_float_list
from rlconform.conformance.registry import clause
from rlconform.oracle import layout as oracle

MAX_PROMPT = 3
MAX_RESPONSE = 3
FIELDS = ("rollout_logprobs", "loss_mask")

_EXAMPLES = (
    # P_i = 0, L_i = 0, L_i = max, a row with neither; pad id equal to real token ids.
    {
        "samples": [
            {
                "uid": "s0",
                "prompt": [],
                "response": [5, 6, 0],
                "rollout_logprobs": [-0.5, -1.0, -2.0],
                "loss_mask": [1, 1, 1],
            },
            {
                "uid": "s1",
                "prompt": [7, 0, 7],
                "response": [],
                "rollout_logprobs": [],
                "loss_mask": [],
            },
            {
                "uid": "s2",
                "prompt": [0],
                "response": [0, 1],
                "rollout_logprobs": [-0.25, -3.5],
                "loss_mask": [1, 0],
            },
            {"uid": "s3", "prompt": [], "response": [], "rollout_logprobs": [], "loss_mask": []},
        ],
        "pad_token_id": 0,
        "extra_prompt_pad": 1,
        "extra_response_pad": 2,
        "pad_value": float("nan"),
        "extra_tail": 2,
    },
    # One full-width sample (no padding at all) next to a short one; garbage padding.
    {
        "samples": [
            {
                "uid": "s0",
                "prompt": [1, 2, 3],
                "response": [4, 5, 6],
                "rollout_logprobs": [-1.0, -2.0, -3.0],
                "loss_mask": [1, 0, 1],
            },
            {
                "uid": "s1",
                "prompt": [2],
                "response": [3],
                "rollout_logprobs": [-0.125],
                "loss_mask": [1],
            },
        ],
        "pad_token_id": 3,
        "extra_prompt_pad": 0,
        "extra_response_pad": 0,
        "pad_value": -1e30,
        "extra_tail": 0,
    },
    # The empty batch.
    {
        "samples": [],
        "pad_token_id": 0,
        "extra_prompt_pad": 1,
        "extra_response_pad": 1,
        "pad_value": float("inf"),
        "extra_tail": 1,
    },
)


@st.composite
def _sample(draw: Any, index: int) -> dict[str, Any]:
    ids = st.integers(0, 7)
    length = draw(cs.lengths(MAX_RESPONSE))
    return {
        "uid": f"s{index}",
        "prompt": draw(st.lists(ids, max_size=MAX_PROMPT)),
        "response": draw(st.lists(ids, min_size=length, max_size=length)),
        "rollout_logprobs": draw(st.lists(cs.finite(-8.0, 0.0), min_size=length, max_size=length)),
        "loss_mask": draw(cs.loss_mask(length)),
    }


@st.composite
def _layout_case(draw: Any) -> dict[str, Any]:
    """Ragged samples (P_i = 0 possible), pad-id collisions and garbage padding; (edge) no
    samples and L_i = 0; (hardening) a zero-width prompt or response tensor, NaN/inf padding."""
    samples = [draw(_sample(i)) for i in range(draw(st.integers(cs.fewest_samples(0), 4)))]
    wide = 0 if allows("hardening") or not samples else 1
    prompt_fewest = wide if max((len(s["prompt"]) for s in samples), default=0) == 0 else 0
    response_fewest = wide if max((len(s["response"]) for s in samples), default=0) == 0 else 0
    return {
        "samples": samples,
        "pad_token_id": draw(st.integers(0, 7)),
        "extra_prompt_pad": draw(st.integers(prompt_fewest, 2)),
        "extra_response_pad": draw(st.integers(response_fewest, 2)),
        "pad_value": draw(cs.pad_values()),
        "extra_tail": draw(st.integers(0, 2)),
    }


def _widths(case: dict[str, Any]) -> tuple[int, int]:
    samples = case["samples"]
    prompt_width = max((len(s["prompt"]) for s in samples), default=0) + case["extra_prompt_pad"]
    response_width = (
        max((len(s["response"]) for s in samples), default=0) + case["extra_response_pad"]
    )
    return prompt_width, response_width


def _ragged_features(case: dict[str, Any]) -> set[str]:
    """no_samples and empty_response (the walker reads them off the loss masks)."""
    return set(generic_features(case) & {"no_samples", "empty_response"})


def _pad_features(case: dict[str, Any]) -> set[str]:
    """A padded width larger than the longest response; a zero-width prompt or response."""
    found = _ragged_features(case)
    if not case["samples"]:
        return found
    prompt_width, response_width = _widths(case)
    if 0 in (prompt_width, response_width):
        found.add("zero_width")
    if case["extra_response_pad"] > 0 and response_width > 0:
        found.add("extra_padding")
    return found


def _pack_features(case: dict[str, Any]) -> set[str]:
    """A packed row of no token."""
    found = _ragged_features(case)
    if case["samples"] and not any(s["prompt"] or s["response"] for s in case["samples"]):
        found.add("zero_width")
    return found


def _roundtrip_features(case: dict[str, Any]) -> set[str]:
    """Both, and the pad value the harness writes into the padding of the per-token fields
    (and after the packed tokens)."""
    found = _pad_features(case) | _pack_features(case)
    _, response_width = _widths(case)
    padded = any(len(s["response"]) < response_width for s in case["samples"])
    if case["samples"] and (padded or case["extra_tail"]):
        found |= pad_value_features(case["pad_value"])
    return found


def _rows(ctx: Any, rows: Sequence[Sequence[Any]], dtype: torch.dtype) -> list[torch.Tensor]:
    return [torch.tensor(list(row), dtype=dtype, device=ctx.device) for row in rows]


def _field_dtype(ctx: Any, name: str) -> torch.dtype:
    return ctx.dtype if name == "rollout_logprobs" else torch.int64


def _response_fields(case: dict[str, Any]) -> dict[str, list[list[Any]]]:
    """The per-token response fields of every sample."""
    return {name: [list(s[name]) for s in case["samples"]] for name in FIELDS}


def _sequence_fields(case: dict[str, Any]) -> dict[str, list[list[Any]]]:
    """The same fields over the whole sequence (prompt + response): 0 on prompt tokens."""
    return {
        name: [[0] * len(s["prompt"]) + list(s[name]) for s in case["samples"]] for name in FIELDS
    }


def _tensor_fields(ctx: Any, fields: dict[str, list[list[Any]]]) -> dict[str, list[torch.Tensor]]:
    return {name: _rows(ctx, rows, _field_dtype(ctx, name)) for name, rows in fields.items()}


def _get(clause_id: str, container: Mapping[str, Any], key: str) -> Any:
    try:
        return container[key]
    except (KeyError, TypeError):
        raise ClauseMismatch(
            f"[{clause_id}] the output has no {key!r} entry",
            detail={"what": key, "expected": "present", "actual": "missing"},
            check="keys",
        ) from None


def _as_list(values: Any) -> list[Any]:
    return to_float_list(values) if isinstance(values, torch.Tensor) else list(values)


# ---------------------------------------------------------------------------------------
# layout.pad
# ---------------------------------------------------------------------------------------


# The check of each padded key: which part of the layout it shows.
_PAD_CHECKS = {
    "prompts": "token_ids",
    "responses": "token_ids",
    "input_ids": "token_ids",
    "attention_mask": "attention_mask",
    "response_mask": "response_mask",
    **{name: "response_fields" for name in FIELDS},
}


@clause(
    "layout.pad",
    title="Padded layout: left-padded prompts, right-padded responses",
    statement="""Prompts are left-padded and responses right-padded (with the pad id); the
    attention mask is 1 exactly on real tokens; position ids are 0 at the first real token
    and count real tokens across prompt and response (padding positions are not read); the
    response mask is 1 on the first L_i response columns; per-token response fields are
    right-padded with 0.""",
    ops=("pad_batch",),
    strategy=_layout_case(),
    examples=_EXAMPLES,
    checks=(
        "keys",
        "shape",
        "token_ids",
        "attention_mask",
        "response_mask",
        "response_fields",
        "position_ids",
    ),
    meets=("no_samples", "empty_response", "extra_padding", "zero_width"),
    case_features=_pad_features,
)
def check_pad(ctx: Any, case: dict[str, Any]) -> None:
    samples = case["samples"]
    uids = [s["uid"] for s in samples]
    prompt_width, response_width = _widths(case)
    expected = oracle.pad_batch(
        [s["prompt"] for s in samples],
        [s["response"] for s in samples],
        pad_token_id=case["pad_token_id"],
        prompt_width=prompt_width,
        response_width=response_width,
        response_fields=_response_fields(case),
    )
    batch = ctx.call(
        "pad_batch",
        _rows(ctx, [s["prompt"] for s in samples], torch.int64),
        _rows(ctx, [s["response"] for s in samples], torch.int64),
        pad_token_id=case["pad_token_id"],
        prompt_width=prompt_width,
        response_width=response_width,
        response_fields=_tensor_fields(ctx, _response_fields(case)),
    )
    full_width = prompt_width + response_width
    exact = {
        "prompts": prompt_width,
        "responses": response_width,
        "input_ids": full_width,
        "attention_mask": full_width,
        "response_mask": response_width,
        **{name: response_width for name in FIELDS},
    }
    for key, width in exact.items():
        actual = _get("layout.pad", batch, key)
        shape = tuple(getattr(actual, "shape", ()))
        assert_equal("layout.pad", f"{key} shape", (len(samples), width), shape, check="shape")
        with ctx.check(_PAD_CHECKS[key]):
            assert_rows_equal(
                "layout.pad", f"{key} (padded column)", expected[key], _as_list(actual), uids=uids
            )
    positions = _get("layout.pad", batch, "position_ids")
    assert_equal(
        "layout.pad",
        "position_ids shape",
        (len(samples), full_width),
        tuple(getattr(positions, "shape", ())),
        check="shape",
    )
    real_columns = [[c for c, a in enumerate(row) if a] for row in expected["attention_mask"]]
    assert_rows_equal(
        "layout.pad",
        "position_ids at real tokens (n-th real token of the row)",
        [[expected["position_ids"][i][c] for c in cols] for i, cols in enumerate(real_columns)],
        [
            [row[c] for c in cols]
            for row, cols in zip(_as_list(positions), real_columns, strict=True)
        ],
        uids=uids,
        check="position_ids",
    )


# ---------------------------------------------------------------------------------------
# layout.pack
# ---------------------------------------------------------------------------------------


def _sequences(case: dict[str, Any]) -> list[list[int]]:
    return [list(s["prompt"]) + list(s["response"]) for s in case["samples"]]


def _per_sample(flat: Sequence[Any], cu_seqlens: Sequence[int]) -> list[list[Any]]:
    return [
        list(flat[start:end]) for start, end in zip(cu_seqlens[:-1], cu_seqlens[1:], strict=True)
    ]


def _require_packed_length(key: str, flat: Sequence[Any], total: int) -> None:
    """cu_seqlens[-1] tokens must be there; a tail after them (row padding) is not read."""
    if len(flat) < total:
        raise ClauseMismatch(
            f"[layout.pack] {key} holds {len(flat)} packed tokens, cu_seqlens covers {total}",
            detail={"what": key, "expected": total, "actual": len(flat)},
            check="packed_length",
        )


def _check_no_cross_attention(
    packed: Mapping[str, Any], cu_seqlens: list[int], uids: list[Any]
) -> None:
    """Token n may attend token m only within one sample (segment ids or a dense mask)."""
    owner = [
        i
        for i, (start, end) in enumerate(zip(cu_seqlens[:-1], cu_seqlens[1:], strict=True))
        for _ in range(start, end)
    ]
    if "segment_ids" in packed:
        segments = _as_list(packed["segment_ids"].reshape(-1))
        _require_packed_length("segment_ids", segments, len(owner))
        label_of_sample: dict[int, Any] = {}
        for n, (i, label) in enumerate(zip(owner, segments[: len(owner)], strict=True)):
            first = label_of_sample.setdefault(i, label)
            shared = [j for j, other in label_of_sample.items() if j != i and other == label]
            if first != label or shared:
                raise ClauseMismatch(
                    f"[layout.pack] segment_ids: packed token {n} of sample uid={uids[i]!r} has "
                    f"segment {label!r}, which does not separate it from the other samples",
                    detail={"what": "segment_ids", "uid": uids[i], "token": n, "actual": label},
                    check="no_cross_attention",
                )
    dense = packed.get("attention_mask") if isinstance(packed, Mapping) else None
    total = len(owner)
    if (
        dense is not None
        and total
        and dense.dim() >= 2
        and dense.shape[-1] == dense.shape[-2] >= total
    ):
        matrix = _as_list(dense.reshape(-1, dense.shape[-2], dense.shape[-1])[0])
        for n in range(total):
            for m in range(total):
                if owner[n] != owner[m] and matrix[n][m]:
                    raise ClauseMismatch(
                        f"[layout.pack] attention_mask: token {n} of sample uid={uids[owner[n]]!r} "
                        f"attends token {m} of sample uid={uids[owner[m]]!r} across a sample boundary",
                        detail={
                            "what": "attention_mask",
                            "uid": uids[owner[n]],
                            "token": n,
                            "actual": m,
                        },
                        check="no_cross_attention",
                    )


@clause(
    "layout.pack",
    title="Packed layout with cu_seqlens",
    statement="""Sequences are packed end to end into one row; cu_seqlens = [0, L_0, L_0 + L_1,
    ...] delimits the samples; position ids restart at 0 in every sample; no token attends
    across a sample boundary (checked on cu_seqlens, and on segment_ids or a dense
    attention_mask when the target exposes one); per-token fields are packed alike; tokens
    after cu_seqlens[-1] (padding of the packed row) are not read.""",
    ops=("pack_batch",),
    strategy=_layout_case(),
    examples=_EXAMPLES,
    checks=(
        "keys",
        "cu_seqlens",
        "packed_length",
        "packed_fields",
        "position_ids",
        "no_cross_attention",
    ),
    meets=("no_samples", "empty_response", "zero_width"),
    case_features=_pack_features,
)
def check_pack(ctx: Any, case: dict[str, Any]) -> None:
    uids = [s["uid"] for s in case["samples"]]
    sequences = _sequences(case)
    expected = oracle.pack_batch(sequences, fields=_sequence_fields(case))
    packed = ctx.call(
        "pack_batch",
        _rows(ctx, sequences, torch.int64),
        fields=_tensor_fields(ctx, _sequence_fields(case)),
    )
    cu_seqlens = [int(v) for v in _as_list(_get("layout.pack", packed, "cu_seqlens").reshape(-1))]
    assert_equal(
        "layout.pack", "cu_seqlens", expected["cu_seqlens"], cu_seqlens, check="cu_seqlens"
    )
    for key in ("input_ids", "position_ids", *FIELDS):
        flat = _as_list(_get("layout.pack", packed, key).reshape(-1))
        _require_packed_length(key, flat, len(expected[key]))
        with ctx.check("position_ids" if key == "position_ids" else "packed_fields"):
            assert_rows_equal(
                "layout.pack",
                f"{key} (token index within the sample)",
                _per_sample(expected[key], expected["cu_seqlens"]),
                _per_sample(flat, expected["cu_seqlens"]),
                uids=uids,
            )
    _check_no_cross_attention(packed, expected["cu_seqlens"], uids)


# ---------------------------------------------------------------------------------------
# layout.roundtrip
# ---------------------------------------------------------------------------------------


def _compare_ragged(
    ctx: Any,
    check: str,
    what: str,
    expected: dict[str, list[list[Any]]],
    actual: Mapping[str, Any],
    uids: list[Any],
) -> None:
    """Every ragged field back as it was (check ``check``; a missing key is ``keys``)."""
    for key, rows in expected.items():
        got = _get("layout.roundtrip", actual, key)
        got_rows = [_as_list(row) for row in got]
        with ctx.check(check):
            assert_rows_equal("layout.roundtrip", f"{what}: {key}", rows, got_rows, uids=uids)


def _harness_padded(ctx: Any, case: dict[str, Any]) -> dict[str, torch.Tensor]:
    """A padded batch built by the harness, with pad-id collisions and garbage padding."""
    samples = case["samples"]
    prompt_width, response_width = _widths(case)
    padded = oracle.pad_batch(
        [s["prompt"] for s in samples],
        [s["response"] for s in samples],
        pad_token_id=case["pad_token_id"],
        prompt_width=prompt_width,
        response_width=response_width,
    )
    widths = {"prompts": prompt_width, "responses": response_width, "response_mask": response_width}
    batch = {
        key: torch.tensor(rows, dtype=torch.int64, device=ctx.device).reshape(
            len(samples), widths.get(key, prompt_width + response_width)
        )
        for key, rows in padded.items()
    }
    for name in FIELDS:
        fill = case["pad_value"] if name == "rollout_logprobs" else 1
        batch[name] = torch.tensor(
            [oracle.right_pad(s[name], response_width, fill) for s in samples],
            dtype=_field_dtype(ctx, name),
            device=ctx.device,
        ).reshape(len(samples), response_width)
    return batch


def _harness_packed(ctx: Any, case: dict[str, Any]) -> dict[str, torch.Tensor]:
    """A packed batch built by the harness, with ``extra_tail`` garbage tokens after the last sample."""
    packed = oracle.pack_batch(_sequences(case), fields=_sequence_fields(case))
    tail = case["extra_tail"]
    out = {
        "input_ids": torch.tensor(
            packed["input_ids"] + [case["pad_token_id"]] * tail, device=ctx.device
        ),
        "position_ids": torch.tensor(packed["position_ids"] + [0] * tail, device=ctx.device),
        "cu_seqlens": torch.tensor(packed["cu_seqlens"], dtype=torch.int32, device=ctx.device),
        "rollout_logprobs": torch.tensor(
            packed["rollout_logprobs"] + [case["pad_value"]] * tail,
            dtype=ctx.dtype,
            device=ctx.device,
        ),
        "loss_mask": torch.tensor(
            packed["loss_mask"] + [1] * tail, dtype=torch.int64, device=ctx.device
        ),
    }
    return {
        key: value.reshape(1, -1) if key != "cu_seqlens" else value for key, value in out.items()
    }


@clause(
    "layout.roundtrip",
    title="Ragged -> padded / packed -> ragged is the identity",
    statement="""Padding a ragged batch and unpadding it, or packing it and unpacking it,
    gives back every per-token field exactly (prompt ids, response ids, log-probs, loss
    mask); unpadding reads the attention mask, never the pad id, and ignores garbage in
    padding; unpacking reads cu_seqlens and ignores tail padding of the packed row.""",
    ops=("pad_batch", "unpad_batch", "pack_batch", "unpack_batch"),
    strategy=_layout_case(),
    examples=_EXAMPLES,
    checks=("keys", "pad_roundtrip", "garbage_padding", "pack_roundtrip", "tail_padding"),
    meets=(
        "no_samples",
        "empty_response",
        "extra_padding",
        "padding_finite",
        "padding_nonfinite",
        "overflow",
        "zero_width",
    ),
    case_features=_roundtrip_features,
)
def check_roundtrip(ctx: Any, case: dict[str, Any]) -> None:
    samples = case["samples"]
    uids = [s["uid"] for s in samples]
    prompt_width, response_width = _widths(case)
    ragged = {
        "prompts": [s["prompt"] for s in samples],
        "responses": [s["response"] for s in samples],
    }
    ragged.update(_response_fields(case))

    batch = ctx.call(
        "pad_batch",
        _rows(ctx, ragged["prompts"], torch.int64),
        _rows(ctx, ragged["responses"], torch.int64),
        pad_token_id=case["pad_token_id"],
        prompt_width=prompt_width,
        response_width=response_width,
        response_fields=_tensor_fields(ctx, _response_fields(case)),
    )
    back = ctx.call("unpad_batch", batch, response_fields=FIELDS)
    _compare_ragged(ctx, "pad_roundtrip", "pad_batch -> unpad_batch", ragged, back, uids)
    back = ctx.call("unpad_batch", _harness_padded(ctx, case), response_fields=FIELDS)
    what = "harness-padded (garbage padding) -> unpad_batch"
    _compare_ragged(ctx, "garbage_padding", what, ragged, back, uids)

    sequences = _sequences(case)
    sequence_ragged = {"input_ids": sequences, **_sequence_fields(case)}
    packed = ctx.call(
        "pack_batch",
        _rows(ctx, sequences, torch.int64),
        fields=_tensor_fields(ctx, _sequence_fields(case)),
    )
    back = ctx.call("unpack_batch", packed, fields=FIELDS)
    what = "pack_batch -> unpack_batch"
    _compare_ragged(ctx, "pack_roundtrip", what, sequence_ragged, back, uids)
    back = ctx.call("unpack_batch", _harness_packed(ctx, case), fields=FIELDS)
    what = "harness-packed (tail padding) -> unpack_batch"
    _compare_ragged(ctx, "tail_padding", what, sequence_ragged, back, uids)

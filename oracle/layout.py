"""Oracle for the CONTRACT area `layout` (standard library only, ragged lists, float64).

Two layouts of a ragged batch: *padded* (prompts left-padded to P columns, responses
right-padded to R columns, one row per sample) and *packed* (all sequences end to end in
one row, sample boundaries in ``cu_seqlens``). Padding positions of per-token fields hold
0; position ids at padding are not part of the contract.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rlconform.oracle.errors import ContractError


def left_pad(row: Sequence[Any], width: int, fill: Any) -> list[Any]:
    """layout.pad: ``fill`` on the left, the row's values in the last len(row) columns."""
    if len(row) > width:
        raise ContractError("layout.pad", f"row of {len(row)} tokens is wider than {width}")
    return [fill] * (width - len(row)) + list(row)


def right_pad(row: Sequence[Any], width: int, fill: Any) -> list[Any]:
    """layout.pad: the row's values in the first len(row) columns, ``fill`` after."""
    if len(row) > width:
        raise ContractError("layout.pad", f"row of {len(row)} tokens is wider than {width}")
    return list(row) + [fill] * (width - len(row))


def pad_batch(
    prompts: Sequence[Sequence[int]],
    responses: Sequence[Sequence[int]],
    *,
    pad_token_id: int,
    prompt_width: int,
    response_width: int,
    response_fields: Mapping[str, Sequence[Sequence[Any]]] | None = None,
) -> dict[str, list[list[Any]]]:
    """layout.pad: the canonical padded batch of ragged prompts and responses.

    prompts (B, P) left-padded with ``pad_token_id``; responses (B, R) right-padded;
    input_ids = prompts ++ responses; attention_mask 1 on real tokens; position_ids =
    number of real tokens before the column (0 at the first real token, counting across
    prompt and response; 0 at padding); response_mask (B, R) 1 on the first L_i columns;
    each response field (B, R) right-padded with 0.
    """
    if len(prompts) != len(responses):
        raise ContractError("layout.pad", f"{len(prompts)} prompts but {len(responses)} responses")
    fields = dict(response_fields or {})
    batch: dict[str, list[list[Any]]] = {
        key: []
        for key in (
            "prompts",
            "responses",
            "input_ids",
            "attention_mask",
            "position_ids",
            "response_mask",
        )
    }
    for name in fields:
        batch[name] = []
    for i, (prompt, response) in enumerate(zip(prompts, responses, strict=True)):
        prompt_row = left_pad(prompt, prompt_width, pad_token_id)
        response_row = right_pad(response, response_width, pad_token_id)
        attention = left_pad([1] * len(prompt), prompt_width, 0) + right_pad(
            [1] * len(response), response_width, 0
        )
        positions = []
        real_before = 0
        for real in attention:
            positions.append(real_before if real else 0)
            real_before += real
        batch["prompts"].append(prompt_row)
        batch["responses"].append(response_row)
        batch["input_ids"].append(prompt_row + response_row)
        batch["attention_mask"].append(attention)
        batch["position_ids"].append(positions)
        batch["response_mask"].append(right_pad([1] * len(response), response_width, 0))
        for name, rows in fields.items():
            if len(rows[i]) != len(response):
                raise ContractError(
                    "layout.pad",
                    f"has {len(rows[i])} values, response has {len(response)} tokens",
                    uid=i,
                    field=name,
                )
            batch[name].append(right_pad(rows[i], response_width, 0))
    return batch


def unpad_batch(
    batch: Mapping[str, Sequence[Sequence[Any]]], *, response_fields: Sequence[str] = ()
) -> dict[str, list[list[Any]]]:
    """layout.roundtrip: the ragged batch back from a padded one, read off the attention mask.

    Row i has P_i = number of 1s in its first P attention columns and L_i = number of 1s in
    its last R; the prompt is the last P_i prompt columns, the response and every response
    field the first L_i response columns. Token ids at padding are never read.
    """
    prompt_width = len(batch["prompts"][0]) if batch["prompts"] else 0
    ragged: dict[str, list[list[Any]]] = {"prompts": [], "responses": []}
    for name in response_fields:
        ragged[name] = []
    for i, attention in enumerate(batch["attention_mask"]):
        prompt_length = sum(attention[:prompt_width])
        response_length = sum(attention[prompt_width:])
        ragged["prompts"].append(list(batch["prompts"][i][prompt_width - prompt_length :]))
        ragged["responses"].append(list(batch["responses"][i][:response_length]))
        for name in response_fields:
            ragged[name].append(list(batch[name][i][:response_length]))
    return ragged


def pack_batch(
    sequences: Sequence[Sequence[int]],
    *,
    fields: Mapping[str, Sequence[Sequence[Any]]] | None = None,
) -> dict[str, list[Any]]:
    """layout.pack: sequences end to end; sample i owns tokens cu_seqlens[i]:cu_seqlens[i+1].

    cu_seqlens = [0, L_0, L_0 + L_1, ...] (B + 1 entries); position_ids restart at 0 in
    every sample; segment_ids[n] = the sample that token n belongs to, so token n may
    attend token m only if segment_ids[n] == segment_ids[m]. Each per-token field is
    packed the same way.
    """
    packed: dict[str, list[Any]] = {
        "input_ids": [],
        "cu_seqlens": [0],
        "position_ids": [],
        "segment_ids": [],
    }
    named = dict(fields or {})
    for name in named:
        packed[name] = []
    for i, sequence in enumerate(sequences):
        packed["input_ids"].extend(sequence)
        packed["position_ids"].extend(range(len(sequence)))
        packed["segment_ids"].extend([i] * len(sequence))
        packed["cu_seqlens"].append(packed["cu_seqlens"][-1] + len(sequence))
        for name, rows in named.items():
            if len(rows[i]) != len(sequence):
                raise ContractError(
                    "layout.pack",
                    f"has {len(rows[i])} values, sequence has {len(sequence)} tokens",
                    uid=i,
                    field=name,
                )
            packed[name].extend(rows[i])
    return packed


def unpack_batch(
    packed: Mapping[str, Sequence[Any]], *, fields: Sequence[str] = ()
) -> dict[str, list[list[Any]]]:
    """layout.roundtrip: the ragged batch back from a packed one, cut at ``cu_seqlens``.

    Tokens past cu_seqlens[-1] (tail padding of the packed row) belong to no sample.
    """
    cu_seqlens = list(packed["cu_seqlens"])
    ragged: dict[str, list[list[Any]]] = {"input_ids": []}
    for name in fields:
        ragged[name] = []
    for start, end in zip(cu_seqlens[:-1], cu_seqlens[1:], strict=True):
        if end < start:
            raise ContractError(
                "layout.roundtrip", f"cu_seqlens {cu_seqlens} is not non-decreasing"
            )
        ragged["input_ids"].append(list(packed["input_ids"][start:end]))
        for name in fields:
            ragged[name].append(list(packed[name][start:end]))
    return ragged

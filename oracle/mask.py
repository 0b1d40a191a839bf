"""Oracle for the CONTRACT area `mask` (standard library only, ragged lists, float64)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from rlconform.oracle.errors import ContractError, require_same_length

ROLES = ("system", "user", "assistant", "tool")


def response_mask_from_eos(
    response_ids: Sequence[int], eos_token: int | Sequence[int]
) -> list[int]:
    """mask.response_from_eos: 1 up to and including the first EOS token, 0 after.

    ``eos_token`` is one id or a list of ids. No EOS in the row: all 1. The pad id plays
    no part: everything after the first EOS is 0 whatever its id.
    """
    eos_ids = {eos_token} if isinstance(eos_token, int) else set(eos_token)
    mask = []
    seen_eos = False
    for token in response_ids:
        mask.append(0 if seen_eos else 1)
        if token in eos_ids:
            seen_eos = True
    return mask


def response_mask_from_attention(
    attention_row: Sequence[int], response_width: int, *, uid: object = None
) -> list[int]:
    """mask.response_from_attention: the last R columns of a conforming attention row.

    The row is P prompt columns then R response columns. Conforming means: every value
    is 0 or 1, the prompt part is left-padded (``0...0 1...1``) and the response part is
    right-padded (``1...1 0...0``). Anything else (right-padded prompt, left-padded
    response, a hole) raises ContractError rather than being read as a mask.
    """
    clause = "mask.response_from_attention"
    width = len(attention_row)
    if not 0 <= response_width <= width:
        raise ContractError(
            clause,
            f"response width {response_width} outside [0, {width}]",
            uid=uid,
            field="attention_mask",
        )
    prompt = list(attention_row[: width - response_width])
    response = list(attention_row[width - response_width :])
    for column, value in enumerate(attention_row):
        if value not in (0, 1):
            raise ContractError(
                clause,
                f"value {value!r} at column {column} is not 0 or 1",
                uid=uid,
                field="attention_mask",
            )
    for t in range(1, len(prompt)):
        if prompt[t - 1] == 1 and prompt[t] == 0:
            raise ContractError(
                clause,
                f"prompt part {prompt} is not left-padded (a 0 at prompt column {t} follows a 1)",
                uid=uid,
                field="attention_mask",
            )
    for t in range(1, len(response)):
        if response[t - 1] == 0 and response[t] == 1:
            raise ContractError(
                clause,
                f"response part {response} is not right-padded (a 1 at response column {t} follows a 0)",
                uid=uid,
                field="attention_mask",
            )
    return response


def valid_token_mask(
    response_mask: Sequence[int], loss_mask: Sequence[int], keep: int, *, uid: object = None
) -> list[int]:
    """mask.loss: valid = response ∩ non-padding ∩ per-token loss_mask ∩ task keep-mask.

    Ragged rows hold only real response tokens, so "non-padding" is every position of the
    row; ``keep`` is the sample's task keep flag (0 = dropped by the task filter).
    """
    require_same_length("mask.loss", uid, response_mask=response_mask, loss_mask=loss_mask)
    return [1 if (r and m and keep) else 0 for r, m in zip(response_mask, loss_mask, strict=True)]


def masked_mean(
    values: Sequence[Sequence[float]], mask: Sequence[Sequence[int]], *, empty: float = 0.0
) -> float:
    """mask.loss: sum(values * mask) / sum(mask) over the whole batch.

    Only positions with mask 1 are read, so NaN/inf elsewhere never matter. The
    denominator counts valid positions, never padding. An all-zero mask gives ``empty``
    (profile key ``masked_mean_empty``; contract default 0.0, as verl's ``masked_mean``).
    """
    if len(values) != len(mask):
        raise ContractError("mask.loss", f"{len(values)} value rows but {len(mask)} mask rows")
    selected = []
    for i, (row, row_mask) in enumerate(zip(values, mask, strict=True)):
        require_same_length("mask.loss", f"row {i}", values=row, mask=row_mask)
        selected.extend(float(v) for v, m in zip(row, row_mask, strict=True) if m)
    if not selected:
        return float(empty)
    return math.fsum(selected) / len(selected)


def multi_turn_loss_mask(
    messages: Sequence[dict[str, Any]], *, mask_think_block: bool = False, uid: object = None
) -> list[int]:
    """mask.multi_turn: the loss mask of one conversation, message by message.

    A message is ``{"role", "header", "content", "step_loss_mask" (default 1), "think"
    (optional, assistant only)}``; its tokens are ``header + think + content``. Assistant:
    header 0 (the role prefix the template writes, not the policy), think block 1 (0
    when ``mask_think_block``), content 1. System, user and tool messages: all 0. A
    message with ``step_loss_mask == 0``: all 0.
    """
    mask: list[int] = []
    for index, message in enumerate(messages):
        role = message["role"]
        if role not in ROLES:
            raise ContractError(
                "mask.multi_turn",
                f"message {index} has unknown role {role!r}",
                uid=uid,
                field="role",
            )
        header = list(message.get("header", []))
        think = list(message.get("think", []))
        content = list(message.get("content", []))
        if think and role != "assistant":
            raise ContractError(
                "mask.multi_turn",
                f"message {index} ({role}) has a think block",
                uid=uid,
                field="think",
            )
        trained = role == "assistant" and message.get("step_loss_mask", 1) == 1
        mask.extend([0] * len(header))
        mask.extend([1 if trained and not mask_think_block else 0] * len(think))
        mask.extend([1 if trained else 0] * len(content))
    return mask

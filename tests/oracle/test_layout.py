"""The layout oracle against hand-built padded and packed batches."""

from __future__ import annotations

import pytest

from rlconform.oracle import layout
from rlconform.oracle.errors import ContractError


def test_pad_batch_by_hand():
    # Sample 0: prompt [7, 8], response [3]; sample 1: no prompt, response [4, 5, 6].
    # P = 3, R = 4, pad id 0.
    batch = layout.pad_batch(
        [[7, 8], []],
        [[3], [4, 5, 6]],
        pad_token_id=0,
        prompt_width=3,
        response_width=4,
        response_fields={"rollout_logprobs": [[-0.5], [-1.0, -2.0, -3.0]]},
    )
    assert batch["prompts"] == [[0, 7, 8], [0, 0, 0]]
    assert batch["responses"] == [[3, 0, 0, 0], [4, 5, 6, 0]]
    assert batch["input_ids"] == [[0, 7, 8, 3, 0, 0, 0], [0, 0, 0, 4, 5, 6, 0]]
    assert batch["attention_mask"] == [[0, 1, 1, 1, 0, 0, 0], [0, 0, 0, 1, 1, 1, 0]]
    # 0 at the first real token, counting across prompt and response.
    assert batch["position_ids"] == [[0, 0, 1, 2, 0, 0, 0], [0, 0, 0, 0, 1, 2, 0]]
    assert batch["response_mask"] == [[1, 0, 0, 0], [1, 1, 1, 0]]
    assert batch["rollout_logprobs"] == [[-0.5, 0, 0, 0], [-1.0, -2.0, -3.0, 0]]


def test_pad_batch_rejects_rows_wider_than_the_width():
    with pytest.raises(ContractError, match="wider"):
        layout.pad_batch([[1, 2]], [[3]], pad_token_id=0, prompt_width=1, response_width=1)


def test_unpad_reads_the_attention_mask_not_the_pad_id():
    # Pad id 5 also occurs as a real token; garbage 9 in padded fields.
    batch = {
        "prompts": [[5, 5, 1], [5, 5, 5]],
        "responses": [[5, 2, 5], [5, 5, 5]],
        "attention_mask": [[0, 1, 1, 1, 1, 0], [0, 0, 1, 0, 0, 0]],
        "rollout_logprobs": [[-1.0, -2.0, 9.0], [9.0, 9.0, 9.0]],
    }
    ragged = layout.unpad_batch(batch, response_fields=("rollout_logprobs",))
    assert ragged == {
        "prompts": [[5, 1], [5]],
        "responses": [[5, 2], []],
        "rollout_logprobs": [[-1.0, -2.0], []],
    }


def test_pack_batch_by_hand():
    packed = layout.pack_batch(
        [[1, 2, 3], [], [4, 5]], fields={"loss_mask": [[0, 1, 1], [], [1, 0]]}
    )
    assert packed["input_ids"] == [1, 2, 3, 4, 5]
    assert packed["cu_seqlens"] == [0, 3, 3, 5]
    assert packed["position_ids"] == [0, 1, 2, 0, 1]
    assert packed["segment_ids"] == [0, 0, 0, 2, 2]
    assert packed["loss_mask"] == [0, 1, 1, 1, 0]


def test_unpack_ignores_tail_padding():
    packed = {"input_ids": [1, 2, 3, 4, 5, 0, 0], "cu_seqlens": [0, 3, 3, 5]}
    assert layout.unpack_batch(packed) == {"input_ids": [[1, 2, 3], [], [4, 5]]}


def test_roundtrips_are_identities():
    prompts, responses = [[7], [], [1, 2]], [[3, 4], [5], []]
    padded = layout.pad_batch(prompts, responses, pad_token_id=3, prompt_width=3, response_width=2)
    assert layout.unpad_batch(padded) == {"prompts": prompts, "responses": responses}
    sequences = [p + r for p, r in zip(prompts, responses, strict=True)]
    assert layout.unpack_batch(layout.pack_batch(sequences)) == {"input_ids": sequences}

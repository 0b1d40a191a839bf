"""Broken layout implementations must fail on their layout.* clause."""

from __future__ import annotations

import torch

from rlconform.adapters.base import with_overrides
from rlconform.adapters.torchref import TorchRef
from tests.conftest import assert_caught, assert_graded, certify_one


def positions_counting_left_padding(self, prompts, responses, **kwargs):
    batch = self.pad_batch(prompts, responses, **kwargs)
    ids = batch["input_ids"]
    batch["position_ids"] = torch.arange(ids.shape[-1], device=ids.device).expand_as(ids).clone()
    return batch


def prompts_right_padded(self, prompts, responses, **kwargs):
    batch = self.pad_batch(prompts, responses, **kwargs)
    real = batch["attention_mask"][:, : batch["prompts"].shape[-1]].bool()
    flipped = torch.full_like(batch["prompts"], kwargs["pad_token_id"])
    for i, row in enumerate(batch["prompts"]):
        kept = row[real[i]]
        flipped[i, : kept.numel()] = kept
    batch["prompts"] = flipped
    return batch


def positions_not_restarting(self, sequences, **kwargs):
    packed = self.pack_batch(sequences, **kwargs)
    ids = packed["input_ids"]
    packed["position_ids"] = torch.arange(ids.numel(), device=ids.device).reshape(ids.shape)
    return packed


def one_segment_for_all(self, sequences, **kwargs):
    packed = self.pack_batch(sequences, **kwargs)
    packed["segment_ids"] = torch.zeros_like(packed["segment_ids"])
    return packed


def unpad_dropping_last_token(self, batch, **kwargs):
    ragged = self.unpad_batch(batch, **kwargs)
    ragged["responses"] = [row[:-1] for row in ragged["responses"]]
    return ragged


def unpack_dropping_last_token(self, packed, **kwargs):
    ragged = self.unpack_batch(packed, **kwargs)
    return {key: [row[:-1] for row in rows] for key, rows in ragged.items()}


def unpad_by_pad_id(self, batch, **kwargs):
    ragged = self.unpad_batch(batch, **kwargs)
    pad_id = int(batch["responses"][0, -1]) if batch["responses"].numel() else 0
    ragged["responses"] = [row[row != pad_id] for row in ragged["responses"]]
    return ragged


def unpad_reading_the_logprob_padding(self, batch, **kwargs):
    """Log-probs cut after the last finite nonzero value when that lies past the attention
    mask: zero padding is skipped, but finite garbage in the padding is read as data."""
    ragged = self.unpad_batch(batch, **kwargs)
    rows = []
    for row, kept in zip(batch["rollout_logprobs"], ragged["rollout_logprobs"]):
        data = ((row != 0) & row.isfinite()).nonzero().flatten().tolist()
        rows.append(row[: max([len(kept)] + [t + 1 for t in data])])
    ragged["rollout_logprobs"] = rows
    return ragged


def unpack_reading_the_tail(self, packed, **kwargs):
    """The last sample runs to the end of the packed row, tail padding included."""
    ragged = self.unpack_batch(packed, **kwargs)
    total = int(packed["cu_seqlens"][-1])
    for key, rows in ragged.items():
        if rows:
            rows[-1] = torch.cat([rows[-1], packed[key].reshape(-1)[total:]])
    return ragged


def test_position_ids_counting_left_padding_is_caught(torchref):
    broken = with_overrides(torchref, pad_batch=positions_counting_left_padding)
    result = assert_caught(broken, "layout.pad")
    assert "position_ids" in result.message and result.check == "position_ids"


def test_right_padded_prompts_are_caught(torchref):
    broken = with_overrides(torchref, pad_batch=prompts_right_padded)
    assert assert_caught(broken, "layout.pad").check == "token_ids"


def test_position_ids_not_restarting_per_sample_are_caught(torchref):
    broken = with_overrides(torchref, pack_batch=positions_not_restarting)
    result = assert_caught(broken, "layout.pack")
    assert "position_ids" in result.message and result.check == "position_ids"


def test_attention_across_samples_is_caught(torchref):
    broken = with_overrides(torchref, pack_batch=one_segment_for_all)
    result = assert_caught(broken, "layout.pack")
    assert "segment" in result.message and result.check == "no_cross_attention"


def test_unpad_dropping_last_token_is_caught(torchref):
    broken = with_overrides(torchref, unpad_batch=unpad_dropping_last_token)
    assert assert_caught(broken, "layout.roundtrip").check == "pad_roundtrip"


def test_unpack_dropping_last_token_is_caught(torchref):
    broken = with_overrides(torchref, unpack_batch=unpack_dropping_last_token)
    assert assert_caught(broken, "layout.roundtrip").check == "pack_roundtrip"


def test_unpad_reading_garbage_padding_is_caught(torchref):
    broken = with_overrides(torchref, unpad_batch=unpad_reading_the_logprob_padding)
    result = assert_graded(broken, "layout.roundtrip")
    assert result.check == "garbage_padding" and result.severity == "nominal", result.message
    assert "padding_finite" in result.features


def test_unpack_reading_the_tail_is_caught(torchref):
    broken = with_overrides(torchref, unpack_batch=unpack_reading_the_tail)
    assert assert_caught(broken, "layout.roundtrip").check == "tail_padding"


def test_unpad_by_pad_id_is_caught(torchref):
    broken = with_overrides(torchref, unpad_batch=unpad_by_pad_id)
    assert_caught(broken, "layout.roundtrip")


def dense_block_diagonal(self, sequences, **kwargs):
    packed = self.pack_batch(sequences, **kwargs)
    segments = packed["segment_ids"].reshape(-1)
    packed["attention_mask"] = (segments.unsqueeze(0) == segments.unsqueeze(1)).unsqueeze(0)
    return packed


def dense_full_attention(self, sequences, **kwargs):
    packed = dense_block_diagonal(self, sequences, **kwargs)
    packed["attention_mask"] = torch.ones_like(packed["attention_mask"])
    return packed


def test_dense_block_diagonal_mask_passes(torchref):
    exposing = with_overrides(torchref, pack_batch=dense_block_diagonal)
    assert certify_one(exposing, "layout.pack").status == "pass"


def test_dense_attention_across_samples_is_caught(torchref):
    broken = with_overrides(torchref, pack_batch=dense_full_attention)
    assert "across a sample boundary" in assert_caught(broken, "layout.pack").message


def test_unbroken_targets_pass(torchref, oracle_target):
    for target in (torchref, TorchRef(dtype="float64"), oracle_target):
        for clause_id in ("layout.pad", "layout.pack", "layout.roundtrip"):
            result = certify_one(target, clause_id)
            assert result.status == "pass", f"{target.name} {clause_id}: {result.message}"

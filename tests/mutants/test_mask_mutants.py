"""Broken mask implementations must fail on their mask.* clause."""

from __future__ import annotations

import dataclasses

import torch

from rlconform.adapters.base import with_overrides
from rlconform.adapters.torchref import TorchRef
from tests.conftest import assert_caught, assert_graded, certify_one


def eos_mask_excluding_eos(self, response_ids, eos_token):
    eos_ids = torch.tensor([eos_token] if isinstance(eos_token, int) else list(eos_token))
    is_eos = torch.isin(response_ids, eos_ids.to(response_ids.device)).to(torch.int64)
    return (is_eos.cumsum(dim=-1) == 0).to(torch.int64)


def response_mask_from_first_columns(self, attention_mask, response_width):
    return attention_mask[:, :response_width].clone()


def response_mask_without_layout_check(self, attention_mask, response_width):
    return attention_mask[:, attention_mask.shape[-1] - response_width :].clone()


def response_mask_checking_the_prompt_only(self, attention_mask, response_width):
    """Checks values and the prompt part, but reads any response part as a mask (a
    left-padded or holed response slips through)."""
    mask = attention_mask.to(torch.int64)
    prompt = mask[:, : mask.shape[-1] - response_width]
    if bool(((mask != 0) & (mask != 1)).any()) or bool((prompt[:, 1:] < prompt[:, :-1]).any()):
        raise ValueError("attention_mask violates the padded layout")
    return mask[:, mask.shape[-1] - response_width :].clone()


def rejection_without_message(self, attention_mask, response_width):
    try:
        return self.response_mask_from_attention(attention_mask, response_width)
    except ValueError:
        raise ValueError("") from None


def masked_mean_over_all_positions(self, values, mask):
    return torch.where(mask.bool(), values, torch.zeros_like(values)).sum() / max(mask.numel(), 1)


def masked_mean_multiplying_mask(self, values, mask):
    return (values * mask).sum() / mask.sum().clamp(min=1)


def valid_mask_reading_padded_loss_mask(self, response_mask, loss_mask, keep_mask):
    return (loss_mask.bool() & keep_mask.reshape(-1, 1).bool()).to(torch.int64)


def valid_mask_ignoring_keep(self, response_mask, loss_mask, keep_mask):
    return (response_mask.bool() & loss_mask.bool()).to(torch.int64)


def multi_turn_including_assistant_header(self, conversations):
    rows = []
    for messages in conversations:
        row = []
        for message in messages:
            trained = int(message["role"] == "assistant" and message.get("step_loss_mask", 1) == 1)
            row += [trained] * (len(message.get("header", [])) + len(message.get("think", [])))
            row += [trained] * len(message.get("content", []))
        rows.append(row)
    width = max((len(r) for r in rows), default=0)
    return torch.tensor([r + [0] * (width - len(r)) for r in rows], dtype=torch.int64).reshape(
        len(rows), width
    )


def multi_turn_ignoring_step_loss_mask(self, conversations):
    cleared = [[{**m, "step_loss_mask": 1} for m in messages] for messages in conversations]
    return self.multi_turn_loss_mask(cleared)


def test_eos_mask_excluding_eos_is_caught(torchref):
    broken = with_overrides(torchref, response_mask_from_eos=eos_mask_excluding_eos)
    assert_caught(broken, "mask.response_from_eos")


def test_response_mask_from_first_columns_is_caught(torchref):
    broken = with_overrides(torchref, response_mask_from_attention=response_mask_from_first_columns)
    assert_caught(broken, "mask.response_from_attention")


def test_layout_violation_silently_used_is_caught(torchref):
    broken = with_overrides(
        torchref, response_mask_from_attention=response_mask_without_layout_check
    )
    result = assert_caught(broken, "mask.response_from_attention")
    assert "not detected" in result.message and result.check == "rejects_violation"


def test_unchecked_response_part_is_caught(torchref):
    broken = with_overrides(
        torchref, response_mask_from_attention=response_mask_checking_the_prompt_only
    )
    result = assert_graded(broken, "mask.response_from_attention")
    assert result.check == "rejects_violation" and result.severity == "hardening"
    assert "not right-padded" in result.message


def test_rejection_without_message_is_caught(torchref):
    broken = with_overrides(torchref, response_mask_from_attention=rejection_without_message)
    assert "empty message" in assert_caught(broken, "mask.response_from_attention").message


def test_masked_mean_over_all_positions_is_caught(torchref):
    broken = with_overrides(torchref, masked_mean=masked_mean_over_all_positions)
    result = assert_graded(broken, "mask.loss")
    assert "masked mean" in result.message
    assert result.check == "masked_mean" and result.severity == "nominal"


def test_masked_mean_leaking_nan_is_caught(torchref):
    broken = with_overrides(torchref, masked_mean=masked_mean_multiplying_mask)
    result = assert_graded(broken, "mask.loss")
    assert result.check == "masked_mean" and result.severity == "hardening"


def test_valid_mask_reading_padding_is_caught(torchref):
    broken = with_overrides(torchref, valid_token_mask=valid_mask_reading_padded_loss_mask)
    result = assert_caught(broken, "mask.loss")
    assert "padding is not zero" in result.message
    assert result.check == "valid_padding" and "layout_violation" in result.features


def test_valid_mask_ignoring_keep_is_caught(torchref):
    broken = with_overrides(torchref, valid_token_mask=valid_mask_ignoring_keep)
    assert_caught(broken, "mask.loss")


def test_multi_turn_including_assistant_header_is_caught(torchref):
    broken = with_overrides(torchref, multi_turn_loss_mask=multi_turn_including_assistant_header)
    assert "uid=" in assert_caught(broken, "mask.multi_turn").message


def test_multi_turn_ignoring_step_loss_mask_is_caught(torchref):
    broken = with_overrides(torchref, multi_turn_loss_mask=multi_turn_ignoring_step_loss_mask)
    assert_caught(broken, "mask.multi_turn")


def multi_turn_ignoring_think_profile(self, conversations):
    return TorchRef().multi_turn_loss_mask(conversations)


def test_think_block_profile_is_honoured(torchref):
    masking = with_overrides(torchref)
    masking.profile = dataclasses.replace(torchref.profile, extra={"mask_think_block": True})
    assert certify_one(masking, "mask.multi_turn").status == "pass"
    ignoring = with_overrides(masking, multi_turn_loss_mask=multi_turn_ignoring_think_profile)
    assert_caught(ignoring, "mask.multi_turn")


def test_unbroken_targets_pass(torchref, oracle_target):
    clause_ids = (
        "mask.response_from_eos",
        "mask.response_from_attention",
        "mask.loss",
        "mask.multi_turn",
    )
    for target in (torchref, TorchRef(dtype="float64"), oracle_target):
        for clause_id in clause_ids:
            result = certify_one(target, clause_id)
            assert result.status == "pass", f"{target.name} {clause_id}: {result.message}"

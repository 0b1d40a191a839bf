"""Broken schema implementations must fail on their schema.* clause."""

from __future__ import annotations

import torch

from rlconform.adapters.base import with_overrides
from rlconform.oracle.errors import ContractError
from rlconform.oracle.schema import ALIASES
from tests.conftest import assert_caught, assert_graded


def normalize_without_uid_in_errors(self, records):
    try:
        return self.normalize_samples(records)
    except ContractError as error:
        raise ValueError(f"invalid field {error.field!r}") from None


def normalize_renaming_in_place(self, records):
    for record in records:
        for canonical, aliases in ALIASES.items():
            for alias in aliases:
                if alias in record:
                    record[canonical] = record.pop(alias)
    return self.normalize_samples(records)


def normalize_rounding_logprobs_to_float32(self, records):
    samples = self.normalize_samples(records)
    for sample in samples:
        rounded = torch.tensor(sample["rollout_logprobs"], dtype=torch.float32)
        sample["rollout_logprobs"] = rounded.double().tolist()
    return samples


def normalize_ignoring_roll_reward_alias(self, records):
    renamed = [
        {
            ("reward_of_roll" if key == "response_level_rewards" else key): value
            for key, value in r.items()
        }
        for r in records
    ]
    return self.normalize_samples(renamed)


def misaligned_by_logprobs_only(self, samples):
    return [s["uid"] for s in samples if len(s["rollout_logprobs"]) != len(s["response_ids"])]


def batch_without_raw_reward(self, samples):
    return self.build_batch(samples).exclude("raw_reward")


def batch_with_loss_mask_in_padding(self, samples):
    batch = self.build_batch(samples)
    batch["loss_mask"] = torch.ones_like(batch["loss_mask"])
    return batch


def batch_accepting_unscored(self, samples):
    patched = [dict(s, reward=0.0 if s["reward"] is None else s["reward"]) for s in samples]
    return self.build_batch(patched)


def test_error_without_uid_is_caught(torchref):
    broken = with_overrides(torchref, normalize_samples=normalize_without_uid_in_errors)
    result = assert_caught(broken, "schema.normalize")
    assert "does not name the sample uid" in result.message
    assert result.check == "error_names_uid"


def test_renaming_in_place_is_caught(torchref):
    broken = with_overrides(torchref, normalize_samples=normalize_renaming_in_place)
    result = assert_caught(broken, "schema.normalize")
    assert "modified its input" in result.message and result.check == "no_mutation"


def test_numeric_change_is_caught(torchref):
    broken = with_overrides(torchref, normalize_samples=normalize_rounding_logprobs_to_float32)
    assert assert_caught(broken, "schema.normalize").check == "canonical"


def test_missing_alias_is_caught(torchref):
    broken = with_overrides(torchref, normalize_samples=normalize_ignoring_roll_reward_alias)
    result = assert_caught(broken, "schema.normalize")
    assert "rejected valid records" in result.message and result.check == "runs"


def test_alignment_ignoring_loss_mask_is_caught(torchref):
    broken = with_overrides(torchref, find_misaligned=misaligned_by_logprobs_only)
    assert assert_caught(broken, "schema.alignment").check == "misaligned_uids"


def test_batch_without_debug_field_is_caught(torchref):
    broken = with_overrides(torchref, build_batch=batch_without_raw_reward)
    result = assert_caught(broken, "schema.output")
    assert "raw_reward" in result.message and result.check == "fields"


def test_batch_with_loss_mask_in_padding_is_caught(torchref):
    broken = with_overrides(torchref, build_batch=batch_with_loss_mask_in_padding)
    assert assert_graded(broken, "schema.output").check == "padding_zero"


def test_batch_scoring_unscored_as_zero_is_caught(torchref):
    broken = with_overrides(torchref, build_batch=batch_accepting_unscored)
    result = assert_caught(broken, "schema.output")
    assert "accepted bad input" in result.message and result.check == "raises"

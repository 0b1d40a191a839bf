"""Impure operations must fail on their purity.* clause."""

from __future__ import annotations

import torch

from rlconform.adapters.base import with_overrides
from rlconform.oracle.schema import ALIASES
from tests.conftest import assert_caught, certify_one


def normalize_renaming_in_place(self, records):
    for record in records:
        for canonical, aliases in ALIASES.items():
            for alias in aliases:
                if alias in record:
                    record[canonical] = record.pop(alias)
    return self.normalize_samples(records)


def filter_zeroing_unscored_rewards_of_the_caller(self, samples, config=None):
    out = self.filter_samples(samples, config)
    for sample in samples:
        if sample["reward"] is None:
            sample["reward"] = 0.0
    return out


def place_reward_consuming_scores(self, scores, response_mask, loss_mask):
    placed = self.place_reward_last(scores, response_mask, loss_mask)
    scores.zero_()
    return placed


def place_reward_with_noise(self, scores, response_mask, loss_mask):
    placed = self.place_reward_last(scores, response_mask, loss_mask)
    return placed * (1 + torch.rand_like(placed) * 1e-6)


def normalize_prepending_bos(self, records):
    samples = self.normalize_samples(records)
    for sample in samples:
        sample["prompt_ids"] = [0] + sample["prompt_ids"]
    return samples


def normalize_rewards_grouped_by_position(self, samples, config=None, scope="batch"):
    if scope != "group":
        return self.normalize_kept_rewards(samples, config, scope)
    by_position = [dict(s, group=f"block{i // 2}") for i, s in enumerate(samples)]
    return self.normalize_kept_rewards(by_position, config, scope)


def test_normalize_renaming_in_place_is_caught(torchref):
    broken = with_overrides(torchref, normalize_samples=normalize_renaming_in_place)
    result = assert_caught(broken, "purity.no_mutation")
    assert "normalize_samples modified its input" in result.message


def test_filter_editing_callers_samples_is_caught(torchref):
    broken = with_overrides(torchref, filter_samples=filter_zeroing_unscored_rewards_of_the_caller)
    assert_caught(broken, "purity.no_mutation")


def test_place_reward_writing_its_input_is_caught(torchref):
    broken = with_overrides(torchref, place_reward_last=place_reward_consuming_scores)
    result = assert_caught(broken, "purity.no_mutation")
    assert "uid=" in result.message


def test_nondeterministic_op_is_caught(torchref):
    broken = with_overrides(torchref, place_reward_last=place_reward_with_noise)
    assert_caught(broken, "purity.deterministic")
    # The noise is within tolerance: only the purity clause can see it.
    assert certify_one(broken, "reward.place_last").status == "pass"


def test_non_idempotent_normalize_is_caught(torchref):
    broken = with_overrides(torchref, normalize_samples=normalize_prepending_bos)
    assert_caught(broken, "purity.idempotent")


def test_position_dependent_grouping_is_caught(torchref):
    broken = with_overrides(torchref, normalize_kept_rewards=normalize_rewards_grouped_by_position)
    assert_caught(broken, "purity.order")

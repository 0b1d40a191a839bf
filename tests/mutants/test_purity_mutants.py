"""Impure operations must fail on their purity.* clause."""

from __future__ import annotations

import torch

from rlconform.adapters.base import with_overrides
from rlconform.conformance.clauses.purity import PURITY_FILTER_CONFIG
from rlconform.oracle import filter as filter_oracle
from rlconform.oracle.schema import ALIASES
from tests.conftest import assert_caught, assert_graded


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
    assert "place_reward_last modified its input at args[0]" in result.message
    assert result.check == "no_mutation"


def test_nondeterministic_op_is_caught(torchref):
    broken = with_overrides(torchref, place_reward_last=place_reward_with_noise)
    result = assert_caught(broken, "purity.deterministic")
    assert result.check == "deterministic"
    # The noise is within tolerance: the value checks of reward.place_last accept it, only
    # the engine's determinism check on its pinned examples sees it.
    placed = assert_caught(broken, "reward.place_last")
    assert placed.check == "deterministic", placed.message


def test_non_idempotent_normalize_is_caught(torchref):
    broken = with_overrides(torchref, normalize_samples=normalize_prepending_bos)
    assert assert_caught(broken, "purity.idempotent").check == "idempotent"


def test_position_dependent_grouping_is_caught(torchref):
    broken = with_overrides(torchref, normalize_kept_rewards=normalize_rewards_grouped_by_position)
    result = assert_graded(broken, "purity.order")
    assert result.check == "order" and result.severity == "nominal"


def _rollout(uid: str, reward: float, response: list[int]) -> dict:
    n = len(response)
    return {
        "uid": uid,
        "group": "g0",
        "prompt_ids": [1],
        "response_ids": response,
        "rollout_logprobs": [-0.5] * n,
        "loss_mask": [1] * n,
        "reward": reward,
        "status": "completed",
    }


def test_idempotence_needs_the_outlier_filter_off():
    """With |z| > 1 outlier rejection a correct filter is not idempotent ([0, 1, 1, 1, 10]:
    10 goes first, then 0 is an outlier of the rest), so purity.idempotent runs with it off."""
    samples = [_rollout(f"s{i}", r, [i]) for i, r in enumerate([0.0, 1.0, 1.0, 1.0, 10.0])]
    with_outliers = {"reward_outlier_z": 1.0}
    once = filter_oracle.filter_samples(samples, with_outliers)["kept"]
    twice = filter_oracle.filter_samples(once, with_outliers)["kept"]
    assert [s["uid"] for s in once] != [s["uid"] for s in twice]
    assert PURITY_FILTER_CONFIG.get("reward_outlier_z") is None


def test_order_needs_duplicate_removal_off():
    """With duplicate removal a correct filter keeps the first of two identical responses,
    so permuting the input changes which uid survives: purity.order runs with it off."""
    a, b = _rollout("a", 1.0, [7, 7]), _rollout("b", 0.0, [7, 7])
    kept = filter_oracle.filter_samples([a, b], {"drop_duplicates": True})["kept"]
    kept_permuted = filter_oracle.filter_samples([b, a], {"drop_duplicates": True})["kept"]
    assert [s["uid"] for s in kept] != [s["uid"] for s in kept_permuted]
    assert PURITY_FILTER_CONFIG["drop_duplicates"] is False


def place_reward_raising_on_zero_width(self, scores, response_mask, loss_mask):
    """Pure, but raises on a batch of zero-width responses (as OpenRLHF's compute_reward)."""
    if response_mask.shape[-1] == 0:
        raise IndexError("argmax of an empty dimension")
    return self.place_reward_last(scores, response_mask, loss_mask)


def test_a_probe_whose_operation_raises_is_not_a_purity_fault():
    """CONTRACT purity: the crash belongs to the operation's own clause (reward.place_last,
    check runs); every purity clause still passes, the probe left out of that case."""
    from rlconform.adapters.torchref import TorchRef
    from tests.conftest import certify_one

    target = with_overrides(
        TorchRef(), "raises-on-zero-width", place_reward_last=place_reward_raising_on_zero_width
    )
    for clause_id in ("purity.no_mutation", "purity.deterministic", "purity.order"):
        result = certify_one(target, clause_id)
        assert result.status == "pass", (clause_id, result.message)
    own = certify_one(target, "reward.place_last")
    assert own.status in ("fail", "error") and own.check == "runs", own.message

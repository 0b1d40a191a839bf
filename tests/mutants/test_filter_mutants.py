"""Broken filters must fail on their filter.* clause."""

from __future__ import annotations

import torch

from rlconform.adapters.base import with_overrides
from tests.conftest import assert_caught, assert_graded

_MERGED = ("unscored", "tool_error", "truncated", "aborted")


def filter_merging_failure_reasons(self, samples, config=None):
    out = self.filter_samples(samples, config)
    out["dropped"] = {u: "unscored" if r in _MERGED else r for u, r in out["dropped"].items()}
    return out


def filter_scoring_unscored_as_zero(self, samples, config=None):
    scored = [dict(s, reward=0.0) if s["reward"] is None else s for s in samples]
    return self.filter_samples(scored, config)


def filter_checking_status_before_reward(self, samples, config=None):
    out = self.filter_samples(samples, config)
    by_uid = {s["uid"]: s for s in samples}
    for uid, reason in out["dropped"].items():
        if reason == "unscored" and by_uid[uid]["status"] in ("tool_error", "aborted"):
            out["dropped"][uid] = by_uid[uid]["status"]
    return out


def filter_sorting_kept_by_reward(self, samples, config=None):
    out = self.filter_samples(samples, config)
    out["kept"] = sorted(out["kept"], key=lambda s: -float(torch.tensor(0.0) + _score(s)))
    return out


def _score(sample):
    reward = sample["reward"]
    return reward["score"] if isinstance(reward, dict) else reward


def filter_counting_dropped_tokens_as_kept(self, samples, config=None):
    out = self.filter_samples(samples, config)
    out["stats"]["kept_tokens"] = out["stats"]["generated_tokens"]
    out["stats"]["discarded_tokens"] = 0
    return out


def filter_with_float32_rate(self, samples, config=None):
    out = self.filter_samples(samples, config)
    stats = out["stats"]
    generated = max(stats["generated"], 1)
    rate = torch.tensor(stats["dropped"], dtype=torch.float32) / generated
    threshold = (config or {}).get("alert_threshold", 0.30)
    stats["filter_rate"] = float(rate)
    stats["alert"] = float(rate) > threshold
    return out


def normalize_over_all_scored_samples(self, samples, config=None, scope="batch"):
    kept = {s["uid"] for s in self.filter_samples(samples, config)["kept"]}
    pool = [s for s in samples if s["reward"] is not None and s["uid"] not in kept]
    every = self.normalize_kept_rewards(samples, config, scope)
    if not pool or not every:
        return every
    rewards = torch.tensor(
        [_score(s) for s in samples if s["reward"] is not None], dtype=torch.float64
    )
    if not bool(torch.isfinite(rewards).all()):
        return every
    mean, std = rewards.mean(), rewards.std(unbiased=False)
    scored = {s["uid"]: _score(s) for s in samples}
    return {uid: float((scored[uid] - mean) / (std + 1e-8)) for uid in every}


def test_merged_reasons_are_caught(torchref):
    broken = with_overrides(torchref, filter_samples=filter_merging_failure_reasons)
    result = assert_caught(broken, "filter.reasons")
    assert "uid=" in result.message and result.check == "reason"


def test_unscored_as_zero_reward_is_caught(torchref):
    broken = with_overrides(torchref, filter_samples=filter_scoring_unscored_as_zero)
    assert_caught(broken, "filter.reasons")


def test_wrong_reason_order_is_caught(torchref):
    broken = with_overrides(torchref, filter_samples=filter_checking_status_before_reward)
    assert_caught(broken, "filter.reasons")


def test_reordered_kept_samples_are_caught(torchref):
    broken = with_overrides(torchref, filter_samples=filter_sorting_kept_by_reward)
    assert assert_caught(broken, "filter.order").check == "kept_order"


def test_dropped_tokens_counted_as_kept_are_caught(torchref):
    broken = with_overrides(torchref, filter_samples=filter_counting_dropped_tokens_as_kept)
    result = assert_caught(broken, "filter.stats")
    assert "kept_tokens" in result.message and result.check == "token_counts"


def test_float32_filter_rate_at_threshold_is_caught(torchref):
    broken = with_overrides(torchref, filter_samples=filter_with_float32_rate)
    result = assert_graded(broken, "filter.stats")
    assert "alert" in result.message and result.check == "alert"
    assert result.severity == "nominal", result.features


def test_statistics_over_dropped_samples_are_caught(torchref):
    broken = with_overrides(torchref, normalize_kept_rewards=normalize_over_all_scored_samples)
    assert assert_caught(broken, "filter.before_normalize").check == "values"

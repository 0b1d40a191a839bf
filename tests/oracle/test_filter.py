"""The filter oracle against the CONTRACT worked numbers, computed by hand."""

from __future__ import annotations

import math

import pytest

from rlconform.oracle.errors import ContractError
from rlconform.oracle.filter import REASONS, filter_samples, normalize_kept_rewards


def sample(uid, group="g0", reward=1.0, response=(1, 2, 3), status="completed", **fields):
    response = list(response)
    record = {
        "uid": uid,
        "group": group,
        "prompt_ids": [7],
        "response_ids": response,
        "rollout_logprobs": [-0.5] * len(response),
        "loss_mask": [1] * len(response),
        "reward": reward,
        "status": status,
    }
    record.update(fields)
    return record


def worked_batch():
    # CONTRACT filter.stats: 8 samples, one truncated, one logprob/length mismatch, one
    # missing reward.
    return [
        sample("s1", "g0", 1.0, (1, 2, 3)),
        sample("s2", "g0", 0.0, (1, 2, 3, 4, 5, 6), status="truncated"),
        sample("s3", "g0", 1.0, (2, 2, 2), rollout_logprobs=[-0.5, -0.5]),
        sample("s4", "g1", None, (3,)),
        sample("s5", "g1", 0.0, (4, 4)),
        sample("s6", "g1", 0.0, (5,), status="failed"),
        sample("s7", "g2", 1.0, (6, 1)),
        sample("s8", "g2", 0.5, (7, 1, 2)),
    ]


def test_worked_example_keeps_five_and_raises_the_alert():
    out = filter_samples(worked_batch(), {"truncation_policy": "drop"})
    assert [s["uid"] for s in out["kept"]] == ["s1", "s5", "s6", "s7", "s8"]
    assert out["dropped"] == {"s2": "truncated", "s3": "logprob_mismatch", "s4": "unscored"}
    stats = out["stats"]
    assert stats["filter_rate"] == 0.375  # 3 / 8
    assert stats["alert"] is True  # 0.375 > 0.30
    assert stats["generated"] == 8 and stats["kept"] == 5 and stats["dropped"] == 3
    # Response tokens: 3+6+3+1+2+1+2+3 = 21 generated; kept 3+2+1+2+3 = 11.
    assert stats["generated_tokens"] == 21
    assert stats["kept_tokens"] == 11
    assert stats["discarded_tokens"] == 10
    assert stats["counts"] == {
        reason: (1 if reason in ("truncated", "logprob_mismatch", "unscored") else 0)
        for reason in REASONS
    }


def test_truncation_is_kept_by_default():
    out = filter_samples(worked_batch())
    assert "s2" not in out["dropped"]
    assert out["stats"]["filter_rate"] == 0.25  # 2 / 8, not above 0.30
    assert out["stats"]["alert"] is False


def test_rate_at_the_threshold_does_not_alert():
    batch = [
        sample(f"s{i}", f"g{i}", response=(i,), status="aborted" if i < 3 else "completed")
        for i in range(10)
    ]
    stats = filter_samples(batch)["stats"]
    assert stats["filter_rate"] == 0.3
    assert stats["alert"] is False


def test_one_reason_each_in_contract_order():
    batch = [
        sample("a", status="aborted", reward=None),
        sample("b", reward=math.nan, rollout_logprobs=[0.0]),
        sample("c", status="tool_error", reward=math.nan),
        sample("d", status="tool_error", reward=0.0),
        sample("e", status="truncated", reward=None),
        sample("f", status="failed", reward=0.0),
        sample("g", reward={"score": 1.0, "format": math.inf}),
        sample("h", status="aborted", reward=0.0, response=(9,)),
    ]
    out = filter_samples(batch, {"truncation_policy": "drop"})
    assert out["dropped"] == {
        "a": "unscored",
        "b": "logprob_mismatch",
        "c": "non_finite",
        "d": "tool_error",
        "e": "unscored",
        "g": "non_finite",
        "h": "aborted",
    }
    assert [s["uid"] for s in out["kept"]] == ["f"]  # failed but scored is kept


def test_length_limits():
    batch = [
        sample("a", response=()),
        sample("b", response=(1, 2, 3, 4, 5, 6)),
        sample("c", response=(1,)),
    ]
    out = filter_samples(batch, {"min_response_length": 1, "max_response_length": 5})
    assert out["dropped"] == {"a": "too_short", "b": "too_long"}


def test_duplicates_within_a_group_keep_the_first_survivor():
    batch = [
        sample("a", "g0", response=(1, 2)),
        sample("b", "g1", response=(1, 2)),  # other group: not a duplicate
        sample("c", "g0", response=(1, 2)),  # duplicate of a
        sample("d", "g1", response=(3,), status="aborted"),
        sample("e", "g1", response=(3,)),  # its first copy was dropped: kept
    ]
    out = filter_samples(batch)
    assert out["dropped"] == {"c": "duplicate", "d": "aborted"}
    assert filter_samples(batch, {"drop_duplicates": False})["dropped"] == {"d": "aborted"}


def test_reward_outlier():
    # Rewards 0, 0, 0, 10: mean 2.5, population std sqrt(75/4) = 4.330; z(10) = 1.732.
    batch = [
        sample(f"s{i}", f"g{i}", reward=r, response=(i,))
        for i, r in enumerate([0.0, 0.0, 0.0, 10.0])
    ]
    assert filter_samples(batch, {"reward_outlier_z": 1.5})["dropped"] == {"s3": "reward_outlier"}
    assert filter_samples(batch, {"reward_outlier_z": 2.0})["dropped"] == {}


def test_zero_variance_groups():
    batch = [
        sample("a", "g0", reward=1.0, response=(1,)),
        sample("b", "g0", reward=1.0, response=(2,)),
        sample("c", "g1", reward=1.0, response=(1,)),
        sample("d", "g1", reward=1.00001, response=(2,)),  # nearly equal is not equal
        sample("e", "g2", reward=0.0, response=(1,)),  # a group of one has no variance
    ]
    out = filter_samples(batch, {"drop_zero_variance_groups": True})
    assert out["dropped"] == {
        "a": "zero_variance_group",
        "b": "zero_variance_group",
        "e": "zero_variance_group",
    }


def test_empty_batch():
    out = filter_samples([])
    assert out["kept"] == [] and out["dropped"] == {}
    assert out["stats"]["filter_rate"] == 0.0 and out["stats"]["alert"] is False


def test_bad_config_and_repeated_uid_raise():
    with pytest.raises(ContractError, match="truncate_policy"):
        filter_samples([], {"truncate_policy": "drop"})
    with pytest.raises(ContractError, match="uid='a'"):
        filter_samples([sample("a"), sample("a", response=(9,))])


def test_input_is_not_modified():
    batch = worked_batch()
    before = repr(batch)
    filter_samples(batch, {"truncation_policy": "drop"})
    assert repr(batch) == before


def test_normalize_batch_worked_numbers_over_kept_samples_only():
    # CONTRACT reward.normalize_batch: [1, 3, 2, 4] -> mean 2.5, std 1.118 ->
    # [-1.342, 0.447, -0.447, 1.342]; dropped samples with wild rewards change nothing.
    batch = [sample(f"s{i}", response=(i,), reward=r) for i, r in enumerate([1.0, 3.0, 2.0, 4.0])]
    batch += [
        sample("x", reward=100.0, status="aborted"),
        sample("y", reward=None),
        sample("z", reward=-50.0, status="tool_error"),
    ]
    out = normalize_kept_rewards(batch)
    assert list(out) == ["s0", "s1", "s2", "s3"]
    std = math.sqrt(1.25)  # ((1.5^2 + 0.5^2) * 2) / 4
    assert std == pytest.approx(1.118034, abs=1e-6)
    expected = [-1.5 / std, 0.5 / std, -0.5 / std, 1.5 / std]
    assert [round(v, 3) for v in expected] == [-1.342, 0.447, -0.447, 1.342]
    assert list(out.values()) == pytest.approx(expected, rel=1e-7)


def test_normalize_worked_example_by_batch_and_group():
    config = {"truncation_policy": "drop"}
    # Kept rewards 1, 0, 0, 1, 0.5: mean 0.5, population std sqrt(0.2) = 0.4472.
    out = normalize_kept_rewards(worked_batch(), config)
    a = 0.5 / math.sqrt(0.2)
    assert out == pytest.approx({"s1": a, "s5": -a, "s6": -a, "s7": a, "s8": 0.0}, rel=1e-7)
    # By group: g0 = {s1} alone -> 0; g1 = {0, 0} all equal -> 0; g2 = {1, 0.5} -> +-1.
    out = normalize_kept_rewards(worked_batch(), config, scope="group")
    assert out == pytest.approx({"s1": 0.0, "s5": 0.0, "s6": 0.0, "s7": 1.0, "s8": -1.0}, rel=1e-7)
    assert out["s5"] == 0.0 and out["s1"] == 0.0


def test_normalize_dict_rewards_use_the_reward_key():
    batch = [
        sample("a", reward={"acc": 1.0, "fmt": 0.0}, response=(1,)),
        sample("b", reward={"acc": 0.0, "fmt": 5.0}, response=(2,)),
    ]
    out = normalize_kept_rewards(batch, reward_key="acc")
    assert out == pytest.approx({"a": 1.0, "b": -1.0}, rel=1e-7)
    with pytest.raises(ContractError, match="uid='a'"):
        normalize_kept_rewards(batch)  # no "score" entry

"""The schema oracle: alias mapping, errors naming uid and field, alignment, batch columns."""

from __future__ import annotations

import math

import pytest

from rlconform.oracle.errors import ContractError
from rlconform.oracle.schema import (
    BATCH_SCHEMA,
    CANONICAL_FIELDS,
    build_batch,
    find_misaligned,
    normalize_samples,
)


def canonical(uid="u0", **fields):
    record = {
        "uid": uid,
        "group": "g0",
        "prompt_ids": [5, 6],
        "response_ids": [1, 2, 3],
        "rollout_logprobs": [-0.1, -1.0, -0.25],
        "loss_mask": [1, 0, 1],
        "reward": 1.0,
        "status": "completed",
    }
    record.update(fields)
    return record


def test_verl_roll_and_trl_aliases_map_to_canonical_names():
    records = [
        {
            "uid": "a",
            "group": "p",
            "prompts": [5],
            "responses": [1, 2],
            "response_logprobs": [-0.1, -0.2],
            "response_mask": [1, 0],
            "score": 0.5,
            "status": "completed",
            "data_source": "gsm8k",
        },
        {
            "uid": "b",
            "prompt_id": "p",
            "prompt_ids": [5],
            "completion_ids": [3],
            "infer_logprobs": [-0.3],
            "action_mask": [1],
            "response_level_rewards": 1,
            "status": "failed",
            "domain": "code",
        },
    ]
    a, b = normalize_samples(records)
    assert list(a)[: len(CANONICAL_FIELDS)] == list(CANONICAL_FIELDS)
    assert (a["prompt_ids"], a["response_ids"], a["rollout_logprobs"]) == (
        [5],
        [1, 2],
        [-0.1, -0.2],
    )
    assert (a["loss_mask"], a["reward"], a["data_source"]) == ([1, 0], 0.5, "gsm8k")
    assert (b["group"], b["response_ids"], b["rollout_logprobs"], b["loss_mask"]) == (
        "p",
        [3],
        [-0.3],
        [1],
    )
    assert b["reward"] == 1.0 and isinstance(b["reward"], float)
    assert b["data_source"] == "code" and b["weight_version"] is None and b["top_p"] is None


def test_slime_packed_tokens_are_split_by_response_length():
    record = {
        "uid": 3,
        "group_index": 0,
        "tokens": [5, 6, 1, 2, 3],
        "response_length": 3,
        "rollout_log_probs": [-0.5, 0.0, -0.25],
        "loss_mask": [1, 0, 1],
        "reward": {"score": 1.0},
        "status": "truncated",
        "weight_versions": ["7", "8"],
    }
    (sample,) = normalize_samples([record])
    assert sample["prompt_ids"] == [5, 6] and sample["response_ids"] == [1, 2, 3]
    assert sample["group"] == 0 and sample["weight_version"] == ["7", "8"]
    assert "tokens" not in sample and "response_length" not in sample
    (empty,) = normalize_samples(
        [dict(record, tokens=[5, 6], response_length=0, rollout_log_probs=[], loss_mask=[])]
    )
    assert empty["prompt_ids"] == [5, 6] and empty["response_ids"] == []


def test_no_numeric_change_and_no_mutation():
    record = canonical(rollout_logprobs=[math.nan, -0.1, -1e-300], extra={"turns": [1]})
    before = repr(record)
    (sample,) = normalize_samples([record])
    assert repr(record) == before
    assert math.isnan(sample["rollout_logprobs"][0]) and sample["rollout_logprobs"][1:] == [
        -0.1,
        -1e-300,
    ]
    assert sample["extra"] == {"turns": [1]} and sample["extra"] is not record["extra"]


def test_misaligned_records_are_normalised_not_rejected():
    (sample,) = normalize_samples([canonical(loss_mask=[1])])
    assert sample["loss_mask"] == [1]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"reward": "missing"}, "reward"),
        ({"status": "pending"}, "status"),
        ({"reward": "0.5"}, "reward"),
        ({"loss_mask": [1, 2, 1]}, "loss_mask"),
        ({"response_ids": [1.0, 2, 3]}, "response_ids"),
        ({"response_length": -1}, "response_length"),
        ({"score": 1.0}, "reward"),  # given twice
        ({"group": None}, "group"),
    ],
)
def test_errors_name_the_uid_and_the_field(change, field):
    record = canonical("u7")
    for key, value in change.items():
        if value == "missing":
            del record[key]
        else:
            record[key] = value
    with pytest.raises(ContractError) as raised:
        normalize_samples([canonical("u1"), record])
    assert "uid='u7'" in str(raised.value) and repr(field) in str(raised.value)
    assert (raised.value.uid, raised.value.field) == ("u7", field)


def test_missing_uid_names_the_field():
    record = canonical()
    del record["uid"]
    with pytest.raises(ContractError, match="'uid'"):
        normalize_samples([record])


def test_find_misaligned():
    samples = [
        canonical("a"),
        canonical("b", loss_mask=[1, 1]),
        canonical("c", rollout_logprobs=[-1.0] * 4),
        canonical("d", response_ids=[], rollout_logprobs=[-0.1], loss_mask=[]),
        canonical("e", response_ids=[], rollout_logprobs=[], loss_mask=[]),
    ]
    assert find_misaligned(samples) == ["b", "c", "d"]


def test_build_batch_columns_and_debug_fields():
    samples = [
        canonical(
            "a",
            prompt_ids=[],
            response_ids=[],
            rollout_logprobs=[],
            loss_mask=[],
            reward=0.0,
            data_source="math",
            weight_version=3,
        ),
        canonical("b", reward={"score": 1.0, "format": -0.5}, status="failed"),
    ]
    columns = build_batch(samples)
    assert set(columns) == set(BATCH_SCHEMA)
    assert columns["responses"] == [[], [1, 2, 3]]
    assert columns["response_mask"] == [[], [1, 1, 1]]
    assert columns["scores"] == [0.0, 1.0]
    assert columns["raw_reward"] == [0.0, {"score": 1.0, "format": -0.5}]
    assert columns["prefilter_length"] == [0, 3]
    assert columns["uid"] == ["a", "b"] and columns["weight_version"] == [3, None]
    assert columns["data_source"] == ["math", None] and columns["status"] == ["completed", "failed"]


def test_build_batch_rejects_unscored_and_misaligned_samples():
    with pytest.raises(ContractError, match=r"uid='b', field 'reward'"):
        build_batch([canonical("a"), canonical("b", reward=None)])
    with pytest.raises(ContractError, match=r"uid='c', field 'loss_mask'"):
        build_batch([canonical("c", loss_mask=[1])])

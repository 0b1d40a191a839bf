"""conformance/neutral.py: a case without some of its §0a features, and nothing else
changed (what a baseline entry's features must explain)."""

from __future__ import annotations

import copy
import math

import pytest

from rlconform.conformance.features import generic_features
from rlconform.conformance.neutral import REMOVABLE, without

NAN = math.nan


def _case(**extra):
    case = {
        "samples": [
            {
                "uid": "a",
                "group": "g",
                "mask": [1, 0, 1],
                "rewards": [0.0, 2.0, 1.0],
                "values": [0.5, NAN, 0.25],
            },
            {"uid": "b", "group": "g", "mask": [1], "rewards": [0.0], "values": [0.1]},
        ],
        "pad_value": NAN,
        "extra_pad": 1,
    }
    case.update(extra)
    return case


def test_the_case_has_what_the_tests_below_take_out():
    assert {"padding_nonfinite", "hole_reward", "mask_holes", "extra_padding"} <= generic_features(
        _case()
    )


def test_nan_at_padding_and_at_holes_becomes_zero_and_nothing_else_changes():
    case = _case()
    before = copy.deepcopy(case)
    out = without(case, {"padding_nonfinite"}, generic_features)
    assert repr(case) == repr(before)  # the input is not modified
    assert out["pad_value"] == 0.0 and out["samples"][0]["values"] == [0.5, 0.0, 0.25]
    assert out["samples"][0]["rewards"] == [0.0, 2.0, 1.0]
    assert generic_features(out) == generic_features(case) - {"padding_nonfinite"}


def test_a_hole_reward_becomes_zero():
    out = without(_case(pad_value=0.0), {"hole_reward"}, generic_features)
    assert out["samples"][0]["rewards"] == [0.0, 0.0, 1.0]
    assert "hole_reward" not in generic_features(out)


def test_mask_holes_are_removed_from_every_per_token_row():
    out = without(_case(pad_value=0.0), {"mask_holes"}, generic_features)
    first = out["samples"][0]
    assert (
        first["mask"] == [1, 1]
        and first["rewards"] == [0.0, 1.0]
        and first["values"] == [0.5, 0.25]
    )


def test_extra_padding_goes():
    out = without(_case(), {"extra_padding"}, generic_features)
    assert out["extra_pad"] == 0 and "extra_padding" not in generic_features(out)


def test_an_empty_response_is_dropped_and_the_shards_follow():
    case = {
        "samples": [
            {"uid": "a", "mask": [1], "loss": [1.0]},
            {"uid": "b", "mask": [], "loss": []},
            {"uid": "c", "mask": [1, 1], "loss": [1.0, 2.0]},
        ],
        "shards": [2, 1],
    }
    out = without(case, {"empty_response"}, generic_features)
    assert [s["uid"] for s in out["samples"]] == ["a", "c"] and out["shards"] == [1, 1]


def test_a_list_parallel_to_the_samples_blocks_dropping_one():
    case = {"samples": [{"mask": [1]}, {"mask": []}], "scores": [1.0, 2.0]}
    assert without(case, {"empty_response"}, generic_features) is None


@pytest.mark.parametrize(
    "feature", ["empty_batch", "zero_width", "singleton_group", "equal_scores"]
)
def test_a_structural_feature_cannot_be_taken_out(feature):
    assert feature not in REMOVABLE
    assert without(_case(), {feature}, generic_features) is None


def test_an_overflowing_log_ratio_on_an_action_token_cannot_be_taken_out():
    case = {"samples": [{"mask": [1], "logp": [-1.0], "old": [-100.5]}]}
    assert "overflow" in generic_features(case)
    assert without(case, {"overflow"}, generic_features) is None


def test_taking_out_nan_keeps_a_finite_value_where_the_case_has_finite_padding_too():
    case = _case()
    case["samples"][1]["mask"], case["samples"][1]["values"] = [1, 0], [0.1, 3.0]
    case["samples"][1]["rewards"] = [0.0, 0.0]
    out = without(case, {"padding_nonfinite"}, generic_features)
    assert out["pad_value"] == 1.0 and "padding_finite" in generic_features(out)

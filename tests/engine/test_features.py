"""The CONTRACT §0a feature table and the generic walker that reads features off a case."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from rlconform.conformance import features as F

NAN = float("nan")

# Feature ids are public vocabulary (a fixed point): CONTRACT §0a, by domain.
CONTRACT_FEATURES = {
    "nominal": {
        "mask_holes",
        "padding_finite",
        "unequal_groups",
        "sampling_truncation",
        "truncated_sample",
        "uneven_shards",
        "extra_padding",
    },
    "edge": {
        "empty_response",
        "actionless_sample",
        "singleton_group",
        "equal_scores",
        "hole_reward",
        "empty_shard",
        "empty_batch",
        "no_samples",
        "extreme_log_ratio",
        "all_rejected",
    },
    "hardening": {
        "padding_nonfinite",
        "padding_rewards",
        "overflow",
        "zero_width",
        "layout_violation",
    },
}


def test_the_table_holds_exactly_the_contract_features_and_domains():
    by_domain = {d: {f.id for f in F.FEATURES.values() if f.domain == d} for d in F.DOMAINS}
    assert by_domain == CONTRACT_FEATURES


def test_the_table_matches_contract_md_when_it_is_beside_the_repository():
    contract = Path(__file__).resolve().parents[2].parent / "shared" / "CONTRACT.md"
    if not contract.exists():
        pytest.skip("../shared/CONTRACT.md is not beside this checkout")
    section = contract.read_text(encoding="utf-8").split("## 0a.")[1].split("## 1.")[0]
    for domain, ids in CONTRACT_FEATURES.items():
        row = next(line for line in section.splitlines() if line.startswith(f"| `{domain}` |"))
        for feature in ids:
            assert f"`{feature}`" in row, (domain, feature)


def test_domain_of_a_case_is_its_most_severe_feature():
    assert F.domain_of_features([]) == "nominal"
    assert F.domain_of_features(["mask_holes", "extra_padding"]) == "nominal"
    assert F.domain_of_features(["mask_holes", "empty_response"]) == "edge"
    assert F.domain_of_features(["singleton_group", "padding_nonfinite"]) == "hardening"


def _sample(uid, mask, **fields):
    return {"uid": uid, "mask": mask, **fields}


def test_walker_reads_masks_lengths_and_padding():
    case = {
        "samples": [
            _sample("s0", [1, 0, 1], values=[0.5, 2.5, 1.0]),
            _sample("s1", [], values=[]),
            _sample("s2", [0, 0], values=[0.0, 0.0]),
        ],
        "pad_value": 7.5,
        "extra_pad": 1,
    }
    assert F.generic_features(case) == {
        "mask_holes",
        "padding_finite",
        "extra_padding",
        "empty_response",
        "actionless_sample",
    }
    case["pad_value"] = NAN
    assert "padding_nonfinite" in F.generic_features(case)
    case["pad_value"] = -1e30
    assert "overflow" in F.generic_features(case)
    clean = {
        "samples": [_sample("s0", [1, 1], values=[1.0, 2.0])],
        "pad_value": 0.0,
        "extra_pad": 0,
    }
    assert F.generic_features(clean) == set()


def test_walker_reads_rewards_groups_and_scores():
    case = {
        "samples": [
            _sample("s0", [1, 0], group="g0", rewards=[1.0, 0.5]),
            _sample("s1", [1], group="g0", rewards=[1.5]),
            _sample("s2", [1, 1], group="g1", rewards=[0.0, 2.0]),
        ],
        "pad_value": NAN,
        "extra_pad": 0,
    }
    found = F.generic_features(case)
    # 1.0 + 0.5 (hole reward credited) == 1.5: an all-equal group; g1 is a group of one.
    assert {"hole_reward", "equal_scores", "singleton_group", "unequal_groups"} <= found
    # rewards only: the NaN pad value is not in any reward (reward padding is 0)
    assert "padding_nonfinite" not in found
    case["reward_pad_value"] = 7.5
    assert {"padding_rewards", "padding_finite"} <= F.generic_features(case)


def test_walker_reads_log_ratios_shards_and_sampling():
    case = {
        "samples": [
            _sample("s0", [1, 1], old=[-0.5, -1.0], rollout=[-25.0, -1.0]),
            _sample("s1", [1], old=[-0.5], rollout=[-101.0]),
            _sample("s2", [0], old=[-0.5], rollout=[-1.0]),
        ],
        "pad_value": 0.0,
        "extra_pad": 0,
        "shards": [1, 1, 1],
        "temperature": 0.7,
    }
    found = F.generic_features(case)
    assert {"extreme_log_ratio", "overflow", "empty_shard", "uneven_shards"} <= found
    assert "sampling_truncation" in found


def test_walker_reads_layout_rows():
    ok = {"response_width": 2, "rows": [{"uid": "s0", "attention": [0, 1, 1, 0]}]}
    bad = {"response_width": 2, "rows": [{"uid": "s0", "attention": [1, 0, 1, 0]}]}
    assert "layout_violation" not in F.generic_features(ok)
    assert "layout_violation" in F.generic_features(bad)
    assert "zero_width" in F.generic_features({"response_width": 0, "rows": []})


def test_zero_width_when_every_response_is_empty_and_nothing_is_padded():
    case = {"samples": [_sample("s0", [], values=[])], "pad_value": 0.0, "extra_pad": 0}
    assert {"zero_width", "empty_response", "empty_batch"} <= F.generic_features(case)
    assert "no_samples" in F.generic_features({"samples": [], "pad_value": 0.0, "extra_pad": 0})


def test_restricted_generation_is_a_context():
    assert F.current_domain() == "hardening" and F.allows("hardening")
    with F.restricted("nominal"):
        assert F.allows("nominal") and not F.allows("edge")
        with F.restricted("edge"):
            assert F.allows("edge") and not F.allows("hardening")
        assert not F.allows("edge")
    assert F.allows("hardening")
    with pytest.raises(ValueError, match="unknown domain"):
        with F.restricted("ordinary"):
            pass


def test_thresholds_follow_the_contract():
    assert F.EXTREME_LOG_RATIO == 20.0 and F.OVERFLOW == 88.0 and F.OVERFLOW_LOGPROB == -100.0
    assert math.isclose(F.NEAR_EQUAL, 1e-4)

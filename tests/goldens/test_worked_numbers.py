"""Every worked number of CONTRACT.md is present, with its exact value, in a committed fixture.

The expected values here are computed by hand from the contract's own statement (never read
from the oracle); the committed JSON (``fixtures/cases/*.json``, decoded) must hold them
under the named output key of a case of the named clause. Floats the contract writes
rounded (1.342, 2/3) are compared with the exact expression within 1e-12 relative, plus the
contract's rounded digits.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import pytest

from rlconform.fixtures.registry import committed_cases


def nodes(value: Any, path: tuple = ()) -> Iterator[tuple[tuple, Any]]:
    """Every (path, value) in a decoded JSON value, containers included."""
    yield path, value
    if isinstance(value, dict):
        for key, item in value.items():
            yield from nodes(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from nodes(item, (*path, index))


def same(actual: Any, wanted: Any, rel: float) -> bool:
    if isinstance(wanted, list):
        return (
            isinstance(actual, list)
            and len(actual) == len(wanted)
            and all(same(a, w, rel) for a, w in zip(actual, wanted, strict=True))
        )
    if wanted is None or isinstance(wanted, (bool, str)):
        return actual == wanted
    if isinstance(actual, bool) or not isinstance(actual, (int, float)):
        return False
    if isinstance(wanted, int) and rel == 0:
        return actual == wanted and isinstance(actual, int)
    return math.isclose(actual, wanted, rel_tol=rel, abs_tol=0.0 if rel == 0 else 1e-15)


def found(clause: str, key: str, wanted: Any, rel: float = 0.0) -> list[str]:
    """Names of the committed cases of ``clause`` holding ``wanted`` under an output ``key``."""
    hits = []
    for case in committed_cases(clause):
        for path, value in nodes(case["expected"]):
            if path and path[-1] == key and same(value, wanted, rel):
                hits.append(case["name"])
    return hits


S = math.sqrt(1.25)  # population std of [1, 3, 2, 4]
EPS = 1e-8

D = 1.00001 - 1.0  # the gap of the nearly-equal rewards, as float64 holds it


def K3(d: float) -> float:
    """k3 of logp - ref = d, unclamped: exp(ref - logp) - (ref - logp) - 1."""
    return math.exp(-d) + d - 1


# (clause, output key, value by hand, relative tolerance; 0 = bit-exact)
WORKED = [
    # filter.stats: 8 samples, one truncated, one logprob/length mismatch, one missing
    # reward -> 5 kept, rate 3/8 = 0.375 > 0.30, alert raised.
    ("filter.stats", "generated", 8, 0),
    ("filter.stats", "kept", 5, 0),
    ("filter.stats", "filter_rate", 0.375, 0),
    ("filter.stats", "alert", True, 0),
    # mask.loss: 20 positions, 4 + 5 = 9 action tokens of 2.0 and 4.0 -> 28/9, not /20.
    ("mask.loss", "padded_positions", 20, 0),
    ("mask.loss", "valid_tokens", 9, 0),
    ("mask.loss", "masked_mean", 28 / 9, 0),
    ("agg.token_mean", "value", 28 / 9, 0),
    # reward.normalize_batch: [1, 3, 2, 4] -> mean 2.5, std 1.118... -> [-1.342, ...].
    ("reward.normalize_batch", "kept_mean", 2.5, 0),
    ("reward.normalize_batch", "kept_std_ddof0", S, 1e-12),
    (
        "reward.normalize_batch",
        "normalized",
        [
            (1 - 2.5) / (S + EPS),
            (3 - 2.5) / (S + EPS),
            None,
            (2 - 2.5) / (S + EPS),
            (4 - 2.5) / (S + EPS),
        ],
        1e-12,
    ),
    # reward.td_target: r 0.2, V 0.8, gamma 0.9 -> 0.2 (terminated) vs 0.92 (truncated).
    ("reward.td_target", "td_targets", [0.2, 0.2 + 0.9 * 0.8], 1e-15),
    # logprob.sampling_distribution: p = [0.8, 0.2], temperature 2 -> [2/3, 1/3]; 0.75 vs 1.25.
    ("logprob.sampling_distribution", "sampled_distribution", [2 / 3, 1 / 3], 1e-12),
    ("logprob.sampling_distribution", "raw_distribution", [0.8, 0.2], 1e-12),
    ("logprob.sampling_distribution", "ratio_new_0_25_vs_behaviour", 0.75, 1e-12),
    ("logprob.sampling_distribution", "ratio_new_0_25_vs_raw", 1.25, 1e-12),
    # metrics.token_accounting: 64 x 8 x 2048 = 1,048,576 generated; 262,144 kept; 786,432 discarded.
    ("metrics.token_accounting", "generated", 64 * 8 * 2048, 0),
    ("metrics.token_accounting", "kept", 262_144, 0),
    ("metrics.token_accounting", "discarded", 786_432, 0),
    # batch.seqlen_balance: workload 24576 * L + L^2 (L = 60000 past int32).
    (
        "batch.seqlen_balance",
        "workloads",
        [24576 * 60_000 + 60_000**2, 24576 + 1, 24576 * 131_072 + 131_072**2, 24576 * 7 + 49],
        0,
    ),
    # adv.grpo (CONTRACT §4): scores 1.0 vs 1.00001, std ddof 1, eps 1e-6 -> +-0.62; a group
    # of one (verl: mean 0, std 1) -> score / (1 + eps).
    (
        "adv.grpo",
        "advantages",
        [
            [-(D / 2) / (D / math.sqrt(2) + 1e-6)] * 2,
            [(D / 2) / (D / math.sqrt(2) + 1e-6)] * 3,
            [3 / (1 + 1e-6)],
        ],
        1e-9,
    ),
    # adv.rloo: A_i = n/(n-1) (score_i - mean) = score_i - mean of the others.
    ("adv.rloo", "advantages", [[1.5 * (1 - 0.5)], [1.5 * (0 - 0.5)] * 2, [0.0]], 0),
    # adv.grpo with norm_by_std off (Dr. GRPO): score - group mean. g0 = 0.5 three times; g1
    # = 1 and 2.5 (the reward on s3's trailing tool token counts): mean 1.75 -> -+0.75.
    ("adv.grpo", "advantages", [[0.0] * 3, [-0.75] * 2, [0.0], [0.75, 0.75, 0.0], [0.0] * 2], 0),
    # kl.estimators: k3 with ref - logp clamped to +-20 and the value to +-10 (verl row:
    # logp - ref = [0.2, -0.4, -29.9, 25.0]).
    ("kl.estimators", "values", [[K3(0.2), K3(-0.4), 10.0, 10.0]], 1e-12),
    # kl.straight_through: k3+ keeps the k3 values and takes the k2 gradient logp - ref.
    ("kl.straight_through", "grad_logp", [[0.2, -0.4, -29.9, 25.0]], 1e-12),
    # kl.adaptive_controller: err = clip(kl / target - 1, -0.2, 0.2); value *= 1 + err n / H
    # (target 0.05, n / H = 0.1; KL 0.05, 0.5, 0.0, 0.06 -> err 0, 0.2, -0.2, 0.2).
    (
        "kl.adaptive_controller",
        "values",
        [0.1, 0.1 * 1.02, 0.1 * 1.02 * 0.98, 0.1 * 1.02 * 0.98 * 1.02],
        1e-12,
    ),
    # loss.dual_clip: ratios [4, 0.5], A [-1, 1], eps 0.2, c 3 -> [min(4, 3), max(-0.5, -0.8)].
    ("loss.dual_clip", "loss", [[3.0, -0.5]], 1e-12),
    # loss.entropy_bonus: pg - c_ent H = [0.5 - 0.01, -0.2 - 0.02] (the minus sign).
    ("loss.entropy_bonus", "total", [[0.5 - 0.01 * 1.0, -0.2 - 0.01 * 2.0, 0.0], []], 1e-12),
    # loss.total: pg - c_ent H + c_kl KL = 0.5 - 0.01 + 0.02 = 0.51.
    (
        "loss.total",
        "total",
        [[0.5 - 0.01 * 1.0 + 0.1 * 0.2, 0.0, -1.0 - 0.01 * 2.0 + 0.1 * 3.0], []],
        1e-12,
    ),
    # loss.ppo_clip: the log-ratio clamp keeps the loss finite: -A e^20 at log-ratio 99.5.
    (
        "loss.ppo_clip",
        "loss",
        [
            [math.exp(20.0), -math.exp(-20.0), 0.0, 0.0, -1.2],
            [],
            [-0.5 * math.exp(-0.5), 0.5 * math.exp(0.25)],
        ],
        1e-12,
    ),
    # metrics.validation_at_n (verl's example): [1, 0, 1, 1, 0] -> mean@5 0.6, std@5 ddof 0,
    # best@2 = 1 - 0.4^2 = 0.84.
    ("metrics.validation_at_n", "mean@5", 0.6, 1e-15),
    ("metrics.validation_at_n", "std@5", math.sqrt(0.24), 1e-12),
    ("metrics.validation_at_n", "best@2/mean", 1 - 0.4**2, 1e-12),
]


@pytest.mark.parametrize(
    ("clause", "key", "wanted", "rel"), WORKED, ids=[f"{c}:{k}" for c, k, *_ in WORKED]
)
def test_worked_number_is_in_a_committed_fixture(clause, key, wanted, rel):
    assert found(clause, key, wanted, rel), (
        f"no committed fixture of {clause} holds {key} = {wanted!r} (fixtures/cases/{clause}.json)"
    )


def test_contract_rounded_digits():
    """The values above round to the digits CONTRACT.md prints."""
    assert [round((x - 2.5) / (S + EPS), 3) for x in (1, 3, 2, 4)] == [-1.342, 0.447, -0.447, 1.342]
    assert round(S, 3) == 1.118
    assert round(0.2 + 0.9 * 0.8, 12) == 0.92
    assert (
        64 * 8 * 2048 == 1_048_576 and 1_048_576 // 4 == 262_144 and 1_048_576 - 262_144 == 786_432
    )
    assert 0.25 / (1 / 3) == pytest.approx(0.75) and 0.25 / 0.2 == pytest.approx(1.25)
    assert round((D / 2) / (D / math.sqrt(2) + 1e-6), 2) == 0.62


def test_the_search_is_not_blind():
    assert not found("mask.loss", "masked_mean", 28 / 20)
    assert not found("metrics.token_accounting", "kept", 262_145)
    assert not found("reward.td_target", "td_targets", [0.2, 0.9])
    assert not found("filter.stats", "alert", "yes")


# Worked examples whose numbers must come from one and the same case.
JOINT = [
    (
        "filter.stats",
        {"generated": 8, "kept": 5, "dropped": 3, "filter_rate": 0.375, "alert": True},
    ),
    ("metrics.token_accounting", {"generated": 1_048_576, "kept": 262_144, "discarded": 786_432}),
    ("mask.loss", {"padded_positions": 20, "valid_tokens": 9, "masked_mean": 28 / 9}),
]


@pytest.mark.parametrize(("clause", "numbers"), JOINT, ids=[c for c, _ in JOINT])
def test_worked_example_numbers_share_one_case(clause, numbers):
    matching = [
        case["name"]
        for case in committed_cases(clause)
        if all(same(case["expected"].get(k), v, 0.0) for k, v in numbers.items())
    ]
    assert matching, f"no single committed case of {clause} holds all of {numbers}"

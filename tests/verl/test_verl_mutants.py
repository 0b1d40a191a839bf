"""Broken verl functions (monkeypatched into verl itself) must be caught on their clause.

Where verl conforms, the certification of the clause exits 1. Where the clause is a
declared deviation of verl (its status stays "deviation" whatever else breaks), the break is
shown on a case of the clause that the real verl passes: the real verl still passes it, the
broken one fails it with a mismatch.
"""

from __future__ import annotations

import copy
import json

import pytest
import torch

pytest.importorskip("verl")

from verl import DataProto  # noqa: E402
from verl import protocol as verl_protocol  # noqa: E402
from verl.trainer.ppo import core_algos  # noqa: E402
from verl.utils import metric as verl_metric  # noqa: E402
from verl.utils import torch_functional as verl_F  # noqa: E402

from rlconform.adapters.registry import load_target  # noqa: E402
from rlconform.adapters.verl.imports import import_verl_module  # noqa: E402
from rlconform.adapters.verl.manifest import DEVIATIONS  # noqa: E402
from rlconform.conformance.cli import main  # noqa: E402
from rlconform.conformance.errors import ClauseMismatch  # noqa: E402
from rlconform.conformance.registry import get  # noqa: E402
from rlconform.conformance.repro import replay  # noqa: E402

# ---- clauses verl conforms to: the certification exits 1 on the clause


def _certify_fails_on(clause_id: str, tmp_path) -> None:
    assert clause_id not in DEVIATIONS
    out = tmp_path / "r.json"
    code = main(["certify", "verl", "--only", clause_id, "--json", str(out)])
    statuses = {c["id"]: c["status"] for c in json.loads(out.read_text())["clauses"]}
    assert code == 1
    assert statuses == {clause_id: "fail"}


def test_response_mask_without_the_eos_token_fails_response_from_eos(monkeypatch, tmp_path):
    original = verl_F.get_response_mask

    def eos_excluded(response_id, eos_token=2, dtype=torch.int64):
        mask = original(response_id, eos_token=eos_token, dtype=dtype)
        is_eos = torch.isin(response_id, torch.tensor(eos_token)).to(dtype)
        return mask * (1 - is_eos)

    monkeypatch.setattr(verl_F, "get_response_mask", eos_excluded)
    _certify_fails_on("mask.response_from_eos", tmp_path)


def test_reduce_by_mean_only_fails_metrics_reduce(monkeypatch, tmp_path):
    def mean_for_every_key(metrics):
        return {key: sum(values) / len(values) for key, values in metrics.items()}

    monkeypatch.setattr(verl_metric, "reduce_metrics", mean_for_every_key)
    _certify_fails_on("metrics.reduce", tmp_path)


def test_pad_size_reported_as_zero_fails_pad_divisor(monkeypatch, tmp_path):
    original = verl_protocol.pad_dataproto_to_divisor

    def forgets_pad_size(data, size_divisor):
        padded, _ = original(data, size_divisor)
        return padded, 0

    monkeypatch.setattr(verl_protocol, "pad_dataproto_to_divisor", forgets_pad_size)
    _certify_fails_on("batch.pad_divisor", tmp_path)


def test_token_sum_without_dp_size_fails_token_sum(monkeypatch, tmp_path):
    original = core_algos.agg_loss

    def token_sum_ignores_dp(loss_mat, loss_mask, loss_agg_mode, dp_size=1, **kwargs):
        if loss_agg_mode == "token-sum":
            dp_size = 1
        return original(loss_mat, loss_mask, loss_agg_mode, dp_size=dp_size, **kwargs)

    monkeypatch.setattr(core_algos, "agg_loss", token_sum_ignores_dp)
    _certify_fails_on("agg.token_sum", tmp_path)


# ---- clauses verl deviates on: caught on a case the real verl passes


def _caught_on_conforming_case(clause_id: str, case: dict, monkeypatch, break_verl) -> None:
    """The real verl passes ``case``; after ``break_verl(monkeypatch)`` it fails it."""
    assert clause_id in DEVIATIONS
    target = load_target("verl")
    replay(clause_id, target, copy.deepcopy(case))
    with monkeypatch.context() as patched:
        break_verl(patched)
        with pytest.raises(ClauseMismatch, match=rf"\[{clause_id}\]"):
            replay(clause_id, target, copy.deepcopy(case))


def _pinned(clause_id: str, index: int) -> dict:
    return get(clause_id).examples[index]


def test_grpo_with_population_std_is_caught_on_grpo(monkeypatch):
    original = core_algos.get_adv_estimator_fn("grpo")

    def grpo_population_std(
        token_level_rewards, response_mask, index, epsilon=1e-6, norm_adv_by_std_in_grpo=True, **kw
    ):
        centred, _ = original(
            token_level_rewards, response_mask, index, epsilon, norm_adv_by_std_in_grpo=False
        )
        scores = token_level_rewards.sum(-1)
        std = torch.ones_like(scores)
        for label in set(index.tolist()):
            rows = [i for i, other in enumerate(index.tolist()) if other == label]
            if len(rows) > 1:
                std[rows] = scores[rows].std(correction=0)
        advantages = centred / (std.unsqueeze(-1) + epsilon) * response_mask
        return advantages, advantages

    case = {
        "samples": [
            {"uid": "s0", "group": "g0", "mask": [1, 1], "rewards": [0.0, 1.0]},
            {"uid": "s1", "group": "g0", "mask": [1, 1, 1], "rewards": [0.0, 0.0, 0.0]},
            {"uid": "s2", "group": "g0", "mask": [1], "rewards": [0.5]},
            {"uid": "s3", "group": "g1", "mask": [1, 1], "rewards": [0.0, 2.0]},
        ],
        "pad_value": 0.0,
        "extra_pad": 1,
        "params": {"norm_by_std": True, "f_norm": 1.0},
    }
    registry = core_algos.ADV_ESTIMATOR_REGISTRY
    _caught_on_conforming_case(
        "adv.grpo", case, monkeypatch, lambda mp: mp.setitem(registry, "grpo", grpo_population_std)
    )


def test_reward_at_the_last_padded_column_is_caught_on_place_last(monkeypatch):
    base = import_verl_module("verl.experimental.reward_loop.reward_manager.base")

    def last_column_for_every_row(cls, data: DataProto, scores):
        placed = torch.zeros_like(data.batch["responses"], dtype=torch.float32)
        placed[:, -1] = placed.new_tensor(scores)
        return placed

    case = _pinned("reward.place_last", 1)  # uneven lengths, two extra padding columns
    broken = classmethod(last_column_for_every_row)
    _caught_on_conforming_case(
        "reward.place_last",
        case,
        monkeypatch,
        lambda mp: mp.setattr(base.RewardManagerBase, "assemble_rm_scores", broken),
    )


def test_token_mean_with_the_local_denominator_is_caught_on_token_mean(monkeypatch):
    original = core_algos.agg_loss

    def local_token_count(loss_mat, loss_mask, loss_agg_mode, dp_size=1, **kwargs):
        if loss_agg_mode == "token-mean":
            kwargs["batch_num_tokens"] = loss_mask.sum()
        return original(loss_mat, loss_mask, loss_agg_mode, dp_size=dp_size, **kwargs)

    case = _pinned("agg.token_mean", 0)  # global denominators given, one action token or more
    _caught_on_conforming_case(
        "agg.token_mean",
        case,
        monkeypatch,
        lambda mp: mp.setattr(core_algos, "agg_loss", local_token_count),
    )

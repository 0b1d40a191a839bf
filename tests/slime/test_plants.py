"""Planted breaks in the slime functions behind each newly bound area fail their clause.

Each plant replaces one slime function the adapter calls (``target.fw``) by a broken
copy on the stand-in; the clause that passes (or fails only as slime's signature forces,
see test_standin.py) must then fail on the broken behaviour. With RLCONFORM_SLIME_PATH the
same plants run against the real checkout's functions where a clause passes there.
"""

from __future__ import annotations

import pytest
import torch

from rlconform.conformance.context import CheckContext
from rlconform.conformance.errors import ClauseMismatch, TargetError
from rlconform.conformance.profiles import get_run_profile
from rlconform.conformance.registry import load_all
from rlconform.conformance.runner import check_once, run_clause


def _run(target, clause_id: str):
    return run_clause(load_all()[clause_id], target, get_run_profile("ci"))


def _check(target, clause_id: str, case: dict) -> str | None:
    """The failure message of one case, or None when it passes."""
    ctx = CheckContext(target=target, clause_id=clause_id)
    try:
        check_once(load_all()[clause_id], ctx, case)
    except (ClauseMismatch, TargetError) as failure:
        return str(getattr(failure, "message", failure))
    return None


@pytest.fixture()
def target(standin_target):
    standin_target.deviations = {}
    return standin_target


def test_seqlen_balance_plant_losing_a_sample_fails(target):
    assert _run(target, "batch.seqlen_balance").status == "pass"
    balanced = target.fw.get_seqlen_balanced_partitions

    def drops_the_last_index(workloads, k, equal_size):
        parts = balanced(workloads, k, equal_size)
        return [[i for i in part if i != len(workloads) - 1] for part in parts]

    target.fw.get_seqlen_balanced_partitions = drops_the_last_index
    result = _run(target, "batch.seqlen_balance")
    assert result.status == "fail", result.message
    assert "partition" in result.message


def test_seqlen_workload_plant_int32_fails(target):
    workloads = target.fw.calculate_workloads

    def int32(lengths, args):
        return torch.tensor(workloads(lengths, args), dtype=torch.int64).to(torch.int32).tolist()

    target.fw.calculate_workloads = int32
    result = _run(target, "batch.seqlen_balance")
    assert result.status == "fail" and "workload" in result.message, result.message


def _zero_variance_case() -> dict:
    def sample(uid: str, group: str, reward: float) -> dict:
        return {
            "uid": uid,
            "group": group,
            "prompt_ids": [5],
            "response_ids": [1, 2],
            "rollout_logprobs": [-0.5, -0.5],
            "loss_mask": [1, 1],
            "reward": reward,
            "status": "completed",
            "weight_version": 0,
            "data_source": "math",
        }

    return {
        "samples": [sample("a", "g0", 1.0), sample("b", "g0", 1.0)]
        + [sample("c", "g1", 0.0), sample("d", "g1", 1.0)],
        "config": {"drop_duplicates": False, "drop_zero_variance_groups": True},
        "scope": "batch",
    }


def test_filter_plant_keeping_zero_variance_groups_fails(target):
    case = _zero_variance_case()
    assert _check(target, "filter.reasons", case) is None
    assert _check(target, "filter.order", case) is None
    original = target.fw.check_reward_nonzero_std

    def keeps_everything(args, samples, **kwargs):
        output = original(args, samples, **kwargs)
        output.keep = True
        return output

    target.fw.check_reward_nonzero_std = keeps_everything
    message = _check(target, "filter.reasons", case)
    assert message is not None and "zero_variance_group" in message, message
    assert _check(target, "filter.order", case) is not None


def test_response_length_plant_mean_over_nonempty_fails(target):
    case = load_all()["metrics.response_length"].examples[0]  # has an aborted sample
    message = _check(target, "metrics.response_length", case)
    assert "response/aborted_ratio" in message  # slime's keys stop here (test_standin)
    original = target.fw.compute_metrics_from_samples

    def mean_over_nonempty(args, samples):
        return original(args, [s for s in samples if s.response_length > 0])

    target.fw.compute_metrics_from_samples = mean_over_nonempty
    message = _check(target, "metrics.response_length", case)
    assert message is not None and "response_length/mean" in message, message


#: Two samples slime can express (a reward only on the last token, kl_coef > 0), the first
#: with a tool-token hole: the two kl.in_reward plants show only on a hole, which generated
#: cases rarely reach once slime's inexpressible ones are skipped.
HOLE_CASE = {
    "samples": [
        {
            "uid": "s0",
            "mask": [1, 0, 1, 1],
            "old": [-0.5, -3.0, -1.0, -1.25],
            "ref": [-0.75, -0.5, -0.5, -1.0],
            "scores": [0.0, 0.0, 0.0, 1.0],
        },
        {
            "uid": "s1",
            "mask": [1, 1],
            "old": [-0.2, -0.3],
            "ref": [-0.1, -0.6],
            "scores": [0.0, 2.0],
        },
    ],
    "pad_value": 0.0,
    "extra_pad": 0,
    "mode": "kl",
    "beta": 0.1,
}


def test_kl_in_reward_plant_unmasked_kl_fails(target):
    assert _run(target, "kl.in_reward").status == "pass"
    original = target.fw.compute_advantages_and_returns

    def penalises_tool_tokens(args, rollout_data):
        masks = rollout_data["loss_masks"]
        rollout_data["loss_masks"] = [torch.ones_like(m) for m in masks]
        original(args, rollout_data)
        rollout_data["loss_masks"] = masks

    assert _check(target, "kl.in_reward", HOLE_CASE) is None
    target.fw.compute_advantages_and_returns = penalises_tool_tokens
    message = _check(target, "kl.in_reward", HOLE_CASE)
    assert message is not None and "token_level_rewards" in message, message


def test_kl_in_reward_plant_metric_over_every_token_fails(target):
    original = target.fw.log_rollout_data

    def mean_over_every_token(rollout_id, args, rollout_data):
        data = dict(rollout_data)
        data["loss_masks"] = [torch.ones_like(m) for m in rollout_data["loss_masks"]]
        original(rollout_id, args, data)

    assert _check(target, "kl.in_reward", HOLE_CASE) is None
    target.fw.log_rollout_data = mean_over_every_token
    message = _check(target, "kl.in_reward", HOLE_CASE)
    assert message is not None and "KL metric" in message, message


def test_is_correction_plant_geometric_sequence_ratio_fails(target):
    assert _run(target, "offpolicy.is_correction").status == "pass"
    original = target.fw.compute_mis_weights_with_cp

    def geometric(args, **kwargs):
        if args.tis_level == "sequence":
            args.tis_level = "geometric"
        return original(args, **kwargs)

    target.fw.compute_mis_weights_with_cp = geometric
    result = _run(target, "offpolicy.is_correction")
    assert result.status == "fail", result.message


def test_logprob_gap_plant_wrong_denominator_fails(target):
    assert _run(target, "offpolicy.logprob_gap").status == "pass"
    original = target.fw.reduce_train_step_metrics

    def one_rollout_too_many(losses, *, step_global_batch_size, **kwargs):
        return original(losses, step_global_batch_size=step_global_batch_size + 1, **kwargs)

    target.fw.reduce_train_step_metrics = one_rollout_too_many
    result = _run(target, "offpolicy.logprob_gap")
    assert result.status == "fail", result.message
    assert "train_rollout_logprob_abs_diff" in result.message

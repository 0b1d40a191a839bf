"""Broken verl functions (monkeypatched into verl itself) must be caught on their clause.

The certification of the clause exits 1 with the clause failing, also where the clause
carries declared deviations of verl: a declared break covers only its checks on cases with
its features, and each plant here breaks something else. Most plants sit on the v1 path
only (the engine's label shift, the v1 trainer's response cut and advantage broadcast, the
TransferQueue agent loop's reward placement, ``ppo_loss``'s composition, the loss's use of
the rollout-correction weights).
"""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

pytest.importorskip("verl")

from verl import protocol as verl_protocol  # noqa: E402
from verl.trainer.ppo import core_algos  # noqa: E402
from verl.utils import metric as verl_metric  # noqa: E402
from verl.workers.utils import losses as verl_losses  # noqa: E402
from verl.workers.utils import padding as verl_padding  # noqa: E402

from rlconform.adapters.verl import load  # noqa: E402
from rlconform.adapters.verl.imports import import_verl_module  # noqa: E402
from rlconform.conformance.cli import main  # noqa: E402

V1 = load().release.line == "0.9"
v1_only = pytest.mark.skipif(not V1, reason="the plant sits on the 0.9.x v1 trainer path")


def _certify_fails_on(clause_id: str, tmp_path) -> dict:
    out = tmp_path / "r.json"
    code = main(["certify", "verl", "--only", clause_id, "--json", str(out)])
    results = {c["id"]: c for c in json.loads(out.read_text())["clauses"]}
    assert code == 1, results
    assert {cid: r["status"] for cid, r in results.items()} == {clause_id: "fail"}, results
    return results[clause_id]


@v1_only
def test_label_shift_off_by_one_in_the_engine_fails_alignment(monkeypatch, tmp_path):
    engine = import_verl_module("verl.workers.engine.fsdp.transformer_impl").FSDPEngineWithLMHead
    original = engine.prepare_model_inputs

    def shifted_twice(self, micro_batch):
        model_inputs, output_args = original(self, micro_batch)
        labels = output_args["input_ids_rmpad_rolled"]
        output_args["input_ids_rmpad_rolled"] = torch.roll(labels, shifts=-1, dims=0)
        return model_inputs, output_args

    monkeypatch.setattr(engine, "prepare_model_inputs", shifted_twice)
    _certify_fails_on("logprob.alignment", tmp_path)


@v1_only
def test_response_cut_one_token_late_fails_alignment(monkeypatch, tmp_path):
    def cut_late(tensor, response_mask):
        values, offsets = tensor.values(), tensor.offsets()
        rows = [
            values[end - n : end]
            for n, end in zip(response_mask.offsets().diff(), offsets[1:], strict=True)
        ]
        return torch.nested.as_nested_tensor(rows, layout=torch.jagged)

    monkeypatch.setattr(verl_padding, "response_from_nested", cut_late)
    _certify_fails_on("logprob.alignment", tmp_path)


@v1_only
def test_session_advantage_read_at_the_last_column_fails_grpo(monkeypatch, tmp_path):
    v1 = import_verl_module("verl.trainer.ppo.v1.utils")
    original = v1.compute_advantage_for_multi_trajectories

    def read_last_column(data, batch_keys, adv_estimator, **kwargs):
        out = original(data, batch_keys, adv_estimator, **kwargs)
        if adv_estimator == "grpo":
            last = out.batch["advantages"][:, -1:]
            out.batch["advantages"] = last * out.batch["response_mask"]
        return out

    monkeypatch.setattr(v1, "compute_advantage_for_multi_trajectories", read_last_column)
    _certify_fails_on("adv.grpo", tmp_path)


@v1_only
def test_agent_loop_reward_on_the_first_token_fails_place_last(monkeypatch, tmp_path):
    agent_loop = import_verl_module("verl.experimental.agent_loop.agent_loop")
    original = agent_loop.AgentLoopOutput.as_dict

    def first_token(self):
        out = original(self)
        scores = out["rm_scores"]
        out["rm_scores"] = torch.roll(scores, shifts=1) if scores.numel() else scores
        return out

    monkeypatch.setattr(agent_loop.AgentLoopOutput, "as_dict", first_token)
    _certify_fails_on("reward.place_last", tmp_path)


def test_entropy_bonus_with_the_wrong_sign_fails_entropy_bonus(monkeypatch, tmp_path):
    original = verl_losses.ppo_loss

    def rewards_low_entropy(config, model_output, data, dp_group=None):
        flipped = dataclasses.replace(config, entropy_coeff=-config.entropy_coeff)
        return original(flipped, model_output, data, dp_group)

    monkeypatch.setattr(verl_losses, "ppo_loss", rewards_low_entropy)
    _certify_fails_on("loss.entropy_bonus", tmp_path)


def test_policy_loss_ignoring_the_is_weights_fails_tis(monkeypatch, tmp_path):
    original = core_algos.get_policy_loss_fn("vanilla")

    def unweighted(*args, rollout_is_weights=None, **kwargs):
        return original(*args, rollout_is_weights=None, **kwargs)

    monkeypatch.setitem(core_algos.POLICY_LOSS_REGISTRY, "vanilla", unweighted)
    _certify_fails_on("offpolicy.tis", tmp_path)


def test_vanilla_reduced_per_micro_batch_fails_ppo_clip(monkeypatch, tmp_path):
    original = core_algos.get_policy_loss_fn("vanilla")

    def local_denominators(*args, config, **kwargs):
        # the micro-batch's own token count instead of the mini-batch's
        config.global_batch_info.clear()
        return original(*args, config=config, **kwargs)

    monkeypatch.setitem(core_algos.POLICY_LOSS_REGISTRY, "vanilla", local_denominators)
    result = _certify_fails_on("loss.ppo_clip", tmp_path)
    assert result["check"] == "shard_invariance"


def test_sapo_with_its_temperatures_swapped_fails_sapo(monkeypatch, tmp_path):
    original = core_algos.get_policy_loss_fn("sapo")

    def swapped(*args, config, **kwargs):
        # the gate of a positive advantage at tau_neg and of a negative one at tau_pos
        config = dataclasses.replace(config, tau_pos=config.tau_neg, tau_neg=config.tau_pos)
        return original(*args, config=config, **kwargs)

    monkeypatch.setitem(core_algos.POLICY_LOSS_REGISTRY, "sapo", swapped)
    result = _certify_fails_on("loss.sapo", tmp_path)
    assert result["check"] == "loss"


def test_gmpo_reduces_per_micro_batch_in_verl_itself(tmp_path):
    """Not a plant: verl's geo_mean takes torch.mean over the micro-batch's rows, so the
    engine's sum over micro-batches grows with their number; the shipped baseline declares
    it and the run observes it."""
    out = tmp_path / "r.json"
    assert main(["certify", "verl", "--only", "loss.gmpo", "--json", str(out)]) == 0
    (result,) = json.loads(out.read_text())["clauses"]
    observed = {c for d in result["deviations"] if d["observed"] for c in d["checks"]}
    assert {"reduced", "shard_invariance"} <= observed


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


@pytest.mark.skipif(
    "token-sum" not in load().release.agg_modes, reason="the release has no loss_agg_mode token-sum"
)
def test_token_sum_without_dp_size_fails_token_sum(monkeypatch, tmp_path):
    original = core_algos.agg_loss

    def token_sum_ignores_dp(loss_mat, loss_mask, loss_agg_mode, dp_size=1, **kwargs):
        if loss_agg_mode == "token-sum":
            dp_size = 1
        return original(loss_mat, loss_mask, loss_agg_mode, dp_size=dp_size, **kwargs)

    monkeypatch.setattr(core_algos, "agg_loss", token_sum_ignores_dp)
    _certify_fails_on("agg.token_sum", tmp_path)


def test_grpo_with_population_std_fails_grpo(monkeypatch, tmp_path):
    original = core_algos.compute_grpo_outcome_advantage

    def grpo_population_std(
        token_level_rewards, response_mask, index, epsilon=1e-6, norm_adv_by_std_in_grpo=True, **kw
    ):
        centred, _ = original(
            token_level_rewards, response_mask, index, epsilon, norm_adv_by_std_in_grpo=False
        )
        scores = token_level_rewards.sum(-1)
        std = torch.ones_like(scores)
        labels = index.tolist()
        for label in set(labels):
            rows = [i for i, other in enumerate(labels) if other == label]
            if len(rows) > 1:
                std[rows] = scores[rows].std(correction=0)
        advantages = centred / (std.unsqueeze(-1) + epsilon) * response_mask
        return advantages, advantages

    # the trainer's compute_advantage calls the loop GRPO by its module name
    monkeypatch.setattr(core_algos, "compute_grpo_outcome_advantage", grpo_population_std)
    _certify_fails_on("adv.grpo", tmp_path)


def test_token_mean_with_the_local_denominator_fails_token_mean(monkeypatch, tmp_path):
    original = core_algos.agg_loss

    def local_token_count(loss_mat, loss_mask, loss_agg_mode, dp_size=1, **kwargs):
        if loss_agg_mode == "token-mean":
            kwargs["batch_num_tokens"] = loss_mask.sum()
        return original(loss_mat, loss_mask, loss_agg_mode, dp_size=dp_size, **kwargs)

    monkeypatch.setattr(core_algos, "agg_loss", local_token_count)
    _certify_fails_on("agg.token_mean", tmp_path)

"""Checks against the real ROLL: run when ROLL is importable or RLCONFORM_ROLL_PATH names a
checkout (github.com/alibaba/ROLL); skipped with that reason otherwise.

They pin what the published certification (docs/certification/roll-*.md) and the shipped
baseline (adapters/roll/baselines/) report. Each ``test_finding_*`` reproduces one break by
hand on a minimal case, calling ROLL's own function directly (not the adapter's operation),
and checks that the contract's oracle gives the contract's value on that same case. A
finding that disappears means ROLL changed: re-certify and update the baseline.
"""

from __future__ import annotations

import importlib.util
import inspect
import math
import os

import numpy as np
import pytest
import torch

from rlconform.adapters.registry import load_target
from rlconform.adapters.roll.loss import _Strategy
from rlconform.adapters.torchref import TorchRef
from rlconform.conformance.profiles import get_run_profile
from rlconform.conformance.registry import select
from rlconform.conformance.runner import certify
from rlconform.oracle import advantage as oracle_adv
from rlconform.oracle import batch as oracle_batch

ROLL_PATH = os.environ.get("RLCONFORM_ROLL_PATH")


def _installed() -> bool:
    try:
        return importlib.util.find_spec("roll.utils.functionals") is not None
    except (ImportError, ValueError):
        return False


pytestmark = pytest.mark.skipif(
    not ROLL_PATH and not _installed(),
    reason="ROLL is not importable and RLCONFORM_ROLL_PATH is not set (point it at a "
    "checkout of github.com/alibaba/ROLL to run these)",
)


@pytest.fixture(scope="module")
def roll():
    return load_target("roll", framework_path=ROLL_PATH)


# ---------------------------------------------------------------------------- plumbing
# Minimal ROLL batches with a one-token prompt per row: grid column j (of the (B, L - 1)
# per-token tensors) is response token j.


def _grid(rows: list[list[float]], width: int) -> torch.Tensor:
    out = torch.zeros(len(rows), width)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(row)
    return out


def _sequence_masks(lengths: list[int], holes: set[tuple[int, int]], width: int) -> dict:
    attention = torch.zeros(len(lengths), width + 1, dtype=torch.long)
    response = attention.clone()
    for i, n in enumerate(lengths):
        attention[i, : 1 + n] = 1
        for j in range(n):
            response[i, 1 + j] = 0 if (i, j) in holes else 1
    positions = (attention.cumsum(-1) - 1).clamp(min=0)
    return {"attention_mask": attention, "response_mask": response, "position_ids": positions}


def _proto(roll, **tensors):
    return roll.data_proto.from_dict(tensors=tensors)


# ---------------------------------------------------------------------------- wiring


def test_real_roll_loaded(roll):
    assert roll.runtime.functionals.__name__ == "roll.utils.functionals"
    assert roll.runtime.data_proto is not None, roll.runtime.data_proto_error
    assert roll.runtime.agentic is not None, roll.runtime.agentic_error
    assert roll.sources._errors == {}  # every function compiled from ROLL's source


def test_bound_functions_exist_in_roll(roll):
    for op, binding in roll.bindings.items():
        assert roll.implements(op), op
        for name in binding["functions"]:
            module, _, attribute = name.rpartition(".")
            found = False
            while module and not found:
                path = roll.runtime.root.joinpath(*module.split(".")).with_suffix(".py")
                if path.is_file():
                    found = f"def {attribute}" in path.read_text() or attribute in path.read_text()
                module, _, attribute = module.rpartition(".")
            assert found, (op, name)


def test_shipped_baseline_is_observed_on_its_release(roll):
    """Every declared break is still observed (none stale) on the clauses it names."""
    clauses = select(",".join(sorted(roll.deviations)))
    report = certify(roll, clauses, get_run_profile("ci"))
    stale = [r.id for r in report.clauses if "stale deviation" in r.message]
    assert stale == []


def test_grpo_matches_on_equal_groups(roll):
    rewards = torch.tensor([[0.0, 1.0, 0.0], [0.5, 0.0, 0.0], [0.0, 0.0, 2.0], [1.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 1], [1, 0, 1], [1, 0, 0]])
    index = np.array(["a", "b", "a", "b"], dtype=object)
    got, _ = roll.advantage_grpo(rewards, mask, index, 1e-6, True)
    want, _ = TorchRef().advantage_grpo(rewards, mask, index, 1e-6, True)
    assert torch.allclose(got * mask, want * mask, atol=1e-5)


# ---------------------------------------------------------------------------- adv


def test_finding_gae_reads_critic_values_at_padding(roll):
    """compute_advantage (rlvr) masks data.batch["values"] but hands the unmasked values to
    compute_gae_advantage_return: at lambda 0.95 a finite value V at the padding after a
    response moves that response's advantage by (1 - lambda) gamma V."""
    masks = _sequence_masks([1, 2], set(), 2)
    results = {}
    for pad in (0.0, 7.5):
        data = _proto(
            roll,
            token_level_rewards=_grid([[0.0], [0.0, 1.0]], 2),
            values=_grid([[0.0, pad], [0.0, 0.0]], 2),
            **masks,
        )
        final = masks["response_mask"][:, 1:].float()
        data = roll.F.compute_advantage(
            data,
            gamma=1.0,
            lambd=0.95,
            adv_estimator="gae",
            whiten_advantages=True,
            response_mask=final,
        )
        results[pad] = data.batch["returns"][0, 0].item()
    _, returns = oracle_adv.gae(
        [[0.0], [0.0, 1.0]],
        [[0.0], [0.0, 0.0]],
        [[1], [1, 1]],
        [True, True],
        [0.0, 0.0],
        gamma=1.0,
        lam=0.95,
    )
    assert results[0.0] == pytest.approx(returns[0][0])  # zero padding: as the contract
    assert results[7.5] == pytest.approx(0.05 * 7.5)  # the padding value leaks


def test_finding_agentic_gae_steps_through_observation_values(roll):
    """agentic_compute_advantage runs GAE over every column: at a tool observation (mask 0)
    the critic's value there enters delta and the lambda recursion."""
    masks = _sequence_masks([3], {(0, 1)}, 3)
    data = _proto(
        roll,
        token_level_rewards=_grid([[0.0, 0.0, 1.0]], 3),
        values=_grid([[0.5, 2.0, 0.25]], 3),
        **masks,
    )
    data = roll.runtime.agentic.agentic_compute_advantage(
        data, gamma=1.0, lambd=0.5, adv_estimator="gae", whiten_advantages=False
    )
    _, returns = oracle_adv.gae(
        [[0.0, 0.0, 1.0]],
        [[0.5, 2.0, 0.25]],
        [[1, 0, 1]],
        [True],
        [0.0],
        gamma=1.0,
        lam=0.5,
        discount_at_holes=True,
    )
    assert returns[0][0] == pytest.approx(0.4375)
    assert data.batch["returns"][0, 0].item() == pytest.approx(1.3125)


def test_finding_reward_on_an_observation_token_is_dropped(roll):
    """token_level_rewards * response_mask before the reward-to-go: a reward sitting on a
    mask-0 token of the response is lost (the contract credits it to the action before)."""
    masks = _sequence_masks([3], {(0, 1)}, 3)
    data = _proto(roll, token_level_rewards=_grid([[0.0, 5.0, 1.0]], 3), **masks)
    data = roll.runtime.agentic.agentic_compute_advantage(
        data, gamma=1.0, lambd=1.0, adv_estimator="reinforce", whiten_advantages=False
    )
    _, returns = oracle_adv.reinforce_pp(
        [[0.0, 5.0, 1.0]], [[1, 0, 1]], gamma=1.0, discount_at_holes=True
    )
    assert returns[0][0] == pytest.approx(6.0)
    assert data.batch["returns"][0, 0].item() == pytest.approx(1.0)


def test_finding_rlvr_group_of_one_is_nan(roll):
    """reward_norm: torch.std of a group of one (num_return_sequences 1) is NaN."""
    config = roll._config(
        adv_estimator="grpo",
        norm_mean_type="group",
        norm_std_type="group",
        reward_clip=None,
        num_return_sequences=1,
    )
    data = _proto(roll, response_level_rewards=torch.tensor([1.0, 0.0]))
    data, _ = roll.F.reward_postprocess(data, config, {})
    assert torch.isnan(data.batch["response_level_rewards"]).all()


def test_finding_agentic_nearly_equal_scores_give_zero(roll):
    """agentic_reward_norm: a group std <= 1e-6 (not only 0) gives 0 for every sample;
    the contract's (s - mean) / (std + 1e-6) is +-0.178 for scores 1.0 and 1.0000005."""
    agentic = roll.runtime.agentic
    data = _proto(roll, scores=torch.tensor([[1.0], [1.0000005]]))
    data.non_tensor_batch["traj_group_id"] = np.array(["g", "g"], dtype=object)
    norm = agentic.RewardNormalizationConfig(
        grouping="traj_group_id", norm_mean_type="group", norm_std_type="group"
    )
    config = roll._config(adv_estimator="grpo", reward_normalization=norm, reward_clip=None)
    data, _ = agentic.compute_response_level_rewards(batch=data, pipeline_config=config)
    assert data.batch["response_level_rewards"].tolist() == [0.0, 0.0]
    scores = torch.tensor([1.0, 1.0000005])
    contract = (scores - scores.mean()) / (scores.std() + 1e-6)
    assert contract[1].item() == pytest.approx(0.178, abs=1e-3)


# ---------------------------------------------------------------------------- agg, loss


def test_finding_token_mean_counts_tokens_the_filter_removed(roll):
    """ActorWorker.loss_func (rlvr): the train/infer filter_mask multiplies
    final_response_mask, but agg_loss("token-mean") sums loss_mat without the mask, so a
    filtered token's loss still counts: -1.5 where the kept token alone gives -1 / 2."""
    cm = roll.config_module
    config = roll._actor_config(0.2, 0.2, None)
    config.loss_agg_mode = "token-mean"
    band = cm.TrainInferFilterConfig(
        enabled=True,
        agg_type="token",
        ratio_enabled=True,
        ratio_low=0.5,
        ratio_high=2.0,
        diff_enabled=False,
    )
    config.train_infer_correction = cm.TrainInferCorrectionConfig(filters=[band])
    worker = roll._worker(config, _Strategy(), agentic=False)
    mask = torch.tensor([[1, 1]])
    layout = roll._layout(mask)
    old = torch.tensor([[-1.0, -1.0]])
    data = roll._actor_data(layout, old, torch.tensor([[1.0, 2.0]]), mask, mask, agentic=False)
    # token 1: exp(-1 - (-4)) = e^3 is outside the ratio band [0.5, 2]: filtered out.
    data.batch["infer_logprobs"] = layout.tokens_to_roll(torch.tensor([[-1.0, -4.0]]), fill=0.0)
    loss, _ = worker.loss_func(data, layout.tokens_to_roll(old, fill=0.0))
    assert loss.item() == pytest.approx(-1.5)  # (-1 - 2) / 2: the filtered -2 counted


def test_finding_sum_norm_does_not_divide_by_sequences(roll):
    # contract: 4 / (2 sequences * C = 2); ROLL: 4 / loss_mask.shape[-1]
    value = roll.F.agg_loss(torch.ones(2, 2), torch.ones(2, 2), "seq-mean-token-sum-norm")
    assert value.item() == pytest.approx(2.0)


def test_finding_actor_loss_has_no_log_ratio_clamp(roll):
    """ratio = exp(log_probs - old_log_probs) unclamped: A < 0 at log-ratio 25 gives
    e^25 |A| where the contract's clamp at 20 gives e^20 |A|."""
    loss, _ = roll.ppo_clip_loss(
        torch.tensor([[-30.0]]),
        torch.tensor([[-5.0]]),
        torch.tensor([[-1.0]]),
        torch.tensor([[1]]),
        clip_ratio_low=0.2,
        clip_ratio_high=0.2,
    )
    assert loss.item() == pytest.approx(math.exp(25), rel=1e-5)


def test_finding_critic_clipfrac_is_a_mean_of_row_shares(roll):
    """CriticWorker.loss_func: critic/clipfrac = masked_mean(..., dim=-1).mean(): rows of 2
    and 3 tokens with 1 and 0 clipped tokens report 0.25, the token share is 0.2."""
    _, metrics = roll.value_loss(
        torch.tensor([[1.0, 2.0, 0.0], [0.5, 0.1, 0.2]]),
        torch.tensor([[1.5, 0.0, 0.0], [0.3, 0.2, 0.1]]),
        torch.tensor([[0.5, 0.5, 0.0], [0.6, 0.3, 0.0]]),
        torch.tensor([[1, 1, 0], [1, 1, 1]]),
        cliprange_value=0.2,
    )
    assert metrics["vf_clipfrac"] == pytest.approx(0.25)


def test_finding_training_log_probs_take_no_temperature(roll):
    """op_compute_log_probs(logits, input_ids, attention_mask): no temperature, and the
    strategies' forward never scales the logits, while the rollout samples at
    generating_args.temperature (default 0.95)."""
    op = roll.sources.get("fsdp2_log_probs")
    assert list(inspect.signature(op).parameters) == [
        "self",
        "logits",
        "input_ids",
        "attention_mask",
    ]


def test_finding_kk_partition_worse_than_input_order(roll):
    """get_seqlen_balanced_partitions (Karmarkar-Karp) on batch_balance's workloads of
    lengths [2, 2, 2, 3, 3], 2 parts: max 172049, the input order's halves give 147474."""
    lengths = [2, 2, 2, 3, 3]
    workloads = roll.sources.get("balance_workload")(torch.tensor(lengths)).tolist()
    parts = roll.F.get_seqlen_balanced_partitions(workloads, 2, False)
    assert oracle_batch.max_partition_workload(lengths, parts) == 172049
    contiguous = oracle_batch.contiguous_partitions(5, 2)
    assert oracle_batch.max_partition_workload(lengths, contiguous) == 147474


# ---------------------------------------------------------------------------- hardening


def test_finding_k3_gradient_not_finite_when_exp_overflows(roll):
    logp = torch.tensor([[-100.0, -1.0]], requires_grad=True)
    value = roll.F.compute_approx_kl(logp, torch.tensor([[-0.5, -1.5]]), kl_penalty="k3")
    assert value[0, 0].item() == 10.0  # the value clamp holds
    value.sum().backward()
    assert torch.isnan(logp.grad[0, 0])  # but exp(99.5) overflowed: 0 * inf
    assert torch.isfinite(logp.grad[0, 1])


def test_finding_masks_multiply_so_nan_at_padding_leaks(roll):
    """masked_mean / masked_sum / compute_approx_kl mask by multiplication: NaN * 0 = NaN."""
    values = torch.tensor([[1.0, float("nan")]])
    mask = torch.tensor([[1, 0]])
    assert torch.isnan(roll.F.masked_mean(values, mask))
    assert torch.isnan(roll.F.agg_loss(values, mask, "seq-mean-token-mean"))
    kl = roll.F.compute_approx_kl(values, torch.zeros(1, 2), mask, "kl")
    assert torch.isnan(kl[0, 1])


def test_finding_agentic_reinforce_discounts_per_turn(roll):
    """compute_agentic_reinforce_return (adv_estimator "agentic_reinforce", the estimator of
    rlconform.adapters.roll:load_agentic_reinforce): every token of a contiguous mask-1
    segment gets the return of the segment's last token, discounted once per segment, and
    only that last token's reward is read. One turn [0, 1], gamma 0.99: ROLL [1, 1], the
    contract's per-token return [0.99, 1]."""
    agentic = roll.runtime.agentic
    rewards = torch.tensor([[0.0, 1.0]])
    _, returns = agentic.compute_agentic_reinforce_return(
        rewards, gamma=0.99, lambd=1.0, mask=torch.tensor([[1, 1]])
    )
    assert returns.tolist() == [[1.0, 1.0]]
    _, contract = oracle_adv.reinforce_pp([[0.0, 1.0]], [[1, 1]], gamma=0.99)
    assert contract[0] == pytest.approx([0.99, 1.0])


def test_finding_score_on_a_trailing_observation_is_lost(roll):
    """expand_to_token_level puts the (normalised) score on the last attended token; when the
    response ends in a tool observation (mask 0) agentic_compute_advantage multiplies it
    away: every advantage of the sample is 0."""
    masks = _sequence_masks([2], {(0, 1)}, 2)
    data = _proto(roll, response_level_rewards=torch.tensor([1.0]), **masks)
    token_rewards = roll.F.expand_to_token_level(data)
    assert token_rewards.tolist() == [[0.0, 1.0]]  # on the observation token
    data = _proto(roll, token_level_rewards=token_rewards, **masks)
    data = roll.runtime.agentic.agentic_compute_advantage(
        data, gamma=1.0, lambd=1.0, adv_estimator="grpo", whiten_advantages=False
    )
    assert data.batch["advantages"].tolist() == [[0.0, 0.0]]


def test_finding_one_action_token_skips_whitening(roll):
    """compute_advantage disables whitening for <= 1 valid token and keeps the raw return;
    whitening one value gives 0 under the contract."""
    masks = _sequence_masks([1], set(), 1)
    data = _proto(roll, token_level_rewards=_grid([[1.0]], 1), **masks)
    data = roll.F.compute_advantage(
        data,
        gamma=1.0,
        lambd=1.0,
        adv_estimator="reinforce",
        whiten_advantages=True,
        response_mask=masks["response_mask"][:, 1:].float(),
    )
    assert data.batch["advantages"].tolist() == [[1.0]]
    assert oracle_adv.reinforce_pp([[1.0]], [[1]], gamma=1.0)[0] == [[0.0]]


def test_finding_reward_normalisation_counts_dropped_samples(roll):
    """reward_postprocess (batch mean/std) sees every sample of the domain batch, those
    get_sample_level_mask dropped included: a dropped reward 10 moves the kept ones."""
    config = roll._config(
        adv_estimator="reinforce",
        norm_mean_type="batch",
        norm_std_type="batch",
        reward_clip=None,
    )
    kept = torch.tensor([1.0, 3.0, 2.0, 4.0])
    data = _proto(roll, response_level_rewards=torch.cat([kept, torch.tensor([10.0])]))
    data, _ = roll.F.reward_postprocess(data, config, {})
    alone = (kept - kept.mean()) / (kept.std() + 1e-6)
    assert not torch.allclose(data.batch["response_level_rewards"][:4], alone, atol=1e-3)


def test_finding_kl_metric_of_no_samples_is_nan(roll):
    """compute_token_reward: critic/kl = torch.mean over zero per-sample means is NaN."""
    config = roll._config(kl_penalty="kl", add_token_level_kl=True, reward_clip=None)
    empty = torch.zeros(0, 2)
    data = _proto(
        roll,
        response_level_rewards=torch.zeros(0),
        old_log_probs=empty,
        ref_log_probs=empty.clone(),
        **{k: v[:0] for k, v in _sequence_masks([1], set(), 2).items()},
    )
    controller = roll.kl_controller_module.FixedKLController(kl_coef=0.1)
    _, metrics = roll.F.compute_token_reward(data, config, controller)
    assert math.isnan(metrics["critic/kl"])


def test_finding_actor_loss_of_zero_rows_raises(roll):
    """ActorWorker.loss_func: torch.max(ratio * response_mask) of an empty batch raises."""
    config = roll._actor_config(0.2, 0.2, None)
    worker = roll._worker(config, _Strategy(), agentic=False)
    mask = torch.zeros(0, 2, dtype=torch.long)
    layout = roll._layout(mask)
    data = roll._actor_data(layout, torch.zeros(0, 2), torch.zeros(0, 2), mask, mask, False)
    with pytest.raises(RuntimeError, match="numel"):
        worker.loss_func(data, torch.zeros(0, layout.width - 1))


def test_finding_failed_union_leaves_the_first_batch_half_merged(roll):
    """DataProto.union: the second batch's new key lands in the first one before the shared
    key is found unequal and the assertion fires."""
    a = _proto(roll, score=torch.tensor([1.0, 2.0]))
    b = _proto(roll, ids=torch.tensor([3, 4]), score=torch.tensor([1.0, 9.0]))
    with pytest.raises(AssertionError):
        a.union(b)
    assert "ids" in a.batch.keys()


def test_finding_chunk_always_gives_k_pieces(roll):
    """DataProto.chunk(3) of 4 rows: pieces of 2, 1, 1 (neither 'error' nor 'ceil')."""
    data = _proto(roll, ids=torch.arange(4))
    assert [len(piece) for piece in data.chunk(3)] == [2, 1, 1]


def test_finding_entropy_mean_of_no_valid_token_is_nan(roll):
    """agg_loss(..., "token-mean") with its default batch_num_tokens = mask.sum() = 0, on the
    entropy op_compute_entropy already zeroed at the masked positions: 0 / 0."""
    value = roll.F.agg_loss(torch.zeros(1, 2), torch.zeros(1, 2), "token-mean")
    assert math.isnan(value.item())


def test_finding_sequence_ratio_overflows_in_float32(roll):
    """compute_train_infer_correction, weight_type "sequence": exp of the summed log-ratio.
    Per-token log-ratios 20 and 69 (each below float32's 88.7) sum to 89: the weight is inf,
    and the ratio filter band [0, 3] rejecting the sequence gives inf x 0 = NaN in the loss
    (the actor multiplies the loss by is_weight and the filter mask). The contract's weight
    for a rejected sequence is 0 (exp(89) is finite in float64)."""
    cm = roll.config_module
    band = cm.TrainInferFilterConfig(
        enabled=True,
        agg_type="sequence",
        ratio_enabled=True,
        ratio_low=-math.inf,
        ratio_high=3.0,
        diff_enabled=False,
    )
    config = cm.TrainInferCorrectionConfig(
        is_weight=cm.TrainInferISWeightConfig(
            enabled=True, weight_type="sequence", upper_bound=None, detach=True
        ),
        filters=[band],
    )
    mask = torch.tensor([[1, 1]])
    layout = roll._layout(mask)
    weight, keep, _ = roll.runtime.corrections.compute_train_infer_correction(
        cfg=config,
        response_mask=layout.tokens_to_roll(mask, fill=0),
        old_log_probs=layout.tokens_to_roll(torch.tensor([[0.0, 0.0]]), fill=0.0),
        infer_log_probs=layout.tokens_to_roll(torch.tensor([[-20.0, -69.0]]), fill=0.0),
    )
    weight = layout.tokens_from_roll(weight)
    keep = layout.tokens_from_roll(keep)
    assert torch.isinf(weight).all() and (keep == 0).all()
    assert torch.isnan(weight * keep).all()
    assert math.isfinite(math.exp(89.0)) and math.exp(89.0) > 3.0  # contract: rejected, weight 0


def test_finding_gae_skips_whitening_for_one_action_token(roll):
    """compute_advantage's <= 1 valid token rule disables the whitening for GAE as well:
    one token, reward 0, V 1 keeps the raw advantage -1 (contract: whitened, 0)."""
    masks = _sequence_masks([1], set(), 1)
    data = _proto(roll, token_level_rewards=_grid([[0.0]], 1), values=_grid([[1.0]], 1), **masks)
    data = roll.F.compute_advantage(
        data,
        gamma=1.0,
        lambd=1.0,
        adv_estimator="gae",
        whiten_advantages=True,
        response_mask=masks["response_mask"][:, 1:].float(),
    )
    assert data.batch["advantages"].tolist() == [[-1.0]]
    advantages, _ = oracle_adv.gae([[0.0]], [[1.0]], [[1]], [True], [0.0], gamma=1.0, lam=1.0)
    assert advantages == [[0.0]]


@pytest.mark.slow
@pytest.mark.parametrize("clause_id", ["step.update", "step.metrics", "step.state"])
def test_reference_targets_pass_under_rolls_configs(roll, clause_id):
    """CONTRACT step: torchref and the oracle pass under the settings of every config ROLL
    declares (so a ROLL finding is never the contract's own)."""
    from tests.conftest import assert_reference_targets_pass_under

    assert_reference_targets_pass_under(roll.trainer_configs(), clause_id)

"""Every audited clause and check: clean on a step torchref computed, caught on a broken one.

A step whose derived fields come from torchref (the contract's torch implementation)
must audit clean; the same step with one field broken the way a real bug breaks it must
fail exactly the clause and check that describe the break. One estimator at a time, every
estimator the config can name.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from rlconform.adapters.torchref import TorchRef
from rlconform.audit import audit
from tests.audit.batches import KL_COEF, derive, grpo_step

REF = TorchRef()
PROMPT_WIDTH = 5


def _run(step: dict[str, Any], profile: str = "torchref", **config: Any) -> dict[str, Any]:
    step = dict(step)
    step["config"] = {**step["config"], **config}
    report = audit(step, profile=profile)
    return {c.clause: c for c in report.clauses}


def _failed_checks(results: dict[str, Any]) -> set[tuple[str, str]]:
    return {(c.clause, v.check) for c in results.values() for v in c.counted}


def _lengths(step: dict[str, Any]) -> torch.Tensor:
    return step["attention_mask"][:, PROMPT_WIDTH:].sum(dim=1)


def test_clean_step_passes_every_clause():
    results = _run(grpo_step())
    assert {c: r.status for c, r in results.items()} == {
        "mask.response_from_attention": "pass",
        "layout.pad": "pass",
        "reward.place_last": "pass",
        "kl.in_reward": "pass",
        "adv.grpo": "pass",
        "adv.invariants": "pass",
        "agg.token_mean": "pass",
        "offpolicy.logprob_gap": "pass",
    }


# --- one mutant per check of the layout, placement, KL, aggregation and gap clauses -----


def _hole_in_attention(step):
    step["attention_mask"] = step["attention_mask"].clone()
    step["attention_mask"][0, PROMPT_WIDTH + 3] = 0


def _action_in_padding(step):
    step["response_mask"] = step["response_mask"].clone()
    step["response_mask"][9, -1] = 1


def _input_ids_off(step):
    step["input_ids"] = step["input_ids"].clone()
    step["input_ids"][2, -3] += 1


def _positions_from_the_left(step):
    width = step["attention_mask"].shape[1]
    step["position_ids"] = torch.arange(width).expand_as(step["attention_mask"]).clone()


def _reward_in_padding(step):
    """Column -1 instead of L_i - 1 (verl's placement of an empty response, on every row)."""
    lengths = _lengths(step)
    scores = torch.zeros_like(step["token_level_scores"])
    scores[:, -1] = step["token_level_scores"].sum(dim=1)
    step["token_level_scores"] = scores
    step.update(derive(step))
    assert bool((lengths < scores.shape[1]).any())


def _reward_one_early(step):
    scores = step["token_level_scores"]
    lengths = _lengths(step)
    moved = torch.zeros_like(scores)
    for i, n in enumerate(lengths.tolist()):
        moved[i, n - 2] = scores[i].sum()
    step["token_level_scores"] = moved
    step.update(derive(step))


def _wrong_beta(step):
    step["config"] = {**step["config"], "kl_coef": KL_COEF * 2}


def _metric_off(step):
    step["metrics"] = {**step["metrics"], "actor/reward_kl_penalty": 0.5}


def _kl_not_in_reward_but_different(step):
    step["config"] = {**step["config"], "use_kl_in_reward": False}


def _loss_over_the_padded_width(step):
    step["pg_loss"] = (step["pg_losses"] * step["response_mask"]).sum() / step["pg_losses"].numel()


def _gap_over_the_padded_width(step):
    mask = step["response_mask"]
    gap = ((step["old_log_probs"] - step["rollout_log_probs"]).abs() * mask).sum() / mask.numel()
    step["metrics"] = {**step["metrics"], "train_rollout_logprob_abs_diff": float(gap)}


def _advantage_at_padding(step):
    step["advantages"] = step["advantages"].clone()
    step["advantages"][9, -1] = 0.25


def _flip_one(step):
    step["advantages"] = step["advantages"].clone()
    step["advantages"][4] = -step["advantages"][4]


def _returns_doubled(step):
    step["returns"] = step["returns"] * 2


MUTANTS = [
    ("mask.response_from_attention", "layout", _hole_in_attention),
    ("mask.response_from_attention", "response_mask", _action_in_padding),
    ("layout.pad", "input_ids", _input_ids_off),
    ("layout.pad", "position_ids", _positions_from_the_left),
    ("reward.place_last", "padding_zero", _reward_in_padding),
    ("reward.place_last", "values", _reward_one_early),
    ("kl.in_reward", "values", _wrong_beta),
    ("kl.in_reward", "metric", _metric_off),
    ("kl.in_reward", "equality", _kl_not_in_reward_but_different),
    ("adv.grpo", "advantages", _flip_one),
    ("adv.grpo", "returns", _returns_doubled),
    ("adv.invariants", "grpo_zero_off_actions", _advantage_at_padding),
    ("agg.token_mean", "value", _loss_over_the_padded_width),
    ("offpolicy.logprob_gap", "value", _gap_over_the_padded_width),
]


@pytest.mark.parametrize("clause, check, mutate", MUTANTS, ids=[f"{c}/{k}" for c, k, _ in MUTANTS])
def test_mutant_is_caught(clause, check, mutate):
    step = grpo_step()
    mutate(step)
    failed = _failed_checks(_run(step))
    assert (clause, check) in failed, failed


def test_mutants_touch_only_their_clause():
    """A mutant of one field is not reported by clauses that never read it."""
    step = grpo_step()
    _input_ids_off(step)
    assert {c for c, _ in _failed_checks(_run(step))} == {"layout.pad"}
    step = grpo_step()
    _gap_over_the_padded_width(step)
    assert {c for c, _ in _failed_checks(_run(step))} == {"offpolicy.logprob_gap"}


# --- the other placements ------------------------------------------------------------------


@pytest.mark.parametrize("placement", ["uniform", "discounted"])
def test_other_placements_clean_and_caught(placement):
    step = grpo_step()
    span = step["attention_mask"][:, PROMPT_WIDTH:]
    scores = step["token_level_scores"].sum(dim=1)
    if placement == "uniform":
        placed = REF.place_reward_uniform(scores, span, step["response_mask"])
        config = {"reward_placement": "uniform"}
    else:
        placed = REF.place_reward_discounted(scores, span, step["response_mask"], 0.9)
        config = {"reward_placement": "discounted", "reward_gamma": 0.9}
    step["token_level_scores"] = placed
    step.update(derive(step))
    clause = f"reward.place_{placement}"
    assert _run(step, **config)[clause].status == "pass"
    # spread over the tool tokens too: caught from the row alone
    spread = (placed.sum(dim=1, keepdim=True) / _lengths(step).unsqueeze(1)) * span
    step["token_level_scores"] = spread.to(placed.dtype)
    step.update(derive(step))
    assert (clause, "values") in _failed_checks(_run(step, **config))
    if placement == "discounted":
        return
    # the right tokens but r / L_i (tool tokens counted): the row sum is wrong, which only
    # the recorded scalar reveals
    lengths = _lengths(step).unsqueeze(1).to(placed.dtype)
    broken = torch.where(step["response_mask"].bool(), scores.unsqueeze(1) / lengths, 0.0)
    step["token_level_scores"] = broken
    step.update(derive(step))
    assert _run(step, **config)[clause].status == "pass"
    step["scores"] = scores
    assert (clause, "values") in _failed_checks(_run(step, **config))


# --- every estimator -------------------------------------------------------------------------


def _components(step):
    gen = torch.Generator().manual_seed(3)
    return torch.randint(0, 2, (len(step["uid"]), 2), generator=gen).float()


def _estimate(name: str, step: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor, dict]:
    """torchref's (advantages, returns) for ``name`` and the config (and keys) it needs."""
    rewards, mask, uid = step["token_level_rewards"], step["response_mask"], step["uid"]
    if name == "gae":
        terminated = torch.tensor([i % 3 != 0 for i in range(len(uid))])
        bootstrap = torch.linspace(-1, 1, len(uid))
        step["terminated"] = terminated.to(torch.int64)
        step["bootstrap_value"] = bootstrap
        out = REF.advantage_gae(rewards, step["values"], mask, 0.9, 0.95, bootstrap, terminated)
        return *out, {"gamma": 0.9, "lam": 0.95}
    if name == "rloo":
        return *REF.advantage_rloo(rewards, mask, uid), {}
    if name == "reinforce_plus_plus":
        return *REF.advantage_reinforce_pp(rewards, mask, 0.9), {"gamma": 0.9}
    if name == "reinforce_plus_plus_baseline":
        return *REF.advantage_reinforce_pp_baseline(rewards, mask, uid), {}
    if name == "remax":
        step["reward_baselines"] = torch.linspace(0, 1, len(uid))
        return *REF.advantage_remax(rewards, step["reward_baselines"], mask), {}
    if name == "opo":
        return *REF.advantage_opo(rewards, mask, uid), {}
    if name == "grpo_passk":
        return *REF.advantage_grpo_passk(rewards, mask, uid, 1e-6, True), {}
    if name == "gpg":
        return *REF.advantage_gpg(rewards, mask, uid, 2.0), {"f_norm": 2.0}
    if name == "optimal_token_baseline":
        probs = step["old_log_probs"].exp()
        step["sum_pi_squared"] = probs * probs + 0.3 * (1 - probs) ** 2
        out = REF.advantage_optimal_token_baseline(
            rewards, mask, uid, step["old_log_probs"], step["sum_pi_squared"]
        )
        return *out, {}
    if name == "gdpo":
        components = _components(step)
        step["acc"], step["fmt"] = components[:, 0], components[:, 1]
        out = REF.advantage_gdpo(components, mask, uid, [1.0, 0.5])
        return *out, {"gdpo_reward_keys": ["acc", "fmt"], "gdpo_reward_weights": [1.0, 0.5]}
    if name == "grpo_dr":
        return *REF.advantage_grpo(rewards, mask, uid, norm_by_std=False), {
            "adv_estimator": "grpo",
            "norm_adv_by_std_in_grpo": False,
        }
    raise AssertionError(name)


ESTIMATORS = [
    ("gae", "adv.gae"),
    ("rloo", "adv.rloo"),
    ("reinforce_plus_plus", "adv.reinforce_pp"),
    ("reinforce_plus_plus_baseline", "adv.reinforce_pp_baseline"),
    ("remax", "adv.remax"),
    ("opo", "adv.opo"),
    ("grpo_passk", "adv.grpo_passk"),
    ("gpg", "adv.gpg"),
    ("optimal_token_baseline", "adv.optimal_token_baseline"),
    ("gdpo", "adv.gdpo"),
    ("grpo_dr", "adv.grpo"),
]


@pytest.mark.parametrize("name, clause", ESTIMATORS, ids=[n for n, _ in ESTIMATORS])
def test_estimator_clean_and_caught(name, clause):
    step = grpo_step()
    advantages, returns, config = _estimate(name, step)
    config = {"adv_estimator": name, **config}
    step["advantages"], step["returns"] = advantages, returns
    clean = _run(step, **config)
    assert clean[clause].status == "pass", [v.describe() for v in clean[clause].violations]
    assert clean["adv.invariants"].status == "pass"
    flipped = advantages.clone()
    row = int(flipped.abs().sum(dim=1).argmax())
    flipped[row] = -flipped[row]
    step["advantages"] = flipped
    assert (clause, "advantages") in _failed_checks(_run(step, **config))
    step["advantages"] = advantages
    step["returns"] = returns + 0.5 * step["response_mask"]
    assert (clause, "returns") in _failed_checks(_run(step, **config))


def test_estimator_inputs_missing_skip_with_the_reason():
    step = grpo_step()
    results = _run(step, adv_estimator="remax")
    assert results["adv.remax"].status == "skip"
    assert "reward_baselines" in results["adv.remax"].detail
    step.pop("uid")
    results = _run(step)
    assert results["adv.grpo"].status == "skip"
    assert "uid" in results["adv.grpo"].detail


def test_passk_group_of_one_requires_an_error():
    """The contract says pass@k must raise on a group of one: a recorded result is a break."""
    step = grpo_step()
    step["uid"] = ["alone"] + step["uid"][1:]
    advantages, returns = REF.advantage_grpo(
        step["token_level_rewards"], step["response_mask"], step["uid"]
    )
    step["advantages"], step["returns"] = advantages, returns
    results = _run(step, adv_estimator="grpo_passk")
    assert ("adv.grpo_passk", "raises") in _failed_checks(results)


def test_profile_changes_the_expectation():
    """verl's GRPO singleton (mean 0, std 1) vs slime's (std normalisation off: 0)."""
    step = grpo_step()
    step["uid"] = ["alone"] + step["uid"][1:]
    step.update(derive(step))
    assert _run(step, profile="torchref")["adv.grpo"].status == "pass"
    assert _run(step, profile="verl")["adv.grpo"].status == "pass"
    assert _run(step, profile="slime")["adv.grpo"].status == "fail"


# --- tolerances (CONTRACT §4) -------------------------------------------------------------


def _near_equal_group(step):
    """Scores 1.0 and 1.00001 in every group: (x - mean) / std is badly conditioned."""
    lengths = _lengths(step)
    scores = torch.zeros_like(step["token_level_scores"], dtype=torch.float32)
    for i, n in enumerate(lengths.tolist()):
        scores[i, n - 1] = 1.0 + 1e-5 * (i % 2)
    step["token_level_scores"] = scores
    step["token_level_rewards"] = scores.clone()
    step["config"] = {**step["config"], "use_kl_in_reward": False}


def test_honest_float32_passes_and_a_cancelling_variance_fails():
    step = grpo_step()
    _near_equal_group(step)
    rewards, mask, uid = step["token_level_rewards"], step["response_mask"], step["uid"]
    step["advantages"], step["returns"] = REF.advantage_grpo(rewards, mask, uid)
    assert _run(step)["adv.grpo"].status == "pass"
    # E[x^2] - mean^2 in float32: the textbook cancellation (CONTRACT §4)
    scores = rewards.sum(dim=1)
    per_group = scores.view(3, 4)
    mean = per_group.mean(dim=1, keepdim=True)
    var = ((per_group * per_group).mean(dim=1, keepdim=True) - mean * mean).clamp(min=0) * 4 / 3
    broken = ((per_group - mean) / (var.sqrt() + 1e-6)).reshape(-1, 1) * mask
    step["advantages"] = step["returns"] = broken
    assert _run(step)["adv.grpo"].status == "fail"


def test_bfloat16_recorded_values_use_the_bfloat16_tolerance():
    step = grpo_step()
    step["advantages"] = step["advantages"].to(torch.bfloat16)
    step["returns"] = step["returns"].to(torch.bfloat16)
    assert _run(step)["adv.grpo"].status == "pass"
    step["advantages"] = (-step["advantages"].float()).to(torch.bfloat16)
    assert _run(step)["adv.grpo"].status == "fail"


# --- severity ------------------------------------------------------------------------------


def test_severity_is_the_mildest_domain_of_the_violating_samples():
    step = grpo_step()
    values = step["values"].clone()
    values[~step["response_mask"].bool()] = float("nan")
    step["values"] = values
    rewards, mask = step["token_level_rewards"], step["response_mask"]
    advantages, returns = REF.advantage_gae(rewards, values.nan_to_num(), mask, 1.0, 1.0)
    step["advantages"], step["returns"] = advantages, returns
    results = _run(step, adv_estimator="gae")
    assert results["adv.gae"].status == "pass"
    # NaN leaking from padding (the multiply-by-mask bug) on every row: hardening
    step["returns"] = torch.where(mask.bool(), returns, torch.tensor(float("nan")))
    step["returns"][:, 0] = float("nan")
    gae = _run(step, adv_estimator="gae")["adv.gae"]
    assert gae.severity == "hardening"
    assert all("padding_nonfinite" in v.features for v in gae.counted)


# --- offpolicy.is_correction ---------------------------------------------------------------


@pytest.mark.parametrize("mode", ["token_truncate", "sequence_truncate", "token_mask"])
def test_is_weights_clean_and_caught(mode):
    step = grpo_step()
    level, _, kind = mode.partition("_")
    old, rollout, mask = step["old_log_probs"], step["rollout_log_probs"], step["response_mask"]
    weights = REF.is_correction_weights(old, rollout, mask, mode, 0.5, 1.05)
    step["rollout_is_weights"] = weights
    config = {
        "rollout_is": level,
        "rollout_is_mode": kind,
        "rollout_is_threshold": 1.05,
        "rollout_is_threshold_lower": 0.5,
    }
    assert _run(step, **config)["offpolicy.is_correction"].status == "pass"
    # the ratio the wrong way round (rollout / old)
    step["rollout_is_weights"] = REF.is_correction_weights(rollout, old, mask, mode, 0.5, 1.05)
    assert ("offpolicy.is_correction", "weights") in _failed_checks(_run(step, **config))


def test_is_weights_without_a_mode_skip():
    step = grpo_step()
    step["rollout_is_weights"] = torch.ones_like(step["old_log_probs"])
    results = _run(step)
    assert results["offpolicy.is_correction"].status == "skip"


# --- L_i without an attention mask ----------------------------------------------------------


def _tool_tail(step):
    """Row 2 ends in a tool observation that carries its reward (as verl places it)."""
    lengths = _lengths(step)
    step["response_mask"] = step["response_mask"].clone()
    step["response_mask"][2, lengths[2] - 1] = 0
    step.update(derive(step))


def test_response_length_stands_in_for_the_attention_mask():
    """verl's v1 trainer has no attention_mask at the advantage step: L_i comes from the
    nested response_mask's lengths, recorded as response_length."""
    step = grpo_step()
    _tool_tail(step)
    lengths = _lengths(step)
    for key in ("attention_mask", "prompts", "input_ids", "position_ids"):
        step.pop(key)
    results = _run(dict(step, response_length=lengths))
    assert {c: r.status for c, r in results.items() if r.status != "skip"} == {
        "mask.response_from_attention": "pass",
        "reward.place_last": "pass",
        "kl.in_reward": "pass",
        "adv.grpo": "pass",
        "adv.invariants": "pass",
        "agg.token_mean": "pass",
        "offpolicy.logprob_gap": "pass",
    }
    # without it, the tool tail looks like padding: the report says so in a note
    report = audit(dict(step, config=step["config"]))
    assert any("read as shorter" in note for note in report.notes)
    placement = next(c for c in report.clauses if c.clause == "reward.place_last")
    assert [v.row for v in placement.counted] == [2, 2]

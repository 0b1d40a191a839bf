"""Broken Unsloth GRPO losses, planted into unsloth-zoo, each fail the clause they break, on a
case the unbroken function passes.

A plant is a one-line source mutation of unsloth-zoo's own ``grpo_compute_loss`` (its source,
edited at run time and compiled in ``unsloth_zoo.rl_replacements``'s namespace, then set as
that module's attribute, which both ``UnslothEfficientGRPO`` and the binding's direct calls
look up; nothing of unsloth-zoo is stored here but the short strings).
"""

from __future__ import annotations

import inspect
import textwrap

import pytest

from rlconform.conformance.errors import ClauseMismatch
from rlconform.conformance.repro import replay
from tests.unsloth.conftest import needs_unsloth

pytestmark = needs_unsloth


def mutate(monkeypatch, module, function: str, old: str, new: str) -> None:
    source = textwrap.dedent(inspect.getsource(getattr(module, function)))
    assert source.count(old) == 1, f"{function}: {old!r} not found exactly once"
    namespace: dict = {}
    exec(
        compile(source.replace(old, new), f"<mutant of {function}>", "exec"),
        vars(module),
        namespace,
    )
    monkeypatch.setattr(module, function, namespace[function])


def _one(**fields):
    return {"samples": [{"uid": "s0", "mask": [1, 1], **fields}], "pad_value": 0.0}


PLANTS = {
    "loss.ppo_clip: swapped asymmetric clip range": (
        "loss.ppo_clip",
        "coef_2 = torch.clamp(coef_1, 1 - epsilon_low, 1 + epsilon_high)",
        "coef_2 = torch.clamp(coef_1, 1 - epsilon_high, 1 + epsilon_low)",
        {
            **_one(old=[-1.0, -1.0], logp=[-0.5, -1.5], adv=[1.0, 1.0]),
            "clip_low": 0.1,
            "clip_high": 0.28,
            "extra_pad": 1,
        },
    ),
    "loss.gspo: summed, not mean, sequence log-ratio": (
        "loss.gspo",
        "(log_ratio * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)",
        "(log_ratio * mask).sum(-1)",
        {
            **_one(old=[-1.0, -1.0], logp=[-0.9, -0.95], adv=[1.0, 1.0]),
            "clip_low": 0.2,
            "clip_high": 0.2,
            "extra_pad": 1,
        },
    ),
    "loss.sapo: the temperatures swapped by the advantage's sign": (
        "loss.sapo",
        "torch.where(advantages > 0, sapo_temperature_pos, sapo_temperature_neg)",
        "torch.where(advantages > 0, sapo_temperature_neg, sapo_temperature_pos)",
        {
            **_one(old=[-1.0, -1.0], logp=[-0.5, -1.5], adv=[1.0, 1.0]),
            "tau_pos": 1.0,
            "tau_neg": 3.0,
            "extra_pad": 1,
        },
    ),
    "kl.estimators: k3 without its - log-ratio": (
        "kl.estimators",
        "kl_i = torch.expm1(kl_log_ratio) - kl_log_ratio",
        "kl_i = torch.expm1(kl_log_ratio)",
        {
            **_one(logp=[-1.0, -0.5], ref=[-1.5, -0.25], upstream=[1.0, -0.5]),
            "extra_pad": 0,
            "mode": "k3",
        },
    ),
    "kl.importance_weighted: detached ratio": (
        "kl.importance_weighted",
        "kl_i = kl_i * coef_1",
        "kl_i = kl_i * coef_1.detach()",
        {
            **_one(logp=[-1.0, -0.5], ref=[-1.5, -0.25], old=[-1.25, -0.75], upstream=[1.0, -0.5]),
            "extra_pad": 0,
            "mode": "k3",
        },
    ),
    "offpolicy.is_correction: the sequence ratio from the mean log-ratio": (
        "offpolicy.is_correction",
        "importance_sampling_ratio = importance_sampling_ratio.sum(dim=-1, keepdim=True)\n",
        "importance_sampling_ratio = importance_sampling_ratio.mean(dim=-1, keepdim=True)\n",
        {
            "samples": [
                {"uid": "s0", "mask": [1, 1], "old": [-1.0, -0.5], "rollout": [-1.25, -1.0]}
            ],
            "pad_value": 0.0,
            "extra_pad": 1,
            "mode": "sequence_truncate",
            "clip_min": None,
            "clip_max": 3.0,
        },
    ),
    "offpolicy.tis: the ratio inverted (rollout over old)": (
        "offpolicy.tis",
        "importance_sampling_ratio = torch.exp(importance_sampling_ratio)",
        "importance_sampling_ratio = torch.exp(-importance_sampling_ratio)",
        {
            "samples": [
                {"uid": "s0", "mask": [1, 1], "old": [-1.0, -0.5], "rollout": [-1.25, -1.0]}
            ],
            "pad_value": 0.0,
            "extra_pad": 1,
            "low": 0.0,
            "high": 5.0,
        },
    ),
    "offpolicy.icepop: rejected tokens kept at weight 1": (
        "offpolicy.icepop",
        "invalid_mis_mask, value=0.0",
        "invalid_mis_mask, value=1.0",
        {
            "samples": [
                {"uid": "s0", "mask": [1, 1], "old": [-1.0, -0.5], "rollout": [-1.25, -3.0]}
            ],
            "pad_value": 0.0,
            "extra_pad": 1,
            "low": 0.5,
            "high": 2.0,
        },
    ),
    "offpolicy.opsm: the mismatch measured against the policy itself": (
        "offpolicy.opsm",
        "sampling_per_token_logps=sampling_per_token_logps if sampling_per_token_logps is not "
        "None else (old if old is not None else new.detach()),",
        "sampling_per_token_logps=new.detach(),",
        {
            "samples": [
                {
                    "uid": "s0",
                    "mask": [1, 1, 1],
                    "logp": [-2.0, -1.0, -0.5],
                    "old": [-1.0, -0.5, -0.5],
                    "advantage": -1.0,
                }
            ],
            "pad_value": 0.0,
            "extra_pad": 1,
            "delta": 1e-4,
        },
    ),
    "agg.token_mean: the process count divided in twice": (
        "agg.token_mean",
        "loss = (loss_i * mask).sum() / normalizer\n",
        "loss = (loss_i * mask).sum() / normalizer / num_processes\n",
        {
            **_one(loss=[1.0, 2.0]),
            "extra_pad": 0,
            "dp_size": 2,
            "other_tokens": 1,
            "other_sequences": 0,
            "loss_scale_factor": 1,
        },
    ),
}


@pytest.mark.parametrize("name", sorted(PLANTS))
def test_plant_fails_its_clause(unsloth, name, monkeypatch):
    clause_id, old, new, case = PLANTS[name]
    replay(clause_id, unsloth, case)  # the unbroken function passes this case
    mutate(monkeypatch, unsloth.zoo, "grpo_compute_loss", old, new)
    with pytest.raises(ClauseMismatch) as info:
        replay(clause_id, unsloth, case)
    assert f"[{clause_id}]" in str(info.value)


# -- the step: plants in the generated compute_loss (its source, built by the binding) and
# -- in grpo_compute_loss, each failing the step clause on a batch the unbroken code passes

COMPUTE_LOSS_PLANTS = {
    "step.update: the micro-batch loss is not divided over the accumulation window": (
        "step.update",
        "current_gradient_accumulation_steps = _unsloth_grpo_accumulation_steps(self)",
        "current_gradient_accumulation_steps = 1",
    ),
    "step.metrics: the completion length logged as the KL": (
        "step.metrics",
        'self._metrics[mode]["kl"].append(mean_kl.item())',
        'self._metrics[mode]["kl"].append(completion_length.item())',
    ),
}


def _step_case():
    from tests.step import by_hand as h

    return h.case(
        [
            h.sample("s0", [1, 1], 0.0, ref=[-0.5, -1.0]),
            h.sample("s1", [1, 1], 1.0, delta=0.05),
            h.sample("s2", [1, 1], 0.5, group="g1"),
            h.sample("s3", [1, 1], 0.0, group="g1", ref=[-1.5, -0.5]),
        ],
        [2, 2],
    )


@pytest.mark.parametrize("name", sorted(COMPUTE_LOSS_PLANTS))
def test_step_plant_fails_its_clause(unsloth, name, monkeypatch, tmp_path):
    from rlconform.conformance.clauses import step

    clause_id, old, new = COMPUTE_LOSS_PLANTS[name]
    case = _step_case()
    token = step.select_configs(["grpo_kl"])  # a KL term on, two micro-batches
    try:
        _plant_and_replay(unsloth, clause_id, old, new, case, monkeypatch, tmp_path)
    finally:
        step.reset_configs(token)


def _plant_and_replay(unsloth, clause_id, old, new, case, monkeypatch, tmp_path):
    from rlconform.adapters.unsloth import compute_loss

    replay(clause_id, unsloth, case)  # the unbroken compute_loss passes this case
    source = open(compute_loss.source_path(), encoding="utf-8").read()
    assert source.count(old) == 1, f"{old!r} not found exactly once"
    planted = tmp_path / "rl_replacements.py"
    planted.write_text(source.replace(old, new), encoding="utf-8")
    monkeypatch.setitem(
        unsloth.__dict__, "_unsloth_compute_loss", compute_loss.build(unsloth.zoo, str(planted))
    )
    with pytest.raises(ClauseMismatch) as info:
        replay(clause_id, unsloth, case)
    assert f"[{clause_id}]" in str(info.value)

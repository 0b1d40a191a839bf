"""Broken Liger (and TRL Liger-branch) functions, planted into the real code, each fail the
clause they break, on a case the unbroken code passes.

A plant is a one-line source mutation of the function (its source, edited at run time and
compiled in its module's namespace; nothing of Liger or TRL is stored here but the short
strings). They cover the three layers the binding runs: the per-chunk math
(``ppo_loss_fn``, ``clip_coef_fn``), the fused function (its loss accumulation and the
hand-written backward of its log-probs) and TRL's ``compute_liger_loss``.
"""

from __future__ import annotations

import importlib
import inspect
import sys
import textwrap

import pytest

from rlconform.conformance.errors import ClauseMismatch
from rlconform.conformance.repro import replay
from tests.step import by_hand as h
from tests.trl_liger.conftest import needs_liger

pytestmark = needs_liger

_GRPO = "liger_kernel.chunked_loss.grpo_loss"
_PPO = "liger_kernel.chunked_loss.fused_linear_ppo"
_TRAINER = "trl.trainer.grpo_trainer"


def mutate(monkeypatch, module_name: str, owner_name: str | None, name: str, old: str, new: str):
    module = importlib.import_module(module_name)
    owner = getattr(module, owner_name) if owner_name else module
    source = textwrap.dedent(inspect.getsource(getattr(owner, name)))
    assert source.count(old) == 1, f"{name}: {old!r} not found exactly once"
    namespace: dict = {}
    code = compile(source.replace(old, new), f"<mutant of {name}>", "exec")
    exec(code, vars(sys.modules[module_name]), namespace)
    monkeypatch.setattr(owner, name, namespace[name])


def _loss_case():
    # one advantage per completion (Liger's layout); ratios 0.61 (A < 0) and 1.65 (A > 0)
    return {
        "clip_low": 0.1,
        "clip_high": 0.28,
        "samples": [
            {
                "uid": "s0",
                "mask": [1, 1],
                "old": [-1.0, -1.0],
                "logp": [-1.5, -1.0],
                "adv": [-1.0, -1.0],
            },
            {"uid": "s1", "mask": [1], "old": [-1.0], "logp": [-0.5], "adv": [1.0]},
        ],
        "pad_value": 0.0,
        "extra_pad": 1,
    }


def _agg_case(mask):
    return {
        "samples": [{"uid": "s0", "mask": mask, "loss": [1.0, 2.0, 4.0][: len(mask)]}],
        "pad_value": 3.0,
        "extra_pad": 1,
        "dp_size": 1,
        "other_tokens": 0,
        "other_sequences": 0,
        "loss_scale_factor": 1,
    }


def _step_case():
    return h.case([h.sample("s0", [1, 1], 0.0), h.sample("s1", [1, 1], 1.0, delta=0.05)], [2])


PLANTS = {
    "loss.ppo_clip: swapped asymmetric clip range (clip_coef_fn)": (
        "loss.ppo_clip",
        lambda mp: mutate(
            mp,
            _GRPO,
            None,
            "clip_coef_fn",
            "lower_bound = 1 - epsilon_low",
            "lower_bound = 1 - epsilon_high",
        ),
        _loss_case(),
    ),
    "loss.ppo_clip: the fused loss accumulates each chunk twice": (
        "loss.ppo_clip",
        lambda mp: mutate(
            mp,
            _PPO,
            "LigerFusedLinearPPOBase",
            "forward",
            "loss_acc.add_(chunk_loss)",
            "loss_acc.add_(2 * chunk_loss)",
        ),
        _loss_case(),
    ),
    "loss.sapo: the gate's scale drops its temperature (sapo_loss_fn)": (
        "loss.sapo",
        lambda mp: mutate(
            mp,
            _GRPO,
            None,
            "sapo_loss_fn",
            "sigmoid_smoothed_loss * 4 / temperature",
            "sigmoid_smoothed_loss * 4",
        ),
        {
            **{k: v for k, v in _loss_case().items() if not k.startswith("clip_")},
            "tau_pos": 1.0,
            "tau_neg": 3.0,
        },
    ),
    "kl.importance_weighted: detached ratio (ppo_loss_fn)": (
        "kl.importance_weighted",
        lambda mp: mutate(
            mp,
            _GRPO,
            "LigerFusedLinearGRPOFunction",
            "ppo_loss_fn",
            "kl_div = kl_div * torch.exp(log_importance_weights)",
            "kl_div = kl_div * torch.exp(log_importance_weights).detach()",
        ),
        {
            "samples": [
                {
                    "uid": "s0",
                    "mask": [1, 1],
                    "logp": [-1.0, -0.5],
                    "ref": [-1.5, -0.25],
                    "old": [-1.25, -0.75],
                    "upstream": [1.0, -0.5],
                }
            ],
            "pad_value": 0.0,
            "extra_pad": 0,
            "mode": "k3",
        },
    ),
    "agg.token_mean: the dapo sum without the mask (ppo_loss_fn)": (
        "agg.token_mean",
        lambda mp: mutate(
            mp,
            _GRPO,
            "LigerFusedLinearGRPOFunction",
            "ppo_loss_fn",
            "loss = (per_token_loss * attention_mask).sum() / loss_normalizer",
            "loss = per_token_loss.sum() / loss_normalizer",
        ),
        _agg_case([1, 1]),
    ),
    "agg.token_mean: compute_liger_loss drops the tool mask": (
        "agg.token_mean",
        lambda mp: mutate(
            mp,
            _TRAINER,
            "GRPOTrainer",
            "compute_liger_loss",
            'loss_mask = completion_mask if "tool_mask" not in inputs else completion_mask * inputs["tool_mask"]',
            "loss_mask = completion_mask",
        ),
        _agg_case([1, 0, 1]),
    ),
    "step.update: the fused backward doubles the chosen token's logit gradient": (
        "step.update",
        lambda mp: mutate(
            mp,
            _PPO,
            None,
            "_selective_logprob_backward",
            "grad_logits[row_idx, local_idx] += grad_chunk * in_chunk",
            "grad_logits[row_idx, local_idx] += 2 * grad_chunk * in_chunk",
        ),
        _step_case(),
    ),
}


@pytest.mark.parametrize("name", sorted(PLANTS))
def test_plant_fails_its_clause_on_real_liger(liger, name, monkeypatch):
    clause_id, plant, case = PLANTS[name]
    replay(clause_id, liger, case)  # the unbroken code passes this case
    plant(monkeypatch)
    with pytest.raises(ClauseMismatch) as info:
        replay(clause_id, liger, case)
    assert f"[{clause_id}]" in str(info.value)

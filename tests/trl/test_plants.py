"""Broken TRL functions, planted into the real trainer (and into the stand-in), each fail
the clause they break, on a case the unbroken function passes.

A plant is either a replaced function (``nanstd``, ``get_off_policy_mask``) or a one-line
source mutation of GRPOTrainer's own method (its source, edited at run time and compiled
in its module's namespace; nothing of TRL is stored here but the two short strings).
"""

from __future__ import annotations

import inspect
import sys
import textwrap

import pytest
import torch

from rlconform.conformance.errors import ClauseMismatch
from rlconform.conformance.repro import replay
from tests.trl.conftest import real_trl_skip_reason


def mutate(monkeypatch, cls, method: str, old: str, new: str) -> None:
    source = textwrap.dedent(inspect.getsource(getattr(cls, method)))
    assert source.count(old) == 1, f"{method}: {old!r} not found exactly once"
    namespace: dict = {}
    module = sys.modules[cls.__module__]
    exec(
        compile(source.replace(old, new), f"<mutant of {method}>", "exec"), vars(module), namespace
    )
    monkeypatch.setattr(cls, method, namespace[method])


def population_nanstd(tensor, dim=None, keepdim=False):
    """Broken: ddof 0 (TRL's nanstd is Bessel-corrected)."""
    if dim is None:
        return torch.std(tensor, correction=0)
    return torch.std(tensor, dim=dim, correction=0, keepdim=keepdim)


def summed_off_policy_mask(
    advantages, per_token_logps, sampling_per_token_logps, mask, off_policy_threshold
):
    """Broken: the summed, not the mean, sequence KL is compared with delta."""
    kl = torch.nan_to_num(sampling_per_token_logps - per_token_logps.detach(), nan=0.0)
    seq_kl = (kl * mask).sum(dim=1, keepdim=True)
    return ((advantages >= 0) | (seq_kl <= off_policy_threshold)).to(dtype=mask.dtype)


def _grpo_case():
    s = [
        {"uid": "s0", "group": "a", "mask": [1, 1], "rewards": [0.0, 1.0]},
        {"uid": "s1", "group": "a", "mask": [1], "rewards": [0.0]},
        {"uid": "s2", "group": "b", "mask": [1, 1, 1], "rewards": [0.0, 0.0, 0.5]},
        {"uid": "s3", "group": "b", "mask": [1, 0], "rewards": [2.0, 9.0]},
    ]
    return {"samples": s, "pad_value": 0.0, "extra_pad": 1, "params": {"norm_by_std": True}}


PLANTS = {
    "adv.grpo: population std": (
        "adv.grpo",
        lambda mp, cls: mp.setattr(sys.modules[cls.__module__], "nanstd", population_nanstd),
        _grpo_case(),
    ),
    "offpolicy.opsm: summed sequence KL": (
        "offpolicy.opsm",
        lambda mp, cls: mp.setattr(
            cls, "get_off_policy_mask", staticmethod(summed_off_policy_mask)
        ),
        {
            "samples": [
                {
                    "uid": "s5",
                    "mask": [1, 1, 1],
                    "logp": [-1.0625, -2.0625, -0.5625],
                    "old": [-1.0, -2.0, -0.5],
                    "advantage": -0.5,
                },
            ],
            "pad_value": 0.0,
            "extra_pad": 1,
            "delta": 0.1,
        },
    ),
    "loss.ppo_clip: swapped asymmetric clip range": (
        "loss.ppo_clip",
        lambda mp, cls: mutate(
            mp,
            cls,
            "_compute_loss",
            "torch.clamp(coef_1, 1 - self.epsilon_low, 1 + self.epsilon_high)",
            "torch.clamp(coef_1, 1 - self.epsilon_high, 1 + self.epsilon_low)",
        ),
        {
            "clip_low": 0.1,
            "clip_high": 0.28,
            "samples": [
                {
                    "uid": "s0",
                    "mask": [1, 1],
                    "old": [-1.0, -1.0],
                    "logp": [-0.5, -1.5],
                    "adv": [1.0, -1.0],
                }
            ],
            "pad_value": 0.0,
            "extra_pad": 1,
        },
    ),
    "loss.sapo: the temperatures swapped by the advantage's sign": (
        "loss.sapo",
        lambda mp, cls: mutate(
            mp,
            cls,
            "_compute_loss",
            "self.args.sapo_temperature_pos, self.args.sapo_temperature_neg",
            "self.args.sapo_temperature_neg, self.args.sapo_temperature_pos",
        ),
        {
            "tau_pos": 1.0,
            "tau_neg": 3.0,
            "samples": [
                {
                    "uid": "s0",
                    "mask": [1, 1],
                    "old": [-1.0, -1.0],
                    "logp": [-0.5, -1.5],
                    "adv": [1.0, -1.0],
                }
            ],
            "pad_value": 0.0,
            "extra_pad": 1,
        },
    ),
    "offpolicy.is_correction: geometric-mean sequence ratio": (
        "offpolicy.is_correction",
        lambda mp, cls: mutate(
            mp,
            cls,
            "_generate_and_score_completions",
            "per_token_logps_diff.sum(dim=-1, keepdim=True)",
            "per_token_logps_diff.mean(dim=-1, keepdim=True)",
        ),
        {
            "samples": [
                {"uid": "s0", "mask": [1, 1], "old": [-0.5, -1.5], "rollout": [-0.25, -1.5]}
            ],
            "pad_value": 0.0,
            "extra_pad": 1,
            "mode": "sequence_truncate",
            "clip_min": None,
            "clip_max": 3.0,
        },
    ),
    "kl.importance_weighted: detached ratio": (
        "kl.importance_weighted",
        lambda mp, cls: mutate(
            mp,
            cls,
            "_compute_loss",
            "per_token_kl = per_token_kl * coef_1",
            "per_token_kl = per_token_kl * coef_1.detach()",
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
    "agg.token_mean: dp_size multiplied into the normaliser": (
        "agg.token_mean",
        lambda mp, cls: mutate(
            mp,
            cls,
            "_compute_loss",
            "/ self.accelerator.num_processes",
            "* self.accelerator.num_processes",
        ),
        {
            "samples": [{"uid": "s0", "mask": [1, 1], "loss": [1.0, 2.0]}],
            "pad_value": 0.0,
            "extra_pad": 0,
            "dp_size": 2,
            "other_tokens": 1,
            "other_sequences": 0,
            "loss_scale_factor": 1,
        },
    ),
}


def _check_plant(target, name, monkeypatch):
    clause_id, plant, case = PLANTS[name]
    replay(clause_id, target, case)  # the unbroken function passes this case
    plant(monkeypatch, target.shell.trainer_cls)
    with pytest.raises(ClauseMismatch) as info:
        replay(clause_id, target, case)
    assert f"[{clause_id}]" in str(info.value)


@pytest.mark.parametrize("name", sorted(PLANTS))
def test_plant_fails_its_clause_on_the_standin(standin_target, name, monkeypatch):
    target = standin_target
    target.profile = __import__("tests.trl.test_standin", fromlist=["x"])._standin_profile(target)
    _check_plant(target, name, monkeypatch)


@pytest.mark.skipif(real_trl_skip_reason() is not None, reason=str(real_trl_skip_reason()))
@pytest.mark.parametrize("name", sorted(PLANTS))
def test_plant_fails_its_clause_on_real_trl(real_target, name, monkeypatch):
    _check_plant(real_target, name, monkeypatch)

"""Broken AReaL functions, planted into the real code, each fail the clause they break, on
a case the unbroken code passes.

A plant is a one-line source mutation of the function (its source, edited at run time and
compiled in its module's namespace; nothing of AReaL is stored here but the short strings).
Where the trainer imports a function by name (``actor.py`` and ``critic.py`` import the
loss functions from ``areal.utils.functional``), the mutant replaces every name the call
path reads, so the binding runs it exactly as the trainer would.
"""

from __future__ import annotations

import importlib
import inspect
import sys
import textwrap

import pytest

from rlconform.conformance.errors import ClauseMismatch
from rlconform.conformance.repro import replay
from tests.areal.conftest import needs_areal

pytestmark = needs_areal

_FUNCTIONAL = "areal.utils.functional.functional"
_DATA = "areal.utils.data"
# the modules that hold each loss function under its own name (the trainer's imports)
_HOLDERS = {
    "ppo_actor_loss_fn": (_FUNCTIONAL, "areal.utils.functional", "areal.trainer.ppo.actor"),
    "ppo_critic_loss_fn": (_FUNCTIONAL, "areal.utils.functional", "areal.trainer.ppo.critic"),
    "sapo_loss_fn": (_FUNCTIONAL, "areal.utils.functional", "areal.trainer.ppo.actor"),
}


def mutate(monkeypatch, module_name: str, owner_name: str | None, name: str, old: str, new: str):
    module = importlib.import_module(module_name)
    owner = getattr(module, owner_name) if owner_name else module
    raw = inspect.getattr_static(owner, name)
    function = raw.__func__ if isinstance(raw, staticmethod) else raw
    source = textwrap.dedent(inspect.getsource(function))
    assert source.count(old) == 1, f"{name}: {old!r} not found exactly once"
    namespace: dict = {}
    code = compile(source.replace(old, new), f"<mutant of {name}>", "exec")
    exec(code, vars(sys.modules[module_name]), namespace)
    mutant = namespace[name]
    if owner_name:
        monkeypatch.setattr(owner, name, mutant)
        return
    for holder in _HOLDERS.get(name, (module_name,)):
        monkeypatch.setattr(importlib.import_module(holder), name, mutant)


def _loss_case(adv_s0=(1.0, -1.0), **params):
    # ratios e^0.5 (clipped) and e^-0.5 on s0, e^0.2 and e^-0.1 on s1
    return {
        "clip_low": 0.2,
        "clip_high": 0.2,
        **params,
        "samples": [
            {
                "uid": "s0",
                "mask": [1, 1],
                "old": [-1.0, -1.0],
                "logp": [-0.5, -1.5],
                "adv": list(adv_s0),
            },
            {
                "uid": "s1",
                "mask": [1, 1],
                "old": [-1.0, -1.0],
                "logp": [-0.8, -1.1],
                "adv": [0.5, 0.5],
            },
        ],
        "pad_value": 0.0,
        "extra_pad": 1,
    }


def _ratio_case(**params):
    # log-ratios old - rollout: 0.2 and 0.4 on s0 (ratios 1.22, 1.49), 0.1 and -0.1 on s1
    return {
        **params,
        "samples": [
            {"uid": "s0", "mask": [1, 1], "old": [-1.0, -1.0], "rollout": [-1.2, -1.4]},
            {"uid": "s1", "mask": [1, 1], "old": [-1.0, -1.0], "rollout": [-1.1, -0.9]},
        ],
        "pad_value": 0.0,
        "extra_pad": 1,
    }


PLANTS = {
    "kl.estimators: k2 without the half": (
        "kl.estimators",
        lambda mp: mutate(
            mp,
            _DATA,
            "KLEstimator",
            "_compute_approx_kl",
            "log_ratio = log_ratio**2 / 2.0",
            "log_ratio = log_ratio**2",
        ),
        {
            "samples": [
                {
                    "uid": "s0",
                    "mask": [1, 1],
                    "logp": [-0.8, -1.4],
                    "ref": [-1.0, -1.0],
                    "upstream": [1.0, 1.0],
                }
            ],
            "pad_value": 0.0,
            "extra_pad": 1,
            "mode": "mse",
        },
    ),
    "adv.grpo: the population std": (
        "adv.grpo",
        lambda mp: mutate(
            mp,
            _DATA,
            "Normalization",
            "_compute_std",
            "return (x_sum_sq / (factor - 1)).sqrt()",
            "return (x_sum_sq / factor).sqrt()",
        ),
        {
            # equal groups, each score on its last action token (AReaL's layout)
            "samples": [
                {"uid": "s0", "group": "a", "mask": [1, 1], "rewards": [0.0, 1.0]},
                {"uid": "s1", "group": "a", "mask": [1], "rewards": [0.0]},
                {"uid": "s2", "group": "b", "mask": [1, 1, 1], "rewards": [0.0, 0.0, 0.5]},
                {"uid": "s3", "group": "b", "mask": [1], "rewards": [2.0]},
            ],
            "pad_value": 0.0,
            "extra_pad": 1,
            "params": {"norm_by_std": True},
        },
    ),
    "adv.gae: lambda left out of the trace": (
        "adv.gae",
        lambda mp: mutate(
            mp,
            "areal.trainer.ppo.actor",
            "PPOActor",
            "_compute_advantages",
            "newgaelam = delta + self.discount * self.gae_lambda * lastgaelam",
            "newgaelam = delta + self.discount * lastgaelam",
        ),
        {
            # every sample ended with EOS and has no tool token (where AReaL and the
            # contract agree); each score on its last action token
            "samples": [
                {
                    "uid": "s0",
                    "mask": [1, 1, 1],
                    "rewards": [0.0, 0.0, 1.0],
                    "values": [0.5, 0.25, 0.75],
                    "terminated": True,
                    "bootstrap": 0.0,
                },
                {
                    "uid": "s1",
                    "mask": [1, 1],
                    "rewards": [0.0, -0.5],
                    "values": [0.1, 0.2],
                    "terminated": True,
                    "bootstrap": 0.0,
                },
            ],
            "pad_value": 0.0,
            "extra_pad": 1,
            "params": {"gamma": 0.9, "lam": 0.95, "bootstrap": False},
        },
    ),
    "loss.ppo_clip: the pessimistic max turned into a min": (
        "loss.ppo_clip",
        lambda mp: mutate(
            mp,
            _FUNCTIONAL,
            None,
            "ppo_actor_loss_fn",
            "pg_loss = torch.max(pg_loss1, pg_loss2)",
            "pg_loss = torch.min(pg_loss1, pg_loss2)",
        ),
        _loss_case(),
    ),
    "loss.dual_clip: the cap taken as a max": (
        "loss.dual_clip",
        lambda mp: mutate(
            mp,
            _FUNCTIONAL,
            None,
            "ppo_actor_loss_fn",
            "pg_loss = torch.min(pg_loss, pg_loss3)",
            "pg_loss = torch.max(pg_loss, pg_loss3)",
        ),
        _loss_case(adv_s0=(-1.0, -1.0), clip_c=3.0),
    ),
    "loss.gspo: the summed, not the mean, sequence log-ratio": (
        "loss.gspo",
        lambda mp: mutate(
            mp,
            _FUNCTIONAL,
            None,
            "_compute_sequence_level_ratio_and_advantages",
            "ratio = torch.exp(log_ratio_mean_per_seq)[sequence_idx]",
            "ratio = torch.exp(log_ratio_sum_per_seq)[sequence_idx]",
        ),
        # constant advantages per sequence: AReaL's sequence-mean advantage is then exact
        _loss_case(adv_s0=(1.0, 1.0)),
    ),
    "loss.sapo: the gates swapped by the advantage's sign": (
        "loss.sapo",
        lambda mp: mutate(
            mp,
            _FUNCTIONAL,
            None,
            "sapo_loss_fn",
            "soft_gate = torch.where(is_positive, scaled_gate_pos, scaled_gate_neg)",
            "soft_gate = torch.where(is_positive, scaled_gate_neg, scaled_gate_pos)",
        ),
        {
            "tau_pos": 1.0,
            "tau_neg": 3.0,
            "samples": _loss_case()["samples"],
            "pad_value": 0.0,
            "extra_pad": 1,
        },
    ),
    "loss.value_clip: the pessimistic max turned into a min": (
        "loss.value_clip",
        lambda mp: mutate(
            mp,
            _FUNCTIONAL,
            None,
            "ppo_critic_loss_fn",
            "value_loss = torch.max(value_loss_original, value_loss_clipped)",
            "value_loss = torch.min(value_loss_original, value_loss_clipped)",
        ),
        {
            "clip": 0.2,
            "samples": [
                {
                    "uid": "s0",
                    "mask": [1, 1],
                    "vpreds": [1.0, 2.0],
                    "returns": [1.5, 0.0],
                    "values": [0.5, 0.5],
                }
            ],
            "pad_value": 0.0,
            "extra_pad": 1,
        },
    ),
    "offpolicy.tis: the clamped weight scaled": (
        "offpolicy.tis",
        lambda mp: mutate(
            mp,
            _FUNCTIONAL,
            None,
            "apply_rejection_sampling",
            "directly clamp importance weight\n"
            "            behave_imp_weight = behave_imp_weight.clamp(",
            "directly clamp importance weight\n"
            "            behave_imp_weight = 1.5 * behave_imp_weight.clamp(",
        ),
        _ratio_case(low=0.0, high=2.0),
    ),
    "offpolicy.icepop: nothing rejected": (
        "offpolicy.icepop",
        lambda mp: mutate(
            mp,
            _FUNCTIONAL,
            None,
            "apply_rejection_sampling",
            "updated_mask = (candidates & in_bounds).to(loss_mask.dtype)",
            "updated_mask = candidates.to(loss_mask.dtype)",
        ),
        _ratio_case(low=0.8, high=1.3),
    ),
    "offpolicy.is_correction: the summed, not the mean, sequence log-ratio": (
        "offpolicy.is_correction",
        lambda mp: mutate(
            mp,
            _FUNCTIONAL,
            None,
            "apply_rejection_sampling",
            "seq_log_mean = seq_log_sum / valid_count_per_seq.to(log_ratio.dtype)",
            "seq_log_mean = seq_log_sum",
        ),
        _ratio_case(mode="sequence_truncate", clip_min=None, clip_max=5.0),
    ),
}


@pytest.mark.parametrize("name", sorted(PLANTS))
def test_plant_fails_its_clause_on_real_areal(areal, name, monkeypatch):
    clause_id, plant, case = PLANTS[name]
    replay(clause_id, areal, case)  # the unbroken code passes this case
    plant(monkeypatch)
    with pytest.raises(ClauseMismatch) as info:
        replay(clause_id, areal, case)
    assert f"[{clause_id}]" in str(info.value)

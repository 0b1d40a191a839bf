"""Broken SkyRL functions, planted into the real code, each fail the clause they break, on
a case the unbroken code passes.

A plant is a one-line source mutation of the function (its source, edited at run time and
compiled in its module's namespace; nothing of SkyRL is stored here but the short strings).
SkyRL's trainer and workers reach the estimators and policy losses through their
registries (``AdvantageEstimatorRegistry`` / ``PolicyLossRegistry``), so a mutant of a
registered function replaces its registry entries; a function is also replaced under its
name in every SkyRL module that imported it by name (the trainer imports
``apply_loss_reduction_to_advantages_minibatch`` and ``compute_approx_kl``).
"""

from __future__ import annotations

import importlib
import inspect
import sys
import textwrap

import pytest

from rlconform.conformance.errors import ClauseMismatch
from rlconform.conformance.repro import replay
from tests.skyrl.conftest import needs_skyrl

pytestmark = needs_skyrl

_PPO = "skyrl.backends.skyrl_train.utils.ppo_utils"
_TRAINER = "skyrl.train.trainer"


def _source(function) -> str:
    """The function's source without its registration decorators."""
    lines = textwrap.dedent(inspect.getsource(inspect.unwrap(function))).splitlines()
    return "\n".join(line for line in lines if not line.startswith("@register_")) + "\n"


def mutate(monkeypatch, module_name: str, owner_name: str | None, name: str, old: str, new: str):
    module = importlib.import_module(module_name)
    owner = getattr(module, owner_name) if owner_name else module
    original = inspect.getattr_static(owner, name)
    source = _source(original)
    assert source.count(old) == 1, f"{name}: {old!r} not found exactly once"
    namespace: dict = {}
    exec(compile(source.replace(old, new), f"<mutant of {name}>", "exec"), vars(module), namespace)
    mutant = namespace[name]
    monkeypatch.setattr(owner, name, mutant)
    if owner_name is None:
        for other in list(sys.modules.values()):
            if other is not module and getattr(other, "__name__", "").startswith("skyrl"):
                if getattr(other, name, None) is original:
                    monkeypatch.setattr(other, name, mutant)
    for registry in ("AdvantageEstimatorRegistry", "PolicyLossRegistry"):
        functions = getattr(module, registry, None)
        for key, entry in list(getattr(functions, "_functions", {}).items()):
            if inspect.unwrap(entry) is inspect.unwrap(original):
                monkeypatch.setitem(functions._functions, key, mutant)


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


_GROUPS = {
    "samples": [
        {"uid": "s0", "group": "a", "mask": [1, 1], "rewards": [0.0, 1.0]},
        {"uid": "s1", "group": "a", "mask": [1], "rewards": [0.0]},
        {"uid": "s2", "group": "a", "mask": [1, 1, 1], "rewards": [0.0, 0.0, 0.5]},
        {"uid": "s3", "group": "b", "mask": [1], "rewards": [2.0]},
        {"uid": "s4", "group": "b", "mask": [1, 1], "rewards": [0.0, -1.0]},
    ],
    "pad_value": 0.0,
    "extra_pad": 1,
}

_RETURNS = {
    "samples": [
        {
            "uid": "s0",
            "group": "g",
            "mask": [1, 1, 1],
            "rewards": [0.0, 0.0, 1.0],
            "values": [0.5, -0.25, 0.75],
            "terminated": True,
            "bootstrap": 0.0,
        },
        {
            "uid": "s1",
            "group": "g",
            "mask": [1, 1],
            "rewards": [0.5, -1.0],
            "values": [0.0, 1.0],
            "terminated": True,
            "bootstrap": 0.0,
        },
    ],
    "pad_value": 0.0,
    "extra_pad": 1,
}

_AGG = {
    "samples": [
        {"uid": "s0", "mask": [1, 1, 1], "loss": [1.0, 2.0, 3.0]},
        {"uid": "s1", "mask": [1, 0, 1], "loss": [5.0, 9.0, 6.0]},
    ],
    "pad_value": 0.0,
    "extra_pad": 1,
    "dp_size": 2,
    "other_tokens": 3,
    "other_sequences": 1,
    "loss_scale_factor": 7,
}

PLANTS = {
    "agg.token_mean: the count per sequence": (
        "agg.token_mean",
        lambda mp: mutate(
            mp,
            _PPO,
            None,
            "apply_loss_reduction_to_advantages_minibatch",
            "normalized_advantages = advantages / loss_mask.sum().clamp(min=1)",
            "normalized_advantages = advantages / loss_mask.sum(dim=-1, keepdim=True).clamp(min=1)",
        ),
        _AGG,
    ),
    "agg.seq_mean_token_mean: the sequence count dropped": (
        "agg.seq_mean_token_mean",
        lambda mp: mutate(
            mp,
            _PPO,
            None,
            "apply_loss_reduction_to_advantages_minibatch",
            "normalized_advantages = advantages / (batch_size * loss_mask.sum(dim=-1, keepdim=True).clamp(min=1))",
            "normalized_advantages = advantages / loss_mask.sum(dim=-1, keepdim=True).clamp(min=1)",
        ),
        _AGG,
    ),
    "kl.estimators: k3's value clamp at 5": (
        "kl.estimators",
        lambda mp: mutate(
            mp,
            _PPO,
            None,
            "compute_approx_kl",
            "kld = torch.clamp(kld, min=-10, max=10)",
            "kld = torch.clamp(kld, min=-10, max=5)",
        ),
        {
            "samples": [
                {
                    "uid": "s0",
                    "mask": [1, 1],
                    "logp": [-8.0, -1.0],
                    "ref": [-1.0, -1.0],
                    "upstream": [1.0, 1.0],
                }
            ],
            "pad_value": 0.0,
            "extra_pad": 1,
            "mode": "low_var_kl",
        },
    ),
    "kl.in_reward: the coefficient doubled": (
        "kl.in_reward",
        lambda mp: mutate(
            mp,
            _TRAINER,
            "RayPPOTrainer",
            "apply_reward_kl_penalty",
            "rewards = rewards - kl * max(0, kl_loss_coef)",
            "rewards = rewards - kl * max(0, kl_loss_coef) * 2",
        ),
        {
            "samples": [
                {
                    "uid": "s0",
                    "mask": [1, 1],
                    "old": [-0.5, -1.0],
                    "ref": [-1.0, -1.5],
                    "scores": [0.0, 1.0],
                }
            ],
            "pad_value": 0.0,
            "extra_pad": 1,
            "mode": "kl",
            "beta": 0.1,
        },
    ),
    "kl.adaptive_controller: the error clipped at 0.1": (
        "kl.adaptive_controller",
        lambda mp: mutate(
            mp,
            _PPO,
            "AdaptiveKLController",
            "update",
            "np.clip(current / target - 1, -0.2, 0.2)",
            "np.clip(current / target - 1, -0.1, 0.1)",
        ),
        {
            "kind": "adaptive",
            "init": 0.1,
            "target_kl": 0.1,
            "horizon": 100,
            "steps": [[0.5, 10], [0.0, 5]],
        },
    ),
    "adv.grpo: the population std": (
        "adv.grpo",
        lambda mp: mutate(
            mp,
            _PPO,
            None,
            "compute_grpo_outcome_advantage",
            "id2std[idx] = torch.std(torch.tensor([id2score[idx]]))",
            "id2std[idx] = torch.std(torch.tensor([id2score[idx]]), unbiased=False)",
        ),
        {**_GROUPS, "params": {"norm_by_std": True}},
    ),
    "adv.rloo: no leave-one-out factor": (
        "adv.rloo",
        lambda mp: mutate(
            mp,
            _PPO,
            None,
            "compute_rloo_outcome_advantage",
            "factor = response_num / (response_num - 1)",
            "factor = 1.0",
        ),
        _GROUPS,
    ),
    "adv.reinforce_pp: gamma dropped": (
        "adv.reinforce_pp",
        lambda mp: mutate(
            mp,
            _PPO,
            None,
            "compute_reinforce_plus_plus_outcome_advantage",
            "running_return = token_level_rewards[:, t] + gamma * running_return",
            "running_return = token_level_rewards[:, t] + running_return",
        ),
        {**_RETURNS, "params": {"gamma": 0.5}},
    ),
    "adv.gae: lambda dropped": (
        "adv.gae",
        lambda mp: mutate(
            mp,
            _PPO,
            None,
            "compute_gae_advantage_return",
            "lastgaelam = delta + gamma * lambd * lastgaelam",
            "lastgaelam = delta + gamma * lastgaelam",
        ),
        {**_RETURNS, "params": {"gamma": 0.9, "lam": 0.5, "bootstrap": False}},
    ),
    "loss.ppo_clip: the pessimistic min turned into a max": (
        "loss.ppo_clip",
        lambda mp: mutate(
            mp,
            _PPO,
            None,
            "ppo_policy_loss",
            "loss = -torch.min(surr1, surr2)",
            "loss = -torch.max(surr1, surr2)",
        ),
        _loss_case(),
    ),
    "loss.dual_clip: the cap raised": (
        "loss.dual_clip",
        lambda mp: mutate(
            mp,
            _PPO,
            None,
            "ppo_policy_loss",
            "pg_losses3 = -advantages * config.clip_ratio_c",
            "pg_losses3 = -advantages * (config.clip_ratio_c + 1)",
        ),
        _loss_case(adv_s0=(-1.0, -1.0), clip_c=1.1),
    ),
    "loss.gspo: the sequence log-ratio over every column": (
        "loss.gspo",
        lambda mp: mutate(
            mp,
            _PPO,
            None,
            "gspo_policy_loss",
            "log_importance_weights = masked_mean(log_ratio, loss_mask, dim=-1)",
            "log_importance_weights = log_ratio.sum(dim=-1)",
        ),
        _loss_case(adv_s0=(1.0, 1.0)),
    ),
    "loss.cispo: the weight not detached": (
        "loss.cispo",
        lambda mp: mutate(
            mp,
            _PPO,
            None,
            "compute_policy_loss_cispo",
            "loss = -advantages * clamped_ratio.detach() * log_probs",
            "loss = -advantages * clamped_ratio * log_probs",
        ),
        _loss_case(),
    ),
    "loss.sapo: the temperatures swapped by the advantage's sign": (
        "loss.sapo",
        lambda mp: mutate(
            mp,
            _PPO,
            None,
            "sapo_policy_loss",
            "condition=advantages > 0,",
            "condition=advantages < 0,",
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
            _PPO,
            None,
            "ppo_critic_loss",
            "loss = torch.max(surr1, surr2)",
            "loss = torch.min(surr1, surr2)",
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
}


@pytest.mark.parametrize("name", sorted(PLANTS))
def test_plant_fails_its_clause_on_real_skyrl(skyrl, name, monkeypatch):
    clause_id, plant, case = PLANTS[name]
    replay(clause_id, skyrl, case)  # the unbroken code passes this case
    plant(monkeypatch)
    with pytest.raises(ClauseMismatch) as info:
        replay(clause_id, skyrl, case)
    assert f"[{clause_id}]" in str(info.value)


# -- the step: plants in the trainer's and the policy worker's own methods, each failing
# -- step.update under the default config on a batch the unbroken code passes

_WORKER = "skyrl.backends.skyrl_train.workers.worker"

STEP_PLANTS = {
    "the outcome reward placed on the first response token": (
        _TRAINER,
        "RayPPOTrainer",
        "postprocess_generator_output",
        "per_token_reward[-1] = float(reward)",
        "per_token_reward[0] = float(reward)",
    ),
    "GRPO's advantages not divided by the group std": (
        _TRAINER,
        "RayPPOTrainer",
        "compute_advantages_and_returns",
        'grpo_norm_by_std=self.cfg.trainer.algorithm.grpo_norm_by_std,\n        )\n    data["returns"]',
        'grpo_norm_by_std=False,\n        )\n    data["returns"]',
    ),
    "the KL term summed over the micro-batches, not weighted by their share": (
        _WORKER,
        "PolicyWorkerBase",
        "forward_backward",
        "microbatch_weight = len(microbatch) / len(data)",
        "microbatch_weight = 1.0",
    ),
}


def _step_case():
    from tests.step import by_hand as h

    # equal lengths (SkyRL's sequence-mean KL is the token mean there), two micro-batches
    return h.case(
        [
            h.sample("s0", [1, 1], 0.0, ref=[-0.5, -1.0]),
            h.sample("s1", [1, 1], 1.0, delta=0.05),
            h.sample("s2", [1, 1], 0.5, group="g1"),
            h.sample("s3", [1, 1], 0.0, group="g1", ref=[-1.5, -0.5]),
        ],
        [2, 2],
    )


@pytest.mark.parametrize("name", sorted(STEP_PLANTS))
def test_step_plant_fails_step_update(skyrl, name, monkeypatch):
    from rlconform.conformance.clauses import step

    module, owner, function, old, new = STEP_PLANTS[name]
    case = _step_case()
    token = step.select_configs(["default"])
    try:
        replay("step.update", skyrl, case)  # the unbroken code passes this case
        mutate(monkeypatch, module, owner, function, old, new)
        with pytest.raises(ClauseMismatch) as info:
            replay("step.update", skyrl, case)
    finally:
        step.reset_configs(token)
    assert "[step.update]" in str(info.value)

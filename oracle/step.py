"""Oracle for the CONTRACT area `step`: one training step, end to end (standard library only).

The chain is the contract's own functions composed in a trainer's order, on ragged samples
(no padding exists here):

1. ``token_rewards``: the score placed on one token (reward.place_last), minus
   beta * KL(old, ref) on action tokens when the config puts KL in the reward (kl.in_reward);
2. ``advantages`` / ``returns``: the config's estimator (adv.*) on those rewards;
3. ``per_token_loss``: the policy loss (loss.ppo_clip, dual clip with ``clip_ratio_c``;
   or loss.sapo's gate with ``sapo_tau_pos`` / ``sapo_tau_neg``), minus ``entropy_coeff`` * entropy, plus ``kl_loss_coef`` * KL(logp, ref) (loss.total);
4. ``loss``: the per-token loss aggregated over the whole mini-batch in the config's mode,
   with global denominators (agg.*): the value micro-batches and ranks must add up to;
5. the analytic gradient of that loss with respect to the current log-probs and entropies
   (and of the value loss with respect to the current values, when the config has a critic):
   zero at every non-action position.

``STEP_SETTINGS`` names every setting a trainer config gives in contract vocabulary, with its
default. ``train_step`` also returns the step's metrics (contract names) and the state a
trainer carries to the next step (the KL coefficient after its controller's update).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from rlconform.oracle import advantage as adv_oracle
from rlconform.oracle import aggregate as agg_oracle
from rlconform.oracle import kl as kl_oracle
from rlconform.oracle import loss as loss_oracle
from rlconform.oracle.errors import ContractError
from rlconform.oracle.reward import place_reward_last

CLAUSE = "step.update"

# Every setting of a trainer config, in contract vocabulary, and its default.
STEP_SETTINGS: dict[str, Any] = {
    "estimator": "grpo",  # adv.<estimator>: grpo, rloo, gae, reinforce_pp, reinforce_pp_baseline
    "norm_adv_by_std": True,  # adv.grpo: False is Dr. GRPO
    "gamma": 1.0,
    "lam": 1.0,
    "kl_in_reward": False,
    "kl_in_reward_estimator": "k1",
    "kl_coef": 0.001,  # the in-reward coefficient at the first step
    "kl_ctrl": "fixed",  # fixed | adaptive (kl.adaptive_controller)
    "kl_target": 0.1,
    "kl_horizon": 10000.0,
    "kl_loss": False,
    "kl_loss_estimator": "k3",
    "kl_loss_coef": 0.001,
    "policy_loss": "ppo_clip",  # ppo_clip (loss.ppo_clip / loss.dual_clip) | sapo (loss.sapo)
    "sapo_tau_pos": 1.0,  # loss.sapo's temperatures (policy_loss = sapo)
    "sapo_tau_neg": 1.05,
    "clip_low": 0.2,
    "clip_high": 0.2,
    "clip_ratio_c": None,  # dual clip on A < 0 when set (loss.dual_clip)
    "entropy_coeff": 0.0,
    "loss_agg_mode": "token-mean",
    "norm_length": None,  # seq-mean-token-sum-norm's constant length
    "critic": False,
    "cliprange_value": 0.5,  # None: the value loss is not clipped
    # gae / reinforce_pp: False leaves the advantages unwhitened (A = returns - V for GAE,
    # the returns for REINFORCE++), as ROLL's whiten_advantages=False
    "whiten_advantages": True,
    "value_loss_scale": 0.5,
    # the critic's aggregation mode; None: the actor's loss_agg_mode (verl's critic has its
    # own loss_agg_mode, SkyRL's critic loss is always a mean over sequences)
    "critic_loss_agg_mode": None,
    "micro_batch_size": 2,
    "dp_size": 1,
    # the trainer keeps no rollout log-probs: its old log-probs are the current policy's,
    # detached (one update per rollout, e.g. TRL with num_iterations = 1): ratio 1
    "on_policy": False,
}

ESTIMATORS = ("grpo", "rloo", "gae", "reinforce_pp", "reinforce_pp_baseline")
POLICY_LOSSES = ("ppo_clip", "sapo")


def resolve(settings: Mapping[str, Any]) -> dict[str, Any]:
    """The config's settings with every unset one at its default; unknown names refused."""
    unknown = sorted(set(settings) - set(STEP_SETTINGS))
    if unknown:
        raise ContractError(CLAUSE, f"unknown trainer-config settings {unknown}")
    resolved = dict(STEP_SETTINGS)
    resolved.update(settings)
    if resolved["estimator"] not in ESTIMATORS:
        raise ContractError(
            CLAUSE, f"estimator {resolved['estimator']!r} has no step oracle; one of {ESTIMATORS}"
        )
    if resolved["policy_loss"] not in POLICY_LOSSES:
        raise ContractError(
            CLAUSE,
            f"policy loss {resolved['policy_loss']!r} has no step oracle; one of {POLICY_LOSSES}",
        )
    if (
        resolved["policy_loss"] == "sapo"
        and min(resolved["sapo_tau_pos"], resolved["sapo_tau_neg"]) <= 0.0
    ):
        raise ContractError(CLAUSE, "loss.sapo's temperatures must be positive")
    if resolved["estimator"] == "gae" and not resolved["critic"]:
        raise ContractError(CLAUSE, "estimator gae needs a critic (critic = true)")
    critic_mode = resolved["critic_loss_agg_mode"]
    if critic_mode is not None and critic_mode not in agg_oracle.MODES:
        raise ContractError(
            CLAUSE, f"critic_loss_agg_mode {critic_mode!r}: one of {agg_oracle.MODES} or None"
        )
    if not resolved["whiten_advantages"] and resolved["estimator"] not in ("gae", "reinforce_pp"):
        raise ContractError(
            CLAUSE, f"whiten_advantages = false has no step oracle for {resolved['estimator']}"
        )
    return resolved


def unwhitened(
    estimator: str,
    returns: list[list[float]],
    samples: Sequence[Mapping[str, Any]],
) -> list[list[float]]:
    """The advantages before the batch whitening (adv.gae: returns - V on action tokens;
    adv.reinforce_pp: the returns), 0 at every other position."""
    rows = []
    for s, ret in zip(samples, returns):
        if estimator == "gae":
            rows.append([r - v if m else 0.0 for r, v, m in zip(ret, s["values"], s["mask"])])
        else:
            rows.append([r if m else 0.0 for r, m in zip(ret, s["mask"])])
    return rows


def as_run(samples: Sequence[Mapping[str, Any]], cfg: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The samples as the config's step reads them: under ``on_policy`` the old log-probs
    are the current ones (the trainer never kept the rollout's)."""
    if not cfg.get("on_policy"):
        return [dict(s) for s in samples]
    return [{**s, "old": list(s["logp"])} for s in samples]


def token_rewards(
    samples: Sequence[Mapping[str, Any]],
    cfg: Mapping[str, Any],
    choices: Mapping[str, Any],
    kl_coef: float,
) -> list[list[float]]:
    """Stage 1: the score on one token (reward.place_last), minus beta KL(old, ref) on action
    tokens when KL is in the reward (kl.in_reward)."""
    rows = []
    for s in samples:
        row, _ = place_reward_last(
            s["reward"],
            s["mask"],
            nonaction_tail=choices.get("reward_nonaction_tail", "last_token"),
        )
        if cfg["kl_in_reward"]:
            row = kl_oracle.kl_in_reward(
                row,
                s["old"],
                s["ref"],
                s["mask"],
                beta=kl_coef,
                mode=cfg["kl_in_reward_estimator"],
                ref_clamp=choices.get("kl_ref_clamp", 20.0),
                value_clamp=choices.get("k3_value_clamp", 10.0),
                uid=s["uid"],
            )
        rows.append(row)
    return rows


def advantages(
    rewards: list[list[float]],
    samples: Sequence[Mapping[str, Any]],
    cfg: Mapping[str, Any],
    choices: Mapping[str, Any],
) -> tuple[list[list[float]], list[list[float]]]:
    """Stage 2: (advantages, returns) of the config's estimator (adv.*) on ``rewards``."""
    masks = [s["mask"] for s in samples]
    groups = [s["group"] for s in samples]
    uids = [s["uid"] for s in samples]
    name = cfg["estimator"]
    degenerate = choices.get("whiten_degenerate", "zeros")
    std_eps = choices.get("whiten_std_eps")
    if name == "grpo":
        return adv_oracle.grpo(
            rewards,
            masks,
            groups,
            epsilon=choices.get("grpo_eps", 1e-6),
            norm_by_std=cfg["norm_adv_by_std"],
            std_ddof=choices.get("grpo_std_ddof", 1),
            singleton=choices.get("grpo_singleton", "mean0_std1"),
            uids=uids,
        )
    if name == "rloo":
        return adv_oracle.rloo(
            rewards, masks, groups, singleton=choices.get("rloo_singleton", "score"), uids=uids
        )
    if name == "reinforce_pp":
        adv, ret = adv_oracle.reinforce_pp(
            rewards,
            masks,
            gamma=cfg["gamma"],
            whiten_degenerate=degenerate,
            whiten_std_eps=std_eps,
            uids=uids,
        )
        return (adv if cfg["whiten_advantages"] else unwhitened(name, ret, samples)), ret
    if name == "reinforce_pp_baseline":
        return adv_oracle.reinforce_pp_baseline(
            rewards,
            masks,
            groups,
            whiten_degenerate=degenerate,
            whiten_std_eps=std_eps,
            uids=uids,
        )
    adv, ret = adv_oracle.gae(
        rewards,
        [s["values"] for s in samples],
        masks,
        [True] * len(samples),
        [0.0] * len(samples),
        gamma=cfg["gamma"],
        lam=cfg["lam"],
        whiten_degenerate=degenerate,
        whiten_std_eps=std_eps,
        uids=uids,
    )
    return (adv if cfg["whiten_advantages"] else unwhitened(name, ret, samples)), ret


def _agg(rows, masks, cfg) -> float:
    return agg_oracle.aggregate(rows, masks, cfg["loss_agg_mode"], norm_length=cfg["norm_length"])


def _token_mean(rows: list[list[float]], masks: list[list[int]]) -> float:
    values = [x for row, mask in zip(rows, masks) for x, m in zip(row, mask) if m]
    return math.fsum(values) / len(values) if values else 0.0


def _stats(rows: list[list[float]], masks: list[list[int]], name: str) -> dict[str, float]:
    values = [x for row, mask in zip(rows, masks) for x, m in zip(row, mask) if m]
    if not values:
        return {f"{name}/mean": 0.0, f"{name}/max": 0.0, f"{name}/min": 0.0}
    return {
        f"{name}/mean": math.fsum(values) / len(values),
        f"{name}/max": max(values),
        f"{name}/min": min(values),
    }


def _kl_clamps(choices: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "ref_clamp": choices.get("kl_ref_clamp", 20.0),
        "value_clamp": choices.get("k3_value_clamp", 10.0),
    }


def _policy_loss(cfg: Mapping[str, Any]) -> tuple[Any, Any, dict[str, Any]]:
    """The config's per-token policy loss, its gradient and their parameters."""
    if cfg["policy_loss"] == "sapo":
        params = {"tau_pos": cfg["sapo_tau_pos"], "tau_neg": cfg["sapo_tau_neg"]}
        return loss_oracle.sapo_loss, loss_oracle.sapo_grad, params
    params = {
        "clip_low": cfg["clip_low"],
        "clip_high": cfg["clip_high"],
        "dual_clip": cfg["clip_ratio_c"],
    }
    return loss_oracle.ppo_clip_loss, loss_oracle.ppo_clip_grad, params


def policy_terms(
    samples: Sequence[Mapping[str, Any]],
    advantage_rows: list[list[float]],
    cfg: Mapping[str, Any],
    choices: Mapping[str, Any],
) -> dict[str, Any]:
    """Stages 3-5 of the actor: per-token loss (loss.ppo_clip or loss.sapo - entropy_coeff H +
    kl_loss_coef KL, loss.total), the loss aggregated over the mini-batch (agg.*), and its gradient with
    respect to the current log-probs and entropies; plus the policy metrics."""
    masks = [list(s["mask"]) for s in samples]
    weights = agg_oracle.aggregate_gradient(
        masks, cfg["loss_agg_mode"], norm_length=cfg["norm_length"]
    )
    pg_rows, flag_rows, kl_rows, total_rows, entropy_rows = [], [], [], [], []
    grad_logp, grad_entropy = [], []
    policy_loss, policy_grad, params = _policy_loss(cfg)
    for s, a, w in zip(samples, advantage_rows, weights):
        pg, flags = policy_loss(s["old"], s["logp"], a, s["mask"], uid=s["uid"], **params)
        pg_grad = policy_grad(s["old"], s["logp"], a, s["mask"], w, uid=s["uid"], **params)
        if cfg["kl_loss"]:
            kl, kl_grad = kl_oracle.kl_penalty(
                s["logp"], s["ref"], cfg["kl_loss_estimator"], uid=s["uid"], **_kl_clamps(choices)
            )
            kl = [k if m else 0.0 for k, m in zip(kl, s["mask"])]
            kl_coef = cfg["kl_loss_coef"]
        else:
            kl, kl_grad, kl_coef = [0.0] * len(s["mask"]), [0.0] * len(s["mask"]), 0.0
        entropy = [h if m else 0.0 for h, m in zip(s["entropy"], s["mask"])]
        total = loss_oracle.actor_loss(
            pg,
            entropy,
            kl,
            s["mask"],
            entropy_coeff=cfg["entropy_coeff"],
            kl_coef=kl_coef,
            uid=s["uid"],
        )
        pg_rows.append(pg)
        flag_rows.append(flags)
        kl_rows.append(kl)
        entropy_rows.append(entropy)
        total_rows.append(total)
        grad_logp.append(
            [
                g + (kl_coef * wt * kg if m else 0.0)
                for g, wt, kg, m in zip(pg_grad, w, kl_grad, s["mask"])
            ]
        )
        grad_entropy.append(
            [-cfg["entropy_coeff"] * wt if m else 0.0 for wt, m in zip(w, s["mask"])]
        )
    metrics = {
        "policy_loss": _agg(pg_rows, masks, cfg),
        # the entropy term as the loss aggregates it, and the mean entropy of the batch's
        # action tokens (entropy.from_logits: no action token gives 0)
        "entropy": _agg(entropy_rows, masks, cfg),
        "entropy/mean": _token_mean(entropy_rows, masks),
        "clip_fraction": loss_oracle.clip_fraction(flag_rows, masks),
    }
    if cfg["kl_loss"]:
        metrics["kl_loss"] = _agg(kl_rows, masks, cfg)
        metrics["kl_loss/mean"] = _token_mean(kl_rows, masks)
    return {
        "per_token_loss": total_rows,
        "loss": _agg(total_rows, masks, cfg),
        "grad_logp": grad_logp,
        "grad_entropy": grad_entropy,
        "weights": weights,
        "metrics": metrics,
    }


def value_terms(
    samples: Sequence[Mapping[str, Any]], return_rows: list[list[float]], cfg: Mapping[str, Any]
) -> dict[str, Any]:
    """The critic's loss (loss.value_clip aggregated in ``critic_loss_agg_mode``, by default
    like the actor's) and its gradient with respect to the current values; ``value_weights``
    the aggregation's per-token weights."""
    masks = [list(s["mask"]) for s in samples]
    mode = cfg.get("critic_loss_agg_mode") or cfg["loss_agg_mode"]
    weights = agg_oracle.aggregate_gradient(masks, mode, norm_length=cfg["norm_length"])
    rows, flags, grads = [], [], []
    opts = {"clip": cfg["cliprange_value"], "scale": cfg["value_loss_scale"]}
    for s, ret, w in zip(samples, return_rows, weights):
        loss, flag = loss_oracle.value_clip_loss(
            s["vpreds"], ret, s["values"], s["mask"], uid=s["uid"], **opts
        )
        rows.append(loss)
        flags.append(flag)
        grads.append(
            loss_oracle.value_clip_grad(
                s["vpreds"], ret, s["values"], s["mask"], w, uid=s["uid"], **opts
            )
        )
    value_loss = agg_oracle.aggregate(rows, masks, mode, norm_length=cfg["norm_length"])
    return {
        "value_loss": value_loss,
        "grad_vpreds": grads,
        "value_weights": weights,
        "metrics": {
            "value_loss": value_loss,
            "value_clip_fraction": loss_oracle.clip_fraction(flags, masks),
        },
    }


def batch_metrics(
    samples: Sequence[Mapping[str, Any]],
    rewards: list[list[float]],
    advantage_rows: list[list[float]],
    return_rows: list[list[float]],
) -> dict[str, float]:
    """step.metrics of the batch: score, reward, advantage, return and length statistics."""
    masks = [list(s["mask"]) for s in samples]
    n = len(samples)
    metrics = {
        "score/mean": math.fsum(s["reward"] for s in samples) / n if n else 0.0,
        "reward/mean": math.fsum(math.fsum(r) for r in rewards) / n if n else 0.0,
        "response_length/mean": math.fsum(len(m) for m in masks) / n if n else 0.0,
    }
    metrics.update(_stats(advantage_rows, masks, "advantages"))
    metrics.update(_stats(return_rows, masks, "returns"))
    return metrics


def next_state(
    samples: Sequence[Mapping[str, Any]],
    cfg: Mapping[str, Any],
    choices: Mapping[str, Any],
    kl_coef: float,
) -> tuple[dict[str, float], float | None]:
    """step.state: the KL coefficient after the controller sees this step's in-reward KL
    (kl.in_reward metric, kl.adaptive_controller; n_steps = the batch's samples), and that
    KL (None when KL is not in the reward)."""
    if not cfg["kl_in_reward"]:
        return {"kl_coef": kl_coef}, None
    current = kl_oracle.kl_in_reward_metric(
        [s["old"] for s in samples],
        [s["ref"] for s in samples],
        [s["mask"] for s in samples],
        mode=cfg["kl_in_reward_estimator"],
        reduction=choices.get("kl_metric_reduction", "token_mean"),
        **_kl_clamps(choices),
    )
    coef = kl_oracle.kl_controller_update(
        cfg["kl_ctrl"],
        kl_coef,
        current,
        len(samples),
        target_kl=cfg["kl_target"],
        horizon=cfg["kl_horizon"],
    )
    return {"kl_coef": coef}, current


def train_step(
    samples: Sequence[Mapping[str, Any]],
    settings: Mapping[str, Any],
    *,
    choices: Mapping[str, Any] | None = None,
    kl_coef: float | None = None,
) -> dict[str, Any]:
    """step.update / step.metrics / step.state: the contract's result of one optimizer step.

    ``samples``: per sample ``uid``, ``group``, ``mask`` (loss mask, length L_i), ``reward``
    (the score), ``old``, ``ref``, ``logp`` (current), ``entropy``; with a critic ``values``
    (at rollout) and ``vpreds`` (current). ``choices``: the target's profile (std ddof,
    reward tail ...). ``kl_coef``: the in-reward coefficient this step uses (the state the
    previous step left; default the config's). Returns every stage, ``loss`` (and
    ``value_loss``), the gradients ``grad_logp`` / ``grad_entropy`` (/ ``grad_vpreds``) as
    ragged rows, ``metrics`` and ``state``.
    """
    cfg = resolve(settings)
    samples = as_run(samples, cfg)
    choices = dict(choices or {})
    coef = cfg["kl_coef"] if kl_coef is None else kl_coef
    rewards = token_rewards(samples, cfg, choices, coef)
    advantage_rows, return_rows = advantages(rewards, samples, cfg, choices)
    result: dict[str, Any] = {
        "token_rewards": rewards,
        "advantages": advantage_rows,
        "returns": return_rows,
    }
    actor = policy_terms(samples, advantage_rows, cfg, choices)
    metrics = batch_metrics(samples, rewards, advantage_rows, return_rows)
    metrics.update(actor.pop("metrics"))
    result.update(actor)
    if cfg["critic"]:
        critic = value_terms(samples, return_rows, cfg)
        metrics.update(critic.pop("metrics"))
        result.update(critic)
    state, current = next_state(samples, cfg, choices, coef)
    if current is not None:
        metrics["kl_in_reward"] = current
    result["metrics"] = metrics
    result["state"] = state
    return result

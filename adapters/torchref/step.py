"""torchref's training step (CONTRACT §2 `step`): its own operations composed as a trainer does.

Every stage is one of torchref's contract operations called through ``self`` (so a mutant
that replaces one operation changes the step exactly where a trainer's would):
``place_reward_last`` -> ``apply_kl_in_reward`` (KL in reward) -> ``advantage_<estimator>``
-> per micro-batch ``ppo_clip_loss`` (or ``sapo_loss``), ``kl_penalty`` (KL loss), ``actor_loss``, ``agg_loss``
with the mini-batch's global denominators (``agg_batch_info`` summed over micro-batches),
``backward``; the critic the same way with ``value_loss``; ``kl_controller_update`` carries the
in-reward coefficient to the next step.
"""

from __future__ import annotations

from typing import Any

import torch

from rlconform.adapters.step_io import StepBatch, StepOutput
from rlconform.conformance.trainer_config import TrainerConfig

# The configs torchref declares: the contract's defaults, and one config per option a
# shipped adapter binds (so that torchref and the oracle certify every step config).
TORCHREF_CONFIGS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("default", {}),
    (
        "dr_grpo",
        {"norm_adv_by_std": False, "loss_agg_mode": "seq-mean-token-sum-norm", "norm_length": 8.0},
    ),
    (
        "rloo_kl_loss",
        {
            "estimator": "rloo",
            "kl_loss": True,
            "kl_loss_estimator": "k3",
            "kl_loss_coef": 0.05,
            "entropy_coeff": 0.01,
        },
    ),
    (
        "reinforce_pp_kl_in_reward",
        {
            "estimator": "reinforce_pp",
            "kl_in_reward": True,
            "kl_coef": 0.05,
            "kl_ctrl": "adaptive",
            "kl_target": 0.01,
            "kl_horizon": 100.0,
            "loss_agg_mode": "seq-mean-token-mean",
        },
    ),
    (
        "ppo_gae",
        {"estimator": "gae", "critic": True, "gamma": 0.9, "lam": 0.8, "clip_ratio_c": 3.0},
    ),
    (
        "sapo",
        {
            "policy_loss": "sapo",
            "sapo_tau_pos": 1.0,
            "sapo_tau_neg": 1.05,
            "loss_agg_mode": "seq-mean-token-mean",
        },
    ),
    (
        "reinforce_pp_baseline_token_sum",
        {"estimator": "reinforce_pp_baseline", "loss_agg_mode": "seq-mean-token-sum"},
    ),
    (
        "gae_unwhitened_unclipped",
        {
            "estimator": "gae",
            "critic": True,
            "lam": 0.95,
            "whiten_advantages": False,
            "cliprange_value": None,
            "loss_agg_mode": "seq-mean-token-mean",
            "value_loss_scale": 1.0,  # slime's value loss has no 1/2
        },
    ),
)


def _rows(tensor: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    return tensor.index_select(0, index)


class StepOps:
    """The `step` operation of torchref."""

    def trainer_configs(self) -> list[TrainerConfig]:
        return [
            TrainerConfig(
                name, settings, native=dict(settings), source="torchref (contract defaults)"
            )
            for name, settings in TORCHREF_CONFIGS
        ]

    def _advantages(self, cfg: dict[str, Any], rewards: torch.Tensor, batch: StepBatch):
        mask = batch.loss_mask
        name = cfg["estimator"]
        if name == "grpo":
            return self.advantage_grpo(
                rewards,
                mask,
                batch.index,
                epsilon=self.profile.get("grpo_eps", 1e-6),
                norm_by_std=cfg["norm_adv_by_std"],
            )
        if name == "rloo":
            return self.advantage_rloo(rewards, mask, batch.index)
        if name == "reinforce_pp":
            adv, ret = self.advantage_reinforce_pp(rewards, mask, cfg["gamma"])
            return (adv if cfg["whiten_advantages"] else torch.where(mask.bool(), ret, 0.0)), ret
        if name == "reinforce_pp_baseline":
            return self.advantage_reinforce_pp_baseline(rewards, mask, batch.index)
        adv, ret = self.advantage_gae(rewards, batch.values, mask, cfg["gamma"], cfg["lam"])
        if not cfg["whiten_advantages"]:  # A = returns - V before the batch whitening
            adv = torch.where(mask.bool(), ret - batch.values, 0.0)
        return adv, ret

    def _policy(
        self,
        cfg: dict[str, Any],
        old: torch.Tensor,
        logp: torch.Tensor,
        advantages: torch.Tensor,
        mask: torch.Tensor,
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        """The config's per-token policy loss: ``sapo_loss`` or ``ppo_clip_loss``."""
        if cfg["policy_loss"] == "sapo":
            return self.sapo_loss(
                old,
                logp,
                advantages,
                mask,
                tau_pos=cfg["sapo_tau_pos"],
                tau_neg=cfg["sapo_tau_neg"],
            )
        return self.ppo_clip_loss(
            old,
            logp,
            advantages,
            mask,
            clip_ratio_low=cfg["clip_low"],
            clip_ratio_high=cfg["clip_high"],
            clip_ratio_c=cfg["clip_ratio_c"],
        )

    def train_step(
        self, batch: StepBatch, config: TrainerConfig, state: dict[str, Any] | None = None
    ) -> StepOutput:
        """step.update: one optimizer step of torchref's chain on ``batch``."""
        cfg = config.resolved
        coef = (state or {}).get("kl_coef", cfg["kl_coef"])
        mask = batch.loss_mask
        token_scores = self.place_reward_last(batch.scores, batch.response_mask, mask)
        metrics: dict[str, float] = {}
        if cfg["kl_in_reward"]:
            rewards, kl_metric = self.apply_kl_in_reward(
                token_scores,
                batch.old_log_probs,
                batch.ref_log_probs,
                mask,
                coef,
                cfg["kl_in_reward_estimator"],
            )
            metrics["kl_in_reward"] = float(kl_metric)
        else:
            rewards = token_scores
        advantages, returns = self._advantages(cfg, rewards, batch)
        info = {"batch_num_tokens": 0, "global_batch_size": 0}
        for rows in batch.micro_batches:
            part = self.agg_batch_info(_rows(mask, torch.tensor(rows, dtype=torch.long)))
            for key in info:
                info[key] += part[key]
        agg = {**info, "loss_scale_factor": cfg["norm_length"]}
        per_token = torch.zeros_like(batch.log_probs, dtype=batch.log_probs.dtype).detach()
        total_loss = torch.zeros((), dtype=batch.log_probs.dtype)
        value_loss = torch.zeros((), dtype=batch.log_probs.dtype) if cfg["critic"] else None
        sums = {
            "policy_loss": 0.0,
            "entropy": 0.0,
            "kl_loss": 0.0,
            "clipped": 0.0,
            "entropy_sum": 0.0,
            "kl_sum": 0.0,
            "vf": 0.0,
            "vclipped": 0.0,
        }
        for rows in batch.micro_batches:
            index = torch.tensor(rows, dtype=torch.long)
            m = _rows(mask, index)
            logp, ent = _rows(batch.log_probs, index), _rows(batch.entropy, index)
            pg, pg_metrics = self._policy(
                cfg, _rows(batch.old_log_probs, index), logp, _rows(advantages, index), m
            )
            if cfg["kl_loss"]:
                kl = self.kl_penalty(
                    logp, _rows(batch.ref_log_probs, index), cfg["kl_loss_estimator"]
                )
                kl_coef = cfg["kl_loss_coef"]
            else:
                kl, kl_coef = torch.zeros_like(logp), 0.0
            total, _ = self.actor_loss(
                pg, ent, kl, m, entropy_coeff=cfg["entropy_coeff"], kl_coef=kl_coef
            )
            loss = self.agg_loss(total, m, cfg["loss_agg_mode"], **agg)
            loss.backward()
            total_loss = total_loss + loss.detach()
            per_token[index] = total.detach()
            n_tokens = float(m.bool().sum())
            sums["policy_loss"] += float(self.agg_loss(pg.detach(), m, cfg["loss_agg_mode"], **agg))
            sums["entropy"] += float(self.agg_loss(ent.detach(), m, cfg["loss_agg_mode"], **agg))
            sums["kl_loss"] += float(self.agg_loss(kl.detach(), m, cfg["loss_agg_mode"], **agg))
            sums["clipped"] += float(pg_metrics.get("clipfrac", 0.0)) * n_tokens
            on = m.bool()
            sums["entropy_sum"] += float(ent.detach()[on].sum())
            sums["kl_sum"] += float(kl.detach()[on].sum())
            if cfg["critic"]:
                vl, v_metrics = self.scaled_value_loss(
                    _rows(batch.vpreds, index),
                    _rows(returns, index),
                    _rows(batch.values, index),
                    m,
                    cliprange_value=cfg["cliprange_value"],
                    scale=cfg["value_loss_scale"],  # the trainer config's, not the profile's
                )
                critic_mode = cfg["critic_loss_agg_mode"] or cfg["loss_agg_mode"]
                v = self.agg_loss(vl, m, critic_mode, **agg)
                v.backward()
                value_loss = value_loss + v.detach()
                sums["vclipped"] += float(v_metrics["vf_clipfrac"]) * n_tokens
        tokens = max(info["batch_num_tokens"], 1)
        metrics.update(_batch_metrics(batch, rewards, advantages, returns))
        metrics["policy_loss"] = sums["policy_loss"]
        metrics["entropy"] = sums["entropy"]
        metrics["entropy/mean"] = sums["entropy_sum"] / tokens
        metrics["clip_fraction"] = sums["clipped"] / tokens
        if cfg["kl_loss"]:
            metrics["kl_loss"] = sums["kl_loss"]
            metrics["kl_loss/mean"] = sums["kl_sum"] / tokens
        if cfg["critic"]:
            metrics["value_loss"] = float(value_loss)
            metrics["value_clip_fraction"] = sums["vclipped"] / tokens
        next_coef = coef
        if cfg["kl_in_reward"]:
            next_coef = self.kl_controller_update(
                cfg["kl_ctrl"],
                coef,
                metrics["kl_in_reward"],
                len(batch.uids),
                cfg["kl_target"],
                cfg["kl_horizon"],
            )
        return StepOutput(
            loss=float(total_loss),
            value_loss=None if value_loss is None else float(value_loss),
            stages={
                "token_rewards": rewards.detach(),
                "advantages": advantages.detach(),
                "returns": returns.detach(),
                "per_token_loss": per_token,
            },
            metrics=metrics,
            state={"kl_coef": float(next_coef)},
        )


def _stats(values: torch.Tensor, mask: torch.Tensor, name: str) -> dict[str, float]:
    picked = values.detach()[mask.bool()].to(torch.float64)
    if picked.numel() == 0:
        return {f"{name}/mean": 0.0, f"{name}/max": 0.0, f"{name}/min": 0.0}
    return {
        f"{name}/mean": float(picked.mean()),
        f"{name}/max": float(picked.max()),
        f"{name}/min": float(picked.min()),
    }


def _batch_metrics(batch: StepBatch, rewards, advantages, returns) -> dict[str, float]:
    n = len(batch.uids)
    lengths = batch.response_mask.sum(-1).to(torch.float64)
    metrics = {
        "score/mean": float(batch.scores.to(torch.float64).mean()) if n else 0.0,
        "reward/mean": float(
            (rewards.detach().to(torch.float64) * batch.response_mask).sum(-1).mean()
        )
        if n
        else 0.0,
        "response_length/mean": float(lengths.mean()) if n else 0.0,
    }
    metrics.update(_stats(advantages, batch.loss_mask, "advantages"))
    metrics.update(_stats(returns, batch.loss_mask, "returns"))
    return metrics

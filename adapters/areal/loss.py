"""AReaL bindings of `loss.ppo_clip`, `loss.dual_clip`, `loss.gspo`, `loss.sapo` and
`loss.value_clip`.

``PPOActor._ppo_update`` hands each micro-batch to ``engine.train_batch`` with
``functools.partial(grpo_loss_fn, eps_clip=..., eps_clip_higher=..., c_clip=...,
importance_sampling_level=..., ...)``; the engine packs the micro-batch (1-D, with
``cu_seqlens``) and calls it on the current log-probs. ``grpo_loss_fn`` resolves the
proximal log-probs (without the decoupled loss they are the old ones: ``_compute_advantages``
sets ``prox_logp`` to them) and calls ``ppo_actor_loss_fn``, which returns the masked mean
of its per-token loss: the per-token loss the contract compares is that function's local
``pg_loss`` before the mean (``frame_trace.last_per_token``). With ``use_sapo_loss=True``
``grpo_loss_fn`` calls ``sapo_loss_fn`` instead, read the same way (it logs no clip ratio). The critic's ``ppo_loss_fn`` calls
``ppo_critic_loss_fn`` the same way (local ``value_loss``, AReaL's 0.5 * squared error).
Clip fractions are the ``clip_ratio`` statistic the functions log (``stats_tracker``, mean
over the valid tokens).

A micro-batch without a loss-mask token never reaches the loss function: the engine's
``_compute_logprobs_and_loss`` returns ``logits.mean() * 0.0`` when its ``loss_weight_fn``
(``loss_mask.count_nonzero()``) is 0. The bindings take that branch the same way: a zero
per-token loss, connected to the inputs with a zero gradient, and no logged clip fraction
(reported as 0).
"""

from __future__ import annotations

from typing import Any

import torch

from rlconform.adapters.areal.layout import Packed
from rlconform.adapters.base import Unsupported
from rlconform.adapters.frame_trace import last_per_token

# What the model computes at the position after a sample's last token (loss_mask 0).
AFTER_LOGPROB = -1.0


class LossBindings:
    """The loss-area operations (module docstring)."""

    runtime: Any

    @staticmethod
    def _skipped(current: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor | None:
        """The engine's ``local_weight == 0`` branch (module docstring), or None."""
        if int(response_mask.count_nonzero()):
            return None
        return torch.where(response_mask.bool(), current, torch.zeros_like(current)) * 0.0

    @staticmethod
    def _clip_fraction(stats: dict[str, float], metric: str) -> torch.Tensor:
        key = "rlconform/clip_ratio/avg"
        if key not in stats:
            raise RuntimeError(f"AReaL logged no clip_ratio ({metric}): got {sorted(stats)}")
        return torch.tensor(stats[key], dtype=torch.float64)

    def _statistics(self, scope: str, run: Any) -> tuple[Any, dict[str, float]]:
        tracker = self.runtime.stats_tracker
        tracker.export(reset=True)  # nothing left over from an earlier call
        with tracker.scope(scope):
            value = run()
        return value, tracker.export(reset=True)

    def _actor(
        self,
        old: torch.Tensor,
        log_prob: torch.Tensor,
        advantages: torch.Tensor,
        response_mask: torch.Tensor,
        *,
        eps_clip: float,
        eps_clip_higher: float,
        c_clip: float | None,
        level: str,
        sapo: tuple[float, float] | None = None,
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        """``sapo``: (tau_pos, tau_neg) for ``use_sapo_loss=True``, else the PPO loss."""
        skipped = self._skipped(log_prob, response_mask)
        if skipped is not None:
            return skipped, {} if sapo else {"clipfrac": torch.tensor(0.0, dtype=torch.float64)}
        packed = Packed.of(response_mask)
        old_packed = packed.pack(old.detach(), AFTER_LOGPROB)
        data = {
            "logprobs": old_packed,
            "prox_logp": old_packed,
            "advantages": packed.pack(advantages, 0.0),
            "loss_mask": packed.pack(response_mask.to(torch.int64), 0),
            "cu_seqlens": packed.cu_seqlens,
        }
        current = packed.pack(log_prob, AFTER_LOGPROB)

        functional = self.runtime.functional
        loss_fn = functional.sapo_loss_fn if sapo else functional.ppo_actor_loss_fn
        options = (
            {"use_sapo_loss": True, "sapo_tau_pos": sapo[0], "sapo_tau_neg": sapo[1]}
            if sapo
            else {}
        )

        def run() -> Any:
            with last_per_token(loss_fn, "pg_loss") as seen:
                self.runtime.actor.grpo_loss_fn(
                    current,
                    torch.zeros_like(current),
                    data,
                    eps_clip=eps_clip,
                    eps_clip_higher=eps_clip_higher,
                    c_clip=c_clip,
                    importance_sampling_level=level,
                    **options,
                )
            return seen["pg_loss"]

        per_token, stats = self._statistics("rlconform", run)
        loss = packed.unpack(per_token, response_mask.shape[-1])
        if sapo:
            return loss, {}
        return loss, {"clipfrac": self._clip_fraction(stats, "clipfrac")}

    def ppo_clip_loss(
        self,
        old_log_prob: torch.Tensor,
        log_prob: torch.Tensor,
        advantages: torch.Tensor,
        response_mask: torch.Tensor,
        *,
        clip_ratio_low: float,
        clip_ratio_high: float,
        clip_ratio_c: float | None = None,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """loss.ppo_clip / loss.dual_clip: ``eps_clip`` / ``eps_clip_higher`` / ``c_clip``,
        ``importance_sampling_level="token"``."""
        return self._actor(
            old_log_prob,
            log_prob,
            advantages,
            response_mask,
            eps_clip=clip_ratio_low,
            eps_clip_higher=clip_ratio_high,
            c_clip=clip_ratio_c,
            level="token",
        )

    def gspo_loss(
        self,
        old_log_prob: torch.Tensor,
        log_prob: torch.Tensor,
        advantages: torch.Tensor,
        response_mask: torch.Tensor,
        *,
        clip_ratio_low: float,
        clip_ratio_high: float,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """loss.gspo: ``importance_sampling_level="sequence"`` (the geometric-mean ratio and
        the sequence-mean advantage over each packed sequence's valid tokens)."""
        return self._actor(
            old_log_prob,
            log_prob,
            advantages,
            response_mask,
            eps_clip=clip_ratio_low,
            eps_clip_higher=clip_ratio_high,
            c_clip=None,
            level="sequence",
        )

    def sapo_loss(
        self,
        old_log_prob: torch.Tensor,
        log_prob: torch.Tensor,
        advantages: torch.Tensor,
        response_mask: torch.Tensor,
        *,
        tau_pos: float,
        tau_neg: float,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """loss.sapo: ``use_sapo_loss=True``, ``sapo_tau_pos`` / ``sapo_tau_neg``,
        ``importance_sampling_level="token"`` (the clip settings are not read)."""
        return self._actor(
            old_log_prob,
            log_prob,
            advantages,
            response_mask,
            eps_clip=0.2,
            eps_clip_higher=None,
            c_clip=None,
            level="token",
            sapo=(float(tau_pos), float(tau_neg)),
        )

    def value_loss(
        self,
        vpreds: torch.Tensor,
        returns: torch.Tensor,
        values: torch.Tensor,
        response_mask: torch.Tensor,
        *,
        cliprange_value: float | None,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """loss.value_clip: the critic's ``ppo_loss_fn(value, input_data, eps_clip)``."""
        if cliprange_value is None:
            raise Unsupported("AReaL's critic always clips its values (eps_clip is a float)")
        skipped = self._skipped(vpreds, response_mask)
        if skipped is not None:
            return skipped, {"vf_clipfrac": torch.tensor(0.0, dtype=torch.float64)}
        packed = Packed.of(response_mask)
        data = {
            "values": packed.pack(values.detach().float(), 0.0),
            "returns": packed.pack(returns.detach().float(), 0.0),
            "loss_mask": packed.pack(response_mask.to(torch.int64), 0),
            "cu_seqlens": packed.cu_seqlens,
        }
        current = packed.pack(vpreds, 0.0)

        def run() -> Any:
            with last_per_token(self.runtime.functional.ppo_critic_loss_fn, "value_loss") as seen:
                self.runtime.critic.ppo_loss_fn(current, data, eps_clip=cliprange_value)
            return seen["value_loss"]

        per_token, stats = self._statistics("rlconform", run)
        loss = packed.unpack(per_token, response_mask.shape[-1])
        return loss, {"vf_clipfrac": self._clip_fraction(stats, "vf_clipfrac")}

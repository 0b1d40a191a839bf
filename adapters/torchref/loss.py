"""torchref operations for the CONTRACT area `loss` (vectorized torch, any device).

Every policy loss has the signature ``(old_log_prob, log_prob, advantages, response_mask,
*, clip_ratio_low, clip_ratio_high, ...) -> (loss (B, T), metrics)``, where
``response_mask`` is 1 on action tokens. Inputs are replaced by 0 off the action tokens
before any arithmetic, so padding garbage (NaN, inf) reaches neither the loss nor the
gradient; the returned loss is 0 there.
"""

from __future__ import annotations

from typing import Any

import torch

from rlconform.adapters.base import POLICY_LOSS_OPS

LOG_RATIO_CLAMP = 20.0


def _on_actions(action: torch.Tensor, *tensors: torch.Tensor) -> list[torch.Tensor]:
    """Each tensor with every non-action position replaced by 0 (gradient 0 there)."""
    return [torch.where(action, t, torch.zeros_like(t)) for t in tensors]


def _share(flags: torch.Tensor, action: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Fraction of action tokens whose flag is set (0 when there are none)."""
    count = action.sum().clamp_min(1).to(dtype)
    return (flags & action).sum().to(dtype) / count


def _ppo_terms(
    adv: torch.Tensor, ratio: torch.Tensor, clip_low: float, clip_high: float
) -> tuple[torch.Tensor, torch.Tensor]:
    unclipped = -adv * ratio
    clipped = -adv * torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    return torch.maximum(unclipped, clipped), clipped > unclipped


class LossOps:
    """Vectorized `loss` operations in the canonical padded layout."""

    def policy_loss_reduced(
        self,
        mode: str,
        old_log_prob: torch.Tensor,
        log_prob: torch.Tensor,
        advantages: torch.Tensor,
        response_mask: torch.Tensor,
        *,
        clip_ratio_low: float,
        clip_ratio_high: float,
        clip_ratio_c: float | None = None,
        global_batch_info: dict[str, Any],
    ) -> torch.Tensor:
        """The policy loss ``mode`` of one micro-batch reduced to its scalar as a trainer
        does: the per-token loss through ``agg_loss`` in the profile's ``loss_agg_mode``
        (default token-mean) with the mini-batch's global denominators."""
        op, takes_c = POLICY_LOSS_OPS[mode]
        extra = {"clip_ratio_c": clip_ratio_c} if takes_c and clip_ratio_c is not None else {}
        loss, _ = getattr(self, op)(
            old_log_prob,
            log_prob,
            advantages,
            response_mask,
            clip_ratio_low=clip_ratio_low,
            clip_ratio_high=clip_ratio_high,
            **extra,
        )
        agg_mode = self.profile.get("loss_agg_mode", "token-mean")
        return self.agg_loss(loss, response_mask, agg_mode, **global_batch_info)

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
        """loss.ppo_clip / loss.dual_clip (dual clip on A < 0 when clip_ratio_c is set)."""
        action = response_mask.bool()
        old, lp, adv = _on_actions(action, old_log_prob, log_prob, advantages)
        ratio = torch.exp(torch.clamp(lp - old, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))
        loss, clipped = _ppo_terms(adv, ratio, clip_ratio_low, clip_ratio_high)
        if clip_ratio_c is not None:
            loss = torch.where(adv < 0, torch.minimum(loss, -adv * clip_ratio_c), loss)
        loss = torch.where(action, loss, torch.zeros_like(loss))
        return loss, {"clipfrac": _share(clipped, action, log_prob.dtype)}

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
        """loss.gspo: token ratio exp(lp - sg(lp) + sg(s)), s the sequence mean log-ratio."""
        action = response_mask.bool()
        old, lp, adv = _on_actions(action, old_log_prob, log_prob, advantages)
        count = action.sum(-1, keepdim=True).clamp_min(1)
        sequence = (lp - old).sum(-1, keepdim=True) / count
        log_ratio = lp - lp.detach() + sequence.detach()
        limit = self.profile.get("gspo_log_ratio_max", 10.0)
        ratio = torch.exp(log_ratio if limit is None else torch.clamp(log_ratio, max=limit))
        loss, clipped = _ppo_terms(adv, ratio, clip_ratio_low, clip_ratio_high)
        loss = torch.where(action, loss, torch.zeros_like(loss))
        return loss, {"clipfrac": _share(clipped, action, log_prob.dtype)}

    def gmpo_loss(
        self,
        old_log_prob: torch.Tensor,
        log_prob: torch.Tensor,
        advantages: torch.Tensor,
        response_mask: torch.Tensor,
        *,
        clip_ratio_low: float,
        clip_ratio_high: float,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """loss.gmpo: -mean(A) * exp(mean of sign-aware clipped log-ratios) on each action token."""
        action = response_mask.bool()
        old, lp, adv = _on_actions(action, old_log_prob, log_prob, advantages)
        bound = self.profile.get("gmpo_log_ratio_clamp", LOG_RATIO_CLAMP)
        log_ratio = lp - old if bound is None else torch.clamp(lp - old, -bound, bound)
        upper = torch.clamp(log_ratio, max=clip_ratio_high)
        lower = torch.clamp(log_ratio, min=-clip_ratio_low)
        zero = torch.zeros_like(log_ratio)
        signed = torch.where(adv > 0, upper, torch.where(adv < 0, lower, zero))
        count = action.sum(-1, keepdim=True).clamp_min(1)
        ratio = torch.exp(torch.where(action, signed, zero).sum(-1, keepdim=True) / count)
        adv_mean = adv.sum(-1, keepdim=True) / count
        loss = torch.where(action, -adv_mean * ratio, zero)
        clipped = ((adv > 0) & (log_ratio > clip_ratio_high)) | (
            (adv < 0) & (log_ratio < -clip_ratio_low)
        )
        return loss, {"clipfrac": _share(clipped, action, log_prob.dtype)}

    def cispo_loss(
        self,
        old_log_prob: torch.Tensor,
        log_prob: torch.Tensor,
        advantages: torch.Tensor,
        response_mask: torch.Tensor,
        *,
        clip_ratio_low: float,
        clip_ratio_high: float,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """loss.cispo: -sg(clamp(r, 1 - low, 1 + high)) * A * log_prob."""
        action = response_mask.bool()
        old, lp, adv = _on_actions(action, old_log_prob, log_prob, advantages)
        ratio = torch.exp(torch.clamp(lp - old, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)).detach()
        weight = torch.clamp(ratio, 1.0 - clip_ratio_low, 1.0 + clip_ratio_high)
        loss = torch.where(action, -weight * adv * lp, torch.zeros_like(lp))
        return loss, {"clipfrac": _share(weight != ratio, action, log_prob.dtype)}

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
        """loss.sapo: -A * (4 / tau) * sigmoid(tau * (r - 1)), tau by the sign of A; no metrics."""
        action = response_mask.bool()
        old, lp, adv = _on_actions(action, old_log_prob, log_prob, advantages)
        ratio = torch.exp(torch.clamp(lp - old, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))
        tau = torch.where(adv > 0, tau_pos, tau_neg).to(lp.dtype)
        gate = torch.sigmoid(tau * (ratio - 1.0)) * (4.0 / tau)
        loss = torch.where(action, -gate * adv, torch.zeros_like(lp))
        return loss, {}

    def dppo_tv_loss(
        self,
        old_log_prob: torch.Tensor,
        log_prob: torch.Tensor,
        advantages: torch.Tensor,
        response_mask: torch.Tensor,
        *,
        clip_ratio_low: float,
        clip_ratio_high: float,
        clip_ratio_c: float,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """loss.dppo_tv: -A * sg(min(r, c)) * log_prob inside the TV trust region, else 0."""
        action = response_mask.bool()
        old, lp, adv = _on_actions(action, old_log_prob, log_prob, advantages)
        gap = torch.exp(lp) - torch.exp(old)
        inside = torch.where(adv > 0, gap <= clip_ratio_high, gap >= -clip_ratio_low).detach()
        ratio = torch.exp(torch.clamp(lp - old, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))
        weight = torch.clamp(ratio, max=clip_ratio_c).detach()
        loss = torch.where(action & inside, -adv * weight * lp, torch.zeros_like(lp))
        return loss, {"clipfrac": _share(~inside, action, log_prob.dtype)}

    def value_loss(
        self,
        vpreds: torch.Tensor,
        returns: torch.Tensor,
        values: torch.Tensor,
        response_mask: torch.Tensor,
        *,
        cliprange_value: float | None,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """loss.value_clip: scale * max((v - R)^2, (clamp(v, v_old -+ c) - R)^2) with the
        profile's ``value_loss_scale``; c None: unclipped."""
        scale = self.profile.get("value_loss_scale", 0.5)
        return self.scaled_value_loss(
            vpreds, returns, values, response_mask, cliprange_value=cliprange_value, scale=scale
        )

    def scaled_value_loss(
        self,
        vpreds: torch.Tensor,
        returns: torch.Tensor,
        values: torch.Tensor,
        response_mask: torch.Tensor,
        *,
        cliprange_value: float | None,
        scale: float,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """``value_loss`` with an explicit ``scale`` (the step passes its trainer config's)."""
        action = response_mask.bool()
        v, ret, v_old = _on_actions(action, vpreds, returns, values)
        if cliprange_value is None:
            v_clip = v
        else:
            v_clip = torch.clamp(v, v_old - cliprange_value, v_old + cliprange_value)
        plain, clipped = (v - ret) ** 2, (v_clip - ret) ** 2
        loss = torch.where(action, scale * torch.maximum(plain, clipped), torch.zeros_like(v))
        return loss, {"vf_clipfrac": _share(clipped > plain, action, vpreds.dtype)}

    def actor_loss(
        self,
        pg_loss: torch.Tensor,
        entropy: torch.Tensor,
        kl: torch.Tensor,
        response_mask: torch.Tensor,
        *,
        entropy_coeff: float,
        kl_coef: float,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """loss.total / loss.entropy_bonus: pg - c_ent H + c_kl KL, terms reported separately."""
        action = response_mask.bool()
        pg, ent, kl_term = _on_actions(action, pg_loss, entropy, kl)
        total = torch.where(
            action, pg - entropy_coeff * ent + kl_coef * kl_term, torch.zeros_like(pg)
        )
        count = action.sum().clamp_min(1)
        terms = {
            "pg_loss": pg.sum() / count,
            "entropy": ent.sum() / count,
            "kl_loss": kl_term.sum() / count,
        }
        return total, {name: value.detach() for name, value in terms.items()}

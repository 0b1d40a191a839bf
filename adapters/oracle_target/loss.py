"""Oracle-target operations for `loss`: padded tensors -> ragged lists -> oracle -> padded.

The oracle never reads non-action tokens, so each padded row goes to it whole, with the
action mask. Losses come back through a small autograd.Function whose backward is the
oracle's analytic vector-Jacobian product, so the suite compares gradients too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from rlconform.adapters.base import POLICY_LOSS_OPS
from rlconform.adapters.oracle_target._convert import binary_rows, pad_like
from rlconform.conformance.harness import to_float_list
from rlconform.oracle import loss as oracle_loss

Rows = list[list[float]]


class _OracleGradient(torch.autograd.Function):
    """Returns ``output``; backward maps the upstream gradient through ``vjp`` (the oracle)."""

    @staticmethod
    def forward(
        ctx: Any,
        vjp: Callable[[Rows], tuple[Rows, ...]],
        output: torch.Tensor,
        *inputs: torch.Tensor,
    ):
        ctx.vjp = vjp
        ctx.like = inputs[0]
        return output.clone()

    @staticmethod
    def backward(ctx: Any, grad_output: torch.Tensor):
        grads = [pad_like(rows, ctx.like) for rows in ctx.vjp(to_float_list(grad_output))]
        return (None, None, *grads)


def _rows(tensor: torch.Tensor) -> Rows:
    return [list(row) for row in to_float_list(tensor)]


def _scalar(value: float, like: torch.Tensor) -> torch.Tensor:
    return torch.tensor(value, dtype=like.dtype, device=like.device)


class LossOps:
    """`loss` operations that delegate to `rlconform.oracle.loss`."""

    def _policy(
        self,
        loss_fn: Callable[..., tuple[list[float], list[bool]]],
        grad_fn: Callable[..., list[float]],
        old_log_prob: torch.Tensor,
        log_prob: torch.Tensor,
        advantages: torch.Tensor,
        response_mask: torch.Tensor,
        **params: Any,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        old, logp, adv = _rows(old_log_prob), _rows(log_prob), _rows(advantages)
        masks = binary_rows(response_mask)
        results = [loss_fn(*row, **params) for row in zip(old, logp, adv, masks, strict=True)]

        def vjp(weights: Rows) -> tuple[Rows]:
            return (
                [
                    grad_fn(*row, **params)
                    for row in zip(old, logp, adv, masks, weights, strict=True)
                ],
            )

        loss = _OracleGradient.apply(vjp, pad_like([r[0] for r in results], log_prob), log_prob)
        clipfrac = oracle_loss.clip_fraction([r[1] for r in results], masks)
        return loss, {"clipfrac": _scalar(clipfrac, log_prob)}

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
        old_log_prob,
        log_prob,
        advantages,
        response_mask,
        *,
        clip_ratio_low,
        clip_ratio_high,
        clip_ratio_c=None,
    ):
        return self._policy(
            oracle_loss.ppo_clip_loss,
            oracle_loss.ppo_clip_grad,
            old_log_prob,
            log_prob,
            advantages,
            response_mask,
            clip_low=clip_ratio_low,
            clip_high=clip_ratio_high,
            dual_clip=clip_ratio_c,
        )

    def gspo_loss(
        self, old_log_prob, log_prob, advantages, response_mask, *, clip_ratio_low, clip_ratio_high
    ):
        return self._policy(
            oracle_loss.gspo_loss,
            oracle_loss.gspo_grad,
            old_log_prob,
            log_prob,
            advantages,
            response_mask,
            clip_low=clip_ratio_low,
            clip_high=clip_ratio_high,
            log_ratio_max=self.profile.get("gspo_log_ratio_max", 10.0),
        )

    def gmpo_loss(
        self, old_log_prob, log_prob, advantages, response_mask, *, clip_ratio_low, clip_ratio_high
    ):
        return self._policy(
            oracle_loss.gmpo_loss,
            oracle_loss.gmpo_grad,
            old_log_prob,
            log_prob,
            advantages,
            response_mask,
            clip_low=clip_ratio_low,
            clip_high=clip_ratio_high,
            log_ratio_clamp=self.profile.get("gmpo_log_ratio_clamp", oracle_loss.LOG_RATIO_CLAMP),
        )

    def cispo_loss(
        self, old_log_prob, log_prob, advantages, response_mask, *, clip_ratio_low, clip_ratio_high
    ):
        return self._policy(
            oracle_loss.cispo_loss,
            oracle_loss.cispo_grad,
            old_log_prob,
            log_prob,
            advantages,
            response_mask,
            clip_low=clip_ratio_low,
            clip_high=clip_ratio_high,
        )

    def sapo_loss(self, old_log_prob, log_prob, advantages, response_mask, *, tau_pos, tau_neg):
        loss, _ = self._policy(
            oracle_loss.sapo_loss,
            oracle_loss.sapo_grad,
            old_log_prob,
            log_prob,
            advantages,
            response_mask,
            tau_pos=tau_pos,
            tau_neg=tau_neg,
        )
        return loss, {}

    def dppo_tv_loss(
        self,
        old_log_prob,
        log_prob,
        advantages,
        response_mask,
        *,
        clip_ratio_low,
        clip_ratio_high,
        clip_ratio_c,
    ):
        return self._policy(
            oracle_loss.dppo_tv_loss,
            oracle_loss.dppo_tv_grad,
            old_log_prob,
            log_prob,
            advantages,
            response_mask,
            clip_low=clip_ratio_low,
            clip_high=clip_ratio_high,
            ratio_cap=clip_ratio_c,
        )

    def value_loss(self, vpreds, returns, values, response_mask, *, cliprange_value):
        v, ret, v_old = _rows(vpreds), _rows(returns), _rows(values)
        masks = binary_rows(response_mask)
        params = {"clip": cliprange_value, "scale": self.profile.get("value_loss_scale", 0.5)}
        results = [
            oracle_loss.value_clip_loss(*row, **params)
            for row in zip(v, ret, v_old, masks, strict=True)
        ]

        def vjp(weights: Rows) -> tuple[Rows]:
            return (
                [
                    oracle_loss.value_clip_grad(*row, **params)
                    for row in zip(v, ret, v_old, masks, weights, strict=True)
                ],
            )

        loss = _OracleGradient.apply(vjp, pad_like([r[0] for r in results], vpreds), vpreds)
        clipfrac = oracle_loss.clip_fraction([r[1] for r in results], masks)
        return loss, {"vf_clipfrac": _scalar(clipfrac, vpreds)}

    def actor_loss(self, pg_loss, entropy, kl, response_mask, *, entropy_coeff, kl_coef):
        pg, ent, kl_rows = _rows(pg_loss), _rows(entropy), _rows(kl)
        masks = binary_rows(response_mask)
        coefs = {"entropy_coeff": entropy_coeff, "kl_coef": kl_coef}
        rows = [
            oracle_loss.actor_loss(*row, **coefs)
            for row in zip(pg, ent, kl_rows, masks, strict=True)
        ]

        def vjp(weights: Rows) -> tuple[Rows, Rows, Rows]:
            per_row = [
                oracle_loss.actor_loss_grad(m, w, **coefs)
                for m, w in zip(masks, weights, strict=True)
            ]
            return tuple([row[k] for row in per_row] for k in range(3))

        total = _OracleGradient.apply(vjp, pad_like(rows, pg_loss), pg_loss, entropy, kl)
        terms = {
            "pg_loss": oracle_loss.action_token_mean(pg, masks),
            "entropy": oracle_loss.action_token_mean(ent, masks),
            "kl_loss": oracle_loss.action_token_mean(kl_rows, masks),
        }
        return total, {name: _scalar(value, pg_loss) for name, value in terms.items()}

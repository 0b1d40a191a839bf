"""SkyRL bindings of `loss.ppo_clip`, `loss.dual_clip`, `loss.gspo`, `loss.cispo`,
`loss.sapo` and `loss.value_clip`.

The policy worker (``PolicyWorkerBase._forward_backward_micro``) calls
``PolicyLossRegistry.get(algorithm.policy_loss_type)(action_log_probs, old_action_log_probs,
advantages, config=algorithm, loss_mask=loss_mask, rollout_logprobs=...)``; every policy loss
builds its per-token loss, passes it through ``apply_off_policy_correction`` (a no-op
without rollout log-probs) and returns ``reduce_loss(loss, loss_mask)``, the masked **sum**
(the mean comes from advantages pre-scaled by the trainer: ``aggregate.py``). The per-token
loss the contract compares is the ``loss`` that call receives: ``per_token_loss`` wraps
``ppo_utils.reduce_loss`` for the duration of one call and records its arguments, the
returned value is SkyRL's own. Clip fractions are the ``clip_ratio`` metric each loss
returns (a masked mean over ``loss_mask``). The critic worker calls ``ppo_critic_loss``
(``values, old_values, returns, config, loss_mask``): its per-token loss is read off the
function's frame (``frame_trace``), its clip fraction is the one it returns.

The inputs are right-aligned first (``layout.RightAligned``), as the worker holds them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

from rlconform.adapters.frame_trace import last_per_token
from rlconform.adapters.skyrl.layout import RightAligned


@contextlib.contextmanager
def per_token_loss(ppo_utils: Any) -> Iterator[dict[str, torch.Tensor]]:
    """Inside the block, ``seen["loss"]`` / ``seen["loss_mask"]`` are the arguments of the
    last ``ppo_utils.reduce_loss`` call (the function itself still computes the result)."""
    original = ppo_utils.reduce_loss
    seen: dict[str, torch.Tensor] = {}

    def recording(loss: torch.Tensor, loss_mask: torch.Tensor | None) -> torch.Tensor:
        seen["loss"], seen["loss_mask"] = loss, loss_mask
        return original(loss, loss_mask)

    ppo_utils.reduce_loss = recording
    try:
        yield seen
    finally:
        ppo_utils.reduce_loss = original


class LossBindings:
    """The loss-area operations (module docstring)."""

    runtime: Any

    def _policy(
        self,
        policy_loss_type: str,
        old: torch.Tensor,
        log_prob: torch.Tensor,
        advantages: torch.Tensor,
        action_mask: torch.Tensor,
        **algorithm: Any,
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        layout = RightAligned.of(action_mask)
        cfg = self._config(policy_loss_type=policy_loss_type, **algorithm)
        loss_fn = self.runtime.ppo_utils.PolicyLossRegistry.get(policy_loss_type)
        with per_token_loss(self.runtime.ppo_utils) as seen:
            _, metrics = loss_fn(
                layout.to_skyrl(log_prob),
                layout.to_skyrl(old.detach()),
                layout.to_skyrl(advantages),
                config=cfg.trainer.algorithm,
                loss_mask=layout.loss_mask(action_mask).to(log_prob.dtype),
                rollout_logprobs=None,
            )
        if "loss" not in seen:
            raise RuntimeError(f"SkyRL's {policy_loss_type} loss did not call reduce_loss")
        clip = torch.tensor(float(metrics["clip_ratio"]), dtype=torch.float64)
        return layout.to_canonical(seen["loss"]), {"clipfrac": clip}

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
        """loss.ppo_clip / loss.dual_clip: ``policy_loss_type`` regular / dual_clip,
        ``eps_clip_low`` / ``eps_clip_high`` / ``clip_ratio_c``."""
        extra = {} if clip_ratio_c is None else {"clip_ratio_c": float(clip_ratio_c)}
        return self._policy(
            "regular" if clip_ratio_c is None else "dual_clip",
            old_log_prob,
            log_prob,
            advantages,
            response_mask,
            eps_clip_low=float(clip_ratio_low),
            eps_clip_high=float(clip_ratio_high),
            **extra,
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
        """loss.gspo: ``policy_loss_type="gspo"`` with ``loss_reduction="sequence_mean"``
        (the reduction SkyRL recommends for it; the per-token loss does not depend on it)."""
        return self._policy(
            "gspo",
            old_log_prob,
            log_prob,
            advantages,
            response_mask,
            eps_clip_low=float(clip_ratio_low),
            eps_clip_high=float(clip_ratio_high),
            loss_reduction="sequence_mean",
        )

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
        """loss.cispo: ``policy_loss_type="cispo"``, ``cispo.cispo_eps_clip_low`` /
        ``cispo_eps_clip_high`` (the weight is clamped to [1 - low, 1 + high]), anchored on
        the old log-probs (``cispo_anchor="old"``, the default)."""
        layout_algorithm = self._config().trainer.algorithm
        cispo = type(layout_algorithm.cispo)(
            cispo_eps_clip_low=float(clip_ratio_low),
            cispo_eps_clip_high=float(clip_ratio_high),
        )
        return self._policy("cispo", old_log_prob, log_prob, advantages, response_mask, cispo=cispo)

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
        """loss.sapo: ``policy_loss_type="sapo"``, ``sapo.tau_pos`` / ``sapo.tau_neg``, with
        ``loss_reduction="sequence_mean"`` (the reduction sapo_policy_loss asks for; the
        per-token loss does not depend on it). Its ``clip_ratio`` metric is a constant 0."""
        layout_algorithm = self._config().trainer.algorithm
        sapo = type(layout_algorithm.sapo)(tau_pos=float(tau_pos), tau_neg=float(tau_neg))
        loss, _ = self._policy(
            "sapo",
            old_log_prob,
            log_prob,
            advantages,
            response_mask,
            sapo=sapo,
            loss_reduction="sequence_mean",
        )
        return loss, {}

    def value_loss(
        self,
        vpreds: torch.Tensor,
        returns: torch.Tensor,
        values: torch.Tensor,
        response_mask: torch.Tensor,
        *,
        cliprange_value: float | None,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """loss.value_clip: ``ppo_critic_loss(values, old_values, returns, config,
        loss_mask)`` with ``value_clip = cliprange_value``."""
        layout = RightAligned.of(response_mask)
        algorithm = self._config(
            value_clip=None if cliprange_value is None else float(cliprange_value)
        ).trainer.algorithm
        function = self.runtime.ppo_utils.ppo_critic_loss
        with last_per_token(function, "loss") as seen:
            _, clipfrac = function(
                layout.to_skyrl(vpreds),
                layout.to_skyrl(values.detach()),
                layout.to_skyrl(returns.detach()),
                algorithm,
                loss_mask=layout.loss_mask(response_mask).to(vpreds.dtype),
            )
        if "loss" not in seen:
            raise RuntimeError("SkyRL's ppo_critic_loss built no per-token loss")
        metrics = {}
        if clipfrac is not None:
            metrics["vf_clipfrac"] = torch.tensor(float(clipfrac), dtype=torch.float64)
        return layout.to_canonical(seen["loss"]), metrics

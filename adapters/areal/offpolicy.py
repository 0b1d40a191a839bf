"""AReaL bindings of `offpolicy.tis`, `offpolicy.icepop` and `offpolicy.is_correction`:
the rejection sampling of the decoupled loss.

With ``use_decoupled_loss=True`` AReaL's actor trains on three log-probs: the current
policy's, the proximal policy's (``prox_logp``, recomputed by the trainer: the contract's
``old``) and the behaviour policy's (``logprobs``, the inference engine's: the contract's
``rollout``). ``PPOActorConfig.rejection_sampling`` (a ``RejectionSamplingConfig``) makes
``grpo_loss_fn`` -> ``ppo_actor_loss_fn`` call ``apply_rejection_sampling`` on the packed
micro-batch, and the per-token policy loss is multiplied by its ``behave_imp_weight``
(0 where the token is rejected). That weight is what the contract compares; the binding
reads it off ``ppo_actor_loss_fn``'s frame at its return (``frame_trace.last_per_token``)
after calling ``grpo_loss_fn`` the way ``_ppo_update``'s engine does.

The contract's modes as ``RejectionSamplingConfig`` (``metric="ratio"``):

- ``tis_weights``: ``level="token"``, ``action="clamp"``, ``lower`` / ``upper``;
- ``icepop_weights``: ``level="token"``, ``action="mask"``;
- ``is_correction_weights``: ``token_truncate`` / ``token_mask`` as above;
  ``sequence_truncate`` / ``sequence_mask`` are ``level="sequence"`` with the default
  ``agg="mean"``: AReaL's sequence ratio is the geometric mean of the token ratios (profile
  ``is_sequence_log_ratio = "mean"``).

``RejectionSamplingConfig`` refuses a ratio band without an upper bound, an upper bound of
1 or below, and a non-positive lower bound (a lower bound of 0 is the same band as none: a
ratio is positive); such arguments are ``Inexpressible``. A micro-batch without an action
token never reaches the loss function (the engine's ``local_weight == 0`` branch): no
weight applies, the binding returns zeros.
"""

from __future__ import annotations

from typing import Any

import torch

from rlconform.adapters.areal.layout import Packed
from rlconform.adapters.base import Inexpressible
from rlconform.adapters.frame_trace import last_per_token
from rlconform.adapters.is_correction_mode import split_mode

# The log-prob at the position after a sample's last token (loss_mask 0 there): the same
# value for both policies, a ratio of 1 that nothing reads.
AFTER_LOGPROB = -1.0


def _band(low: float | None, high: float | None, mode: str) -> dict[str, Any]:
    """``lower`` / ``upper`` of a ``RejectionSamplingConfig`` for the contract's band."""
    if high is None:
        raise Inexpressible(f"{mode}: AReaL's rejection sampling needs an upper bound")
    if high <= 1.0:
        raise Inexpressible(
            f"{mode}: upper bound {high} <= 1 (RejectionSamplingConfig refuses it for the "
            "ratio metric)"
        )
    lower = None if low is None or low == 0.0 else float(low)
    if lower is not None and lower < 0.0:
        raise Inexpressible(f"{mode}: a negative lower bound {low}")
    return {"upper": float(high), "lower": lower}


class OffpolicyBindings:
    """The offpolicy-area operations (module docstring)."""

    runtime: Any

    def _behave_weights(
        self,
        old_logprob: torch.Tensor,
        rollout_logprob: torch.Tensor,
        response_mask: torch.Tensor,
        **rejection: Any,
    ) -> torch.Tensor:
        if not int(response_mask.count_nonzero()):
            return torch.zeros(response_mask.shape, dtype=torch.float32)
        config = self.runtime.cli_args.RejectionSamplingConfig(metric="ratio", **rejection)
        packed = Packed.of(response_mask)
        proximal = packed.pack(old_logprob.detach().to(torch.float32), AFTER_LOGPROB)
        data = {
            "logprobs": packed.pack(rollout_logprob.detach().to(torch.float32), AFTER_LOGPROB),
            "prox_logp": proximal,
            "advantages": torch.zeros_like(proximal),
            "loss_mask": packed.pack(response_mask.to(torch.int64), 0),
            "cu_seqlens": packed.cu_seqlens,
        }
        functional = self.runtime.functional
        tracker = self.runtime.stats_tracker
        tracker.export(reset=True)
        try:
            with (
                tracker.scope("rlconform"),
                last_per_token(functional.ppo_actor_loss_fn, "behave_imp_weight") as seen,
            ):
                self.runtime.actor.grpo_loss_fn(
                    proximal.clone(),
                    torch.zeros_like(proximal),
                    data,
                    eps_clip=0.2,
                    eps_clip_higher=None,
                    c_clip=None,
                    rejection_sampling=config,
                    use_decoupled_loss=True,
                )
        finally:
            tracker.export(reset=True)
        if "behave_imp_weight" not in seen:
            raise RuntimeError("ppo_actor_loss_fn formed no behave_imp_weight")
        return packed.unpack(seen["behave_imp_weight"].detach(), response_mask.shape[-1])

    def tis_weights(
        self,
        old_logprob: torch.Tensor,
        rollout_logprob: torch.Tensor,
        response_mask: torch.Tensor,
        clip_low: float | None = 0.0,
        clip_high: float | None = 2.0,
    ) -> torch.Tensor:
        """offpolicy.tis: ``RejectionSamplingConfig(level="token", action="clamp")``."""
        band = _band(clip_low, clip_high, "tis")
        return self._behave_weights(
            old_logprob, rollout_logprob, response_mask, level="token", action="clamp", **band
        )

    def icepop_weights(
        self,
        old_logprob: torch.Tensor,
        rollout_logprob: torch.Tensor,
        response_mask: torch.Tensor,
        clip_low: float | None = 0.5,
        clip_high: float | None = 2.0,
    ) -> torch.Tensor:
        """offpolicy.icepop: ``RejectionSamplingConfig(level="token", action="mask")``."""
        band = _band(clip_low, clip_high, "icepop")
        return self._behave_weights(
            old_logprob, rollout_logprob, response_mask, level="token", action="mask", **band
        )

    def is_correction_weights(
        self,
        old_logprob: torch.Tensor,
        rollout_logprob: torch.Tensor,
        response_mask: torch.Tensor,
        mode: str = "sequence_mask",
        clip_min: float | None = None,
        clip_max: float | None = 3.0,
    ) -> torch.Tensor:
        """offpolicy.is_correction: ``level`` token / sequence, ``action`` clamp (truncate)
        or mask, ``agg`` its default ``"mean"``."""
        level, action = split_mode(mode)
        band = _band(clip_min, clip_max, mode)
        return self._behave_weights(
            old_logprob,
            rollout_logprob,
            response_mask,
            level=level,
            action="clamp" if action == "truncate" else "mask",
            **band,
        )

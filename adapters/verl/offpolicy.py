"""verl bindings for the CONTRACT area `offpolicy`: the trainer's rollout correction and the
weight the policy loss then applies.

The trainer (v1 ``_compute_advantage``; ``RayPPOTrainer.fit``) calls
``rollout_corr_helper.compute_rollout_correction_and_add_to_batch(batch,
algorithm.rollout_correction)``: it stores ``rollout_is_weights`` (from
``compute_rollout_correction_and_rejection_mask``) and replaces ``response_mask`` by the
rejection-sampled one (``compute_rollout_rejection_mask``). The actor's policy loss gets both:
``rollout_is_weights`` multiplies its per-token loss and the new ``response_mask`` masks
it. The weight an action token gets is read through that consumer: the registered
``vanilla`` loss at ratio 1 (log_prob = old_log_prob) with advantage -1, whose per-token
loss matrix is then exactly the weight, kept where the loss mask keeps the token.

Contract modes and verl's configuration (``RolloutCorrectionConfig`` presets):

- ``offpolicy.tis``: ``rollout_is="token"``, ``rollout_is_threshold=high`` (Token-TIS).
- ``offpolicy.icepop``: ``rollout_is="token"``, ``rollout_is_threshold="low_high"`` (IcePop).
- ``offpolicy.is_correction``: ``*_truncate`` is token / sequence TIS at ``clip_max``;
  ``*_mask`` is TIS at ``clip_max`` with rejection sampling ``token_k1`` / ``seq_sum_k1``
  and ``rollout_rs_threshold="clip_min_clip_max"`` (``decoupled_seq_is_rs``: Seq-MIS).

verl's bands need a positive lower bound. A contract band without one (or with 0) keeps
every ratio up to the upper bound: the smallest positive float32 stands for it (verl clamps
its log-ratios to +-20, so no weight is that small). A lower *truncation* bound has no
setting (verl's TIS only truncates from above): ``Unsupported``.
"""

from __future__ import annotations

from typing import Any

import torch

from rlconform.adapters.base import Unsupported
from rlconform.adapters.is_correction_mode import split_mode

_NO_LOWER_BOUND = float(torch.finfo(torch.float32).tiny)


def _band(low: float | None, high: float) -> str:
    lower = _NO_LOWER_BOUND if low is None or low == 0.0 else float(low)
    return f"{lower!r}_{float(high)!r}"


def _truncation(low: float | None, high: float) -> float:
    if low is not None and low != 0.0:
        raise Unsupported(
            f"verl's truncated IS clamps from above only; a lower truncation bound {low} "
            "has no setting"
        )
    return float(high)


def _applied_weights(
    old_logprob: torch.Tensor,
    rollout_logprob: torch.Tensor,
    response_mask: torch.Tensor,
    correction: dict[str, Any],
) -> torch.Tensor:
    """The per-token weight the actor's loss applies after the trainer's rollout correction."""
    from verl import DataProto
    from verl.trainer.ppo.core_algos import get_policy_loss_fn
    from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_and_add_to_batch

    from rlconform.adapters.verl.actor import _actor_config, _recorded_loss_matrices

    batch = DataProto.from_dict(
        tensors={
            "old_log_probs": old_logprob,
            "rollout_log_probs": rollout_logprob,
            "response_mask": response_mask,
        }
    )
    # the trainer passes algorithm.rollout_correction, a mapping read with .get
    batch, _ = compute_rollout_correction_and_add_to_batch(batch, dict(correction))
    loss_mask = batch.batch["response_mask"]
    with _recorded_loss_matrices() as recorded:
        get_policy_loss_fn("vanilla")(
            old_log_prob=old_logprob,
            log_prob=old_logprob,
            advantages=-torch.ones_like(old_logprob),
            response_mask=loss_mask,
            loss_agg_mode="token-mean",
            config=_actor_config("vanilla"),
            rollout_is_weights=batch.batch["rollout_is_weights"],
        )
    return torch.where(loss_mask.bool(), recorded[0], torch.zeros_like(recorded[0]))


class OffpolicyOps:
    """`offpolicy` operations through verl's rollout correction (module docstring)."""

    def tis_weights(
        self,
        old_logprob: torch.Tensor,
        rollout_logprob: torch.Tensor,
        response_mask: torch.Tensor,
        clip_low: float | None = 0.0,
        clip_high: float | None = 2.0,
    ) -> torch.Tensor:
        """offpolicy.tis: Token-TIS."""
        threshold = _truncation(clip_low, clip_high)
        return _applied_weights(
            old_logprob,
            rollout_logprob,
            response_mask,
            {"rollout_is": "token", "rollout_is_threshold": threshold},
        )

    def icepop_weights(
        self,
        old_logprob: torch.Tensor,
        rollout_logprob: torch.Tensor,
        response_mask: torch.Tensor,
        clip_low: float | None = 0.5,
        clip_high: float | None = 2.0,
    ) -> torch.Tensor:
        """offpolicy.icepop: token IcePop (a ``"low_high"`` IS threshold)."""
        return _applied_weights(
            old_logprob,
            rollout_logprob,
            response_mask,
            {"rollout_is": "token", "rollout_is_threshold": _band(clip_low, clip_high)},
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
        """offpolicy.is_correction: TIS (``*_truncate``) or TIS with rejection sampling
        (``*_mask``) at the contract's level (module docstring)."""
        level, action = split_mode(mode)
        if action == "truncate":
            correction = {
                "rollout_is": level,
                "rollout_is_threshold": _truncation(clip_min, clip_max),
            }
        else:
            correction = {
                "rollout_is": level,
                "rollout_is_threshold": float(clip_max),
                "rollout_rs": "token_k1" if level == "token" else "seq_sum_k1",
                "rollout_rs_threshold": _band(clip_min, clip_max),
            }
        return _applied_weights(old_logprob, rollout_logprob, response_mask, correction)

    def logprob_gap(
        self,
        old_logprob: torch.Tensor,
        rollout_logprob: torch.Tensor,
        response_mask: torch.Tensor,
    ) -> torch.Tensor:
        """offpolicy.logprob_gap: ``training/rollout_probs_diff_mean`` of
        ``verl.utils.debug.metrics.calculate_debug_metrics``, the trainer's rollout-vs-actor
        gap metric, on a batch with the response mask and the two log-prob tensors."""
        from verl import DataProto
        from verl.utils.debug.metrics import calculate_debug_metrics

        data = DataProto.from_dict(
            tensors={
                "rollout_log_probs": rollout_logprob,
                "old_log_probs": old_logprob,
                "response_mask": response_mask,
                "responses": torch.zeros_like(response_mask, dtype=torch.int64),
            }
        )
        metrics = calculate_debug_metrics(data)
        return torch.as_tensor(metrics["training/rollout_probs_diff_mean"], dtype=torch.float64)

"""OpenRLHF bindings for the CONTRACT areas `loss`, `offpolicy` and `agg`: ``PolicyLoss``,
``ValueLoss`` and ``aggregate_loss`` (``openrlhf.models.loss``) and the global denominators
of ``openrlhf.utils.loss_utils.get_loss_batch_info``.

``PPOActor`` builds ``PolicyLoss(clip_eps_low, clip_eps_high, dual_clip, token_level_loss,
policy_loss_type, <IS correction>)`` from its config and calls it on the micro-batch
(``training_step``); ``PPOCritic`` builds ``ValueLoss(value_clip)``. Both return the
aggregated scalar: the per-token loss the contract compares is the matrix they hand to
``aggregate_loss`` (``OpenRLHFCommon.per_token_loss``).

The off-policy weights are read off ``PolicyLoss`` itself: called with log_probs equal to
the old log-probs (ratio 1, never clipped) and advantages -1 on action tokens and 0
elsewhere, its per-token loss before the IS correction is 1 on action tokens and 0
elsewhere, so the matrix it aggregates is its IS coefficient as it weights each action
token (and that coefficient times 0 elsewhere, as the aggregation sees it).
"""

from __future__ import annotations

import types
from typing import Any

import torch

from rlconform.adapters.base import Inexpressible, Unsupported
from rlconform.adapters.openrlhf.common import OpenRLHFCommon, action_mask


def _local_strategy() -> Any:
    """None (no process group), or a strategy whose ``ds_device_mesh["dp"]`` is this rank."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return None
    rank = dist.get_rank()
    group = _LOCAL_GROUPS.get(rank)
    if group is None:
        group = dist.new_group([rank], use_local_synchronization=True)
        _LOCAL_GROUPS[rank] = group
    mesh = {"dp": types.SimpleNamespace(get_group=lambda: group)}
    return types.SimpleNamespace(ds_device_mesh=mesh)


_LOCAL_GROUPS: dict[int, Any] = {}

# Contract aggregation modes -> aggregate_loss(token_level_loss=...) (--actor.loss_agg_mode).
AGG_MODES = {"token-mean": True, "seq-mean-token-mean": False}


class LossBindings(OpenRLHFCommon):
    """`loss.ppo_clip`, `loss.dual_clip`, `loss.gspo`, `loss.value_clip`, the IS corrections of
    `offpolicy.*` and `agg.token_mean` / `agg.seq_mean_token_mean` / `agg.shard_invariance`."""

    # ------------------------------------------------------------------ policy losses

    def _policy_loss(self, **options: Any) -> Any:
        return self.runtime.loss.PolicyLoss(**options)

    def _policy_forward(
        self,
        policy: Any,
        log_prob: torch.Tensor,
        old_log_prob: torch.Tensor,
        advantages: torch.Tensor,
        mask: torch.Tensor,
        rollout_log_prob: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``policy.forward`` as ``training_step`` calls it: (per-token loss, clip_ratio)."""
        with self.per_token_loss():
            outputs = policy(
                log_prob,
                old_log_prob,
                advantages,
                action_mask=mask,
                rollout_log_probs=rollout_log_prob,
            )
        return outputs[0], outputs[1]

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
        """loss.ppo_clip / loss.dual_clip: ``PolicyLoss(clip_eps_low, clip_eps_high,
        dual_clip)``; clipfrac is its ``clip_ratio``."""
        policy = self._policy_loss(
            clip_eps_low=clip_ratio_low, clip_eps_high=clip_ratio_high, dual_clip=clip_ratio_c
        )
        loss, clip_ratio = self._policy_forward(
            policy, log_prob, old_log_prob, advantages, action_mask(response_mask)
        )
        return loss, {"clipfrac": clip_ratio}

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
        """loss.gspo: ``PolicyLoss(..., policy_loss_type="gspo")``."""
        policy = self._policy_loss(
            clip_eps_low=clip_ratio_low, clip_eps_high=clip_ratio_high, policy_loss_type="gspo"
        )
        loss, clip_ratio = self._policy_forward(
            policy, log_prob, old_log_prob, advantages, action_mask(response_mask)
        )
        return loss, {"clipfrac": clip_ratio}

    def value_loss(
        self,
        vpreds: torch.Tensor,
        returns: torch.Tensor,
        values: torch.Tensor,
        response_mask: torch.Tensor,
        *,
        cliprange_value: float,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """loss.value_clip: ``ValueLoss(clip_eps=value_clip)(values, old_values, returns,
        action_mask)``, OpenRLHF's 0.5 included. OpenRLHF computes no value clip fraction:
        ``vf_clipfrac`` is None (the clause makes no clip-fraction check)."""
        critic = self.runtime.loss.ValueLoss(clip_eps=cliprange_value)
        with self.per_token_loss():
            loss = critic(vpreds, values, returns, action_mask=action_mask(response_mask))
        return loss, {"vf_clipfrac": None}

    # ------------------------------------------------------------------ IS correction

    def _is_options(self, kind: str, low: float | None, high: float | None) -> dict[str, Any]:
        """PolicyLoss options of the release's IS-correction API for ``kind`` (tis: token
        clamp; icepop: token mask; seq_mask: sequence geometric-mean mask)."""
        # No lower (upper) bound is the bound 0 (inf) for a ratio exp(x) >= 0.
        band = [0.0 if low is None else float(low), float("inf") if high is None else float(high)]
        if self.runtime.release.is_api == "gate":
            level, mode = {
                "tis": ("token", "clip"),
                "icepop": ("token", "mask"),
                "seq_mask": ("seq", "mask"),
            }[kind]
            return {
                "is_correction_level": level,
                "is_correction_mode": mode,
                "is_correction_gating": "ratio",
                "is_correction_threshold": band,
            }
        return {
            "enable_vllm_is_correction": True,
            "vllm_is_truncated_threshold": band,
            "vllm_is_correction_type": {
                "tis": "tis",
                "icepop": "icepop",
                "seq_mask": "seq-mask-tis",
            }[kind],
        }

    def _is_weights(
        self,
        kind: str,
        old_logprob: torch.Tensor,
        rollout_logprob: torch.Tensor,
        response_mask: torch.Tensor,
        low: float | None,
        high: float | None,
    ) -> torch.Tensor:
        """The IS coefficient ``PolicyLoss`` puts on each action token (module docstring)."""
        mask = action_mask(response_mask)
        policy = self._policy_loss(**self._is_options(kind, low, high))
        probe_advantages = -mask.to(old_logprob.dtype)
        weights, _ = self._policy_forward(
            policy, old_logprob, old_logprob, probe_advantages, mask, rollout_logprob
        )
        return weights.detach()

    def tis_weights(
        self,
        old_logprob: torch.Tensor,
        rollout_logprob: torch.Tensor,
        response_mask: torch.Tensor,
        clip_low: float | None = 0.0,
        clip_high: float | None = 2.0,
    ) -> torch.Tensor:
        """offpolicy.tis: token-level clamp (0.11.2: level token, mode clip; before:
        vllm_is_correction_type tis)."""
        return self._is_weights(
            "tis", old_logprob, rollout_logprob, response_mask, clip_low, clip_high
        )

    def icepop_weights(
        self,
        old_logprob: torch.Tensor,
        rollout_logprob: torch.Tensor,
        response_mask: torch.Tensor,
        clip_low: float | None = 0.5,
        clip_high: float | None = 2.0,
    ) -> torch.Tensor:
        """offpolicy.icepop: token-level mask (0.11.2: level token, mode mask; before:
        vllm_is_correction_type icepop)."""
        return self._is_weights(
            "icepop", old_logprob, rollout_logprob, response_mask, clip_low, clip_high
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
        """offpolicy.is_correction: token_truncate = tis, token_mask = icepop,
        sequence_mask = the sequence (geometric-mean) mask (0.11.2: level seq, mode mask;
        before: seq-mask-tis). OpenRLHF clamps only per token: no sequence_truncate."""
        kinds = {"token_truncate": "tis", "token_mask": "icepop", "sequence_mask": "seq_mask"}
        if mode == "sequence_truncate":
            raise Unsupported("OpenRLHF clamps the IS ratio per token only (no sequence clamp)")
        if mode not in kinds:
            raise ValueError(f"unknown IS-correction mode {mode!r}")
        return self._is_weights(
            kinds[mode], old_logprob, rollout_logprob, response_mask, clip_min, clip_max
        )

    # ------------------------------------------------------------------ aggregation

    def agg_loss(
        self,
        loss_mat: torch.Tensor,
        loss_mask: torch.Tensor,
        mode: str,
        dp_size: int = 1,
        batch_num_tokens: int | torch.Tensor | None = None,
        global_batch_size: int | torch.Tensor | None = None,
        loss_scale_factor: float | None = None,
    ) -> torch.Tensor:
        """agg.token_mean / agg.seq_mean_token_mean: ``aggregate_loss(loss, mask,
        token_level_loss, dp_size, batch_num_tokens, global_batch_size)`` with the
        denominators ``training_step`` passes: the given global ones, else this batch's
        ``get_loss_batch_info`` (what training_step computes when none are given)."""
        if mode not in AGG_MODES:
            raise Unsupported(
                f"OpenRLHF aggregates token-mean or seq-mean-token-mean only "
                f"(--actor.loss_agg_mode), not {mode!r}"
            )
        mask = action_mask(loss_mask)
        info = {"batch_num_tokens": batch_num_tokens, "global_batch_size": global_batch_size}
        if batch_num_tokens is None or global_batch_size is None:
            if dp_size != 1:
                raise Inexpressible(f"dp_size {dp_size} without the global denominators")
            local = self._batch_info(mask)
            info = {key: local[key] if value is None else value for key, value in info.items()}
        info["dp_size"] = dp_size
        return self.runtime.loss.aggregate_loss(
            loss_mat, mask, token_level_loss=AGG_MODES[mode], **info
        )

    def _batch_info(self, mask: torch.Tensor) -> dict[str, Any]:
        """``get_loss_batch_info`` of this call's batch alone: with a process group
        initialised it all-reduces over the strategy's data-parallel group, so it gets a
        strategy whose group is this rank only (the clause reduces the shares itself)."""
        return dict(self.runtime.loss_utils.get_loss_batch_info(_local_strategy(), mask))

    def agg_batch_info(self, loss_mask: torch.Tensor) -> dict[str, int]:
        """agg.shard_invariance: ``get_loss_batch_info`` of this shard alone: action tokens
        and sequences with an action token (it all-reduces them over the data-parallel group
        when one is initialised, which the clause does itself)."""
        info = self._batch_info(action_mask(loss_mask))
        return {
            "batch_num_tokens": int(info["batch_num_tokens"]),
            "global_batch_size": int(info["global_batch_size"]),
        }

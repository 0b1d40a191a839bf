"""Stand-in for openrlhf.models.loss: PolicyLoss / ValueLoss hand their per-token loss to
the module-level aggregate_loss, as OpenRLHF's do."""

from __future__ import annotations

import torch
import torch.nn as nn

from rlconform.adapters.torchref import TorchRef

from .utils import masked_mean

_REF = TorchRef()


def aggregate_loss(
    loss,
    loss_mask,
    token_level_loss=True,
    dp_size=1,
    batch_num_tokens=None,
    global_batch_size=None,
):
    mode = "token-mean" if token_level_loss else "seq-mean-token-mean"
    if dp_size != 1 and (batch_num_tokens is None or global_batch_size is None):
        raise ValueError("dp_size > 1 needs the global denominators")
    return _REF.agg_loss(
        loss,
        loss_mask,
        mode,
        dp_size=dp_size,
        batch_num_tokens=batch_num_tokens,
        global_batch_size=global_batch_size,
    )


class PolicyLoss(nn.Module):
    def __init__(
        self,
        clip_eps_low=0.2,
        clip_eps_high=0.2,
        dual_clip=None,
        token_level_loss=True,
        policy_loss_type="ppo",
        is_correction_level="off",
        is_correction_mode="mask",
        is_correction_gating="ratio",
        is_correction_threshold=(0.5, 5.0),
    ):
        super().__init__()
        self.clip = (clip_eps_low, clip_eps_high)
        self.dual_clip = dual_clip
        self.token_level_loss = token_level_loss and policy_loss_type != "gspo"
        self.policy_loss_type = policy_loss_type
        self.is_level, self.is_mode = is_correction_level, is_correction_mode
        self.threshold = is_correction_threshold

    def forward(
        self,
        log_probs,
        old_log_probs,
        advantages,
        action_mask=None,
        rollout_log_probs=None,
        dp_size=1,
        batch_num_tokens=None,
        global_batch_size=None,
    ):
        mask = action_mask.long()
        low, high = self.clip
        if self.policy_loss_type == "gspo":
            loss, metrics = _REF.gspo_loss(
                old_log_probs, log_probs, advantages, mask, clip_ratio_low=low, clip_ratio_high=high
            )
        else:
            loss, metrics = _REF.ppo_clip_loss(
                old_log_probs,
                log_probs,
                advantages,
                mask,
                clip_ratio_low=low,
                clip_ratio_high=high,
                clip_ratio_c=self.dual_clip,
            )
        vllm_kl = filtered = None
        if self.is_level != "off":
            lo, hi = self.threshold
            if self.is_level == "seq":
                coef = _REF.is_correction_weights(
                    old_log_probs, rollout_log_probs, mask, "sequence_mask", lo, hi
                )
            elif self.is_mode == "clip":
                coef = _REF.tis_weights(old_log_probs, rollout_log_probs, mask, lo, hi)
            else:
                coef = _REF.icepop_weights(old_log_probs, rollout_log_probs, mask, lo, hi)
            loss = coef * loss
            vllm_kl = masked_mean(rollout_log_probs - old_log_probs, mask)
            filtered = torch.zeros(())
        loss = aggregate_loss(
            loss,
            action_mask,
            token_level_loss=self.token_level_loss,
            dp_size=dp_size,
            batch_num_tokens=batch_num_tokens,
            global_batch_size=global_batch_size,
        )
        return loss, metrics["clipfrac"], torch.zeros(()), vllm_kl, filtered


class ValueLoss(nn.Module):
    def __init__(self, clip_eps=None, token_level_loss=True):
        super().__init__()
        self.clip_eps = clip_eps
        self.token_level_loss = token_level_loss

    def forward(
        self,
        values,
        old_values,
        returns,
        action_mask=None,
        dp_size=1,
        batch_num_tokens=None,
        global_batch_size=None,
    ):
        loss, _ = _REF.value_loss(
            values, returns, old_values, action_mask.long(), cliprange_value=self.clip_eps
        )
        # torchref's per-token value loss carries the 0.5; OpenRLHF applies it after
        # aggregating, as here.
        loss = aggregate_loss(
            2.0 * loss,
            action_mask,
            token_level_loss=self.token_level_loss,
            dp_size=dp_size,
            batch_num_tokens=batch_num_tokens,
            global_batch_size=global_batch_size,
        )
        return 0.5 * loss

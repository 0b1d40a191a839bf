"""Off-policy corrections: the vLLM importance-sampling ratio of
``_generate_and_score_completions`` (all four ``vllm_importance_sampling_mode``s; the
token modes are also truncated IS and ICEPOP), its logged log-prob gap, and the off-policy
sequence mask ``GRPOTrainer.get_off_policy_mask`` that ``_compute_loss`` applies."""

from __future__ import annotations

from typing import Any

import torch

from rlconform.adapters.base import Inexpressible
from rlconform.adapters.trl import layout
from rlconform.adapters.trl.shell import last_metric


class OffpolicyBindings:
    shell: Any
    release_table: Any

    def is_correction_weights(
        self,
        old: torch.Tensor,
        rollout: torch.Tensor,
        response_mask: torch.Tensor,
        mode: str,
        clip_min: float | None = None,
        clip_max: float | None = 3.0,
    ) -> torch.Tensor:
        return self._is_ratio(old, rollout, response_mask, mode, clip_min, clip_max)

    def tis_weights(
        self,
        old: torch.Tensor,
        rollout: torch.Tensor,
        response_mask: torch.Tensor,
        low: float | None,
        high: float | None,
    ) -> torch.Tensor:
        """vllm_importance_sampling_mode='token_truncate': clamp(ratio, clip_min, clip_max)."""
        return self._is_ratio(old, rollout, response_mask, "token_truncate", low, high)

    def icepop_weights(
        self,
        old: torch.Tensor,
        rollout: torch.Tensor,
        response_mask: torch.Tensor,
        low: float | None,
        high: float | None,
    ) -> torch.Tensor:
        """vllm_importance_sampling_mode='token_mask': 0 outside [clip_min, clip_max]."""
        return self._is_ratio(old, rollout, response_mask, "token_mask", low, high)

    def logprob_gap(
        self, old: torch.Tensor, rollout: torch.Tensor, response_mask: torch.Tensor
    ) -> float:
        """The metric sampling/sampling_logp_difference/mean (mean |old - sampling| over the
        loss-mask tokens) that the vLLM IS correction logs."""
        _, metrics = self._vllm_score(old, rollout, response_mask, "token_truncate", None, 3.0)
        return last_metric(metrics, self.release_table.logprob_gap_metric)

    def opsm_mask(
        self,
        log_prob: torch.Tensor,
        old: torch.Tensor,
        advantages: torch.Tensor,
        response_mask: torch.Tensor,
        delta: float,
    ) -> torch.Tensor:
        """GRPOTrainer.get_off_policy_mask with the arguments _compute_loss passes: the
        (B, 1) advantages, the policy's log-probs, the sampling log-probs, completion_mask x
        tool_mask; its (B, 1) keep flag is spread over the sample's action tokens."""
        layout.require_micro_batch(response_mask.shape)
        per_sequence = layout.per_sequence(advantages, response_mask)
        if per_sequence is None:
            raise Inexpressible("OPSM reads one advantage per sequence")
        masks = layout.completions(response_mask)
        mask = (
            masks.completion_mask
            if masks.tool_mask is None
            else masks.completion_mask * masks.tool_mask
        )
        keep = self.shell.trainer_cls.get_off_policy_mask(
            advantages=per_sequence.unsqueeze(1),
            per_token_logps=log_prob,
            sampling_per_token_logps=old,
            mask=mask,
            off_policy_threshold=delta,
        )
        return layout.on_actions(keep.to(log_prob.dtype), response_mask)

    # -- plumbing -----------------------------------------------------------------------

    def _is_ratio(
        self,
        old: torch.Tensor,
        rollout: torch.Tensor,
        response_mask: torch.Tensor,
        mode: str,
        clip_min: float | None,
        clip_max: float | None,
    ) -> torch.Tensor:
        if mode not in self.release_table.is_modes:
            raise Inexpressible(f"TRL has no vllm_importance_sampling_mode {mode!r}")
        output, _ = self._vllm_score(old, rollout, response_mask, mode, clip_min, clip_max)
        ratio = output["importance_sampling_ratio"][: response_mask.shape[0]].to(old.dtype)
        if ratio.shape[1] == 1:  # sequence_* modes: one ratio per completion
            return layout.on_actions(ratio, response_mask)
        return layout.widen(ratio, response_mask.shape[1])

    def _vllm_score(
        self,
        old: torch.Tensor,
        rollout: torch.Tensor,
        response_mask: torch.Tensor,
        mode: str,
        clip_min: float | None,
        clip_max: float | None,
    ) -> tuple[dict[str, Any], dict[str, list[float]]]:
        """One generation batch through _generate_and_score_completions with use_vllm and the
        IS correction on. TRL scores whole groups of num_generations >= 2 completions, so a
        batch of one completion gets a second, empty one (it has no token to weigh and its
        row is dropped); the IS ratio and the gap metric are per token."""
        count = response_mask.shape[0]
        if count == 0:
            raise Inexpressible("TRL scores a generation batch of at least one completion")
        masks = layout.completions(response_mask)
        lengths, tool_masks = list(masks.lengths), masks.tool_masks
        sampling = layout.ragged(rollout, lengths)
        longest = masks.longest
        old_rows = old[:, :longest].detach()
        if count == 1:
            lengths.append(0)
            sampling.append([])
            if tool_masks is not None:
                tool_masks = [*tool_masks, []]
            old_rows = torch.cat([old_rows, torch.zeros_like(old_rows)], dim=0)
        size = len(lengths)
        args = self.shell.config(
            num_generations=size,
            per_device_train_batch_size=size,
            use_vllm=True,
            vllm_importance_sampling_correction=True,
            vllm_importance_sampling_mode=mode,
            vllm_importance_sampling_clip_min=clip_min,
            vllm_importance_sampling_clip_max=clip_max,
        )
        return self.shell.generate_and_score(
            args,
            lengths=lengths,
            tool_masks=tool_masks,
            rewards_per_func=torch.zeros((size, 1), dtype=torch.float32),
            sampling=sampling,
            old=old_rows,
        )

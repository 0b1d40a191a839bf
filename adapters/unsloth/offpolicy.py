"""The vLLM importance-sampling correction of Unsloth's GRPO loss (`offpolicy.is_correction`,
`offpolicy.tis`, `offpolicy.icepop`).

Unsloth's patched trainer does not use the ratio TRL's ``_generate_and_score_completions``
stores: its ``compute_loss`` hands the vLLM sampling log-probs
(``inputs["sampling_per_token_logps"]``) to ``grpo_accumulated_loss``, which reads
``use_vllm`` / ``vllm_importance_sampling_correction`` off the trainer and the mode and
clip bounds off ``trainer.args`` (TRL's ``GRPOConfig`` fields), and ``grpo_compute_loss``
forms the ratio itself from ``old - sampling`` and multiplies the per-token loss by it.
The binding makes that call (``accumulated.call``: the log-probs through Unsloth's chunked
log-softmax and ``UnslothEfficientGRPO``) and reads the weight the loss was multiplied by:
``flat_is_ratio`` of its return, ``importance_sampling_ratio * mask`` in
``grpo_compute_loss`` (the tensor the generated ``compute_loss`` logs as
``sampling/importance_sampling_ratio/*``). The token modes are also truncated IS
(``token_truncate``) and ICEPOP (``token_mask``), as on TRL's path.

Unsloth also has ``geometric_truncate`` / ``geometric_mask`` (the per-token mean log-ratio,
``UNSLOTH_GRPO_VLLM_IS_MODE``): no contract mode names them, so they are not asked for.
The off-policy sequence mask (``off_policy_mask_threshold``, `offpolicy.opsm`) is TRL's
``GRPOTrainer.get_off_policy_mask``, which ``grpo_compute_loss`` calls through the adapter
``grpo_accumulated_loss`` installs (with the sampling log-probs, else the old ones, else the
policy's detached) and multiplies into ``loss_i``: the binding reads its ``off_policy_mask``
local on the inputs ``grpo_accumulated_loss`` hands ``UnslothEfficientGRPO`` (as the loss
bindings read ``loss_i``). The logged log-prob gap is not bound (the generated
``compute_loss`` forms it; ``step.metrics`` runs that code under the step's configs).
"""

from __future__ import annotations

import torch

from rlconform.adapters.base import Inexpressible
from rlconform.adapters.trl import layout
from rlconform.adapters.trl.offpolicy import OffpolicyBindings
from rlconform.adapters.unsloth import accumulated

#: vllm_importance_sampling_mode values of grpo_compute_loss that the contract names
CONTRACT_MODES = ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask")


class UnslothOffpolicyBindings:
    """The vLLM IS weights of ``grpo_compute_loss`` (module docstring)."""

    # TRL's wrappers: each calls ``self._is_ratio`` with its mode (Unsloth's, below)
    is_correction_weights = OffpolicyBindings.is_correction_weights
    tis_weights = OffpolicyBindings.tis_weights
    icepop_weights = OffpolicyBindings.icepop_weights

    def opsm_mask(
        self,
        log_prob: torch.Tensor,
        old: torch.Tensor,
        advantages: torch.Tensor,
        response_mask: torch.Tensor,
        delta: float,
    ) -> torch.Tensor:
        """``off_policy_mask_threshold=delta``: the (B, 1) keep flag ``grpo_compute_loss``
        multiplies into ``loss_i``, spread over the sample's action tokens."""
        layout.require_micro_batch(response_mask.shape, tokens=True)
        per_sequence = layout.per_sequence(advantages, response_mask)
        if per_sequence is None:
            raise Inexpressible("OPSM reads one advantage per sequence")
        fields = {"loss_type": "dapo", "off_policy_mask_threshold": float(delta)}
        _, handed = self._call(
            fields,
            log_prob.detach().to(torch.float32),
            response_mask,
            per_sequence=per_sequence.to(torch.float32),
            old=old.detach().to(torch.float32),
            capture=accumulated.ACCUMULATED_LOCALS,
        )
        keep = self._compute(handed, ("off_policy_mask",))["off_policy_mask"]
        return layout.on_actions(keep.detach().to(log_prob.dtype), response_mask)

    def _is_ratio(
        self,
        old: torch.Tensor,
        rollout: torch.Tensor,
        response_mask: torch.Tensor,
        mode: str,
        clip_min: float | None,
        clip_max: float | None,
    ) -> torch.Tensor:
        if mode not in CONTRACT_MODES:
            raise Inexpressible(
                f"Unsloth's GRPO loss has no vllm_importance_sampling_mode {mode!r}"
            )
        batch, width = response_mask.shape
        layout.require_micro_batch(response_mask.shape, tokens=True)
        fields = {
            "loss_type": "dapo",
            "use_vllm": True,
            "vllm_importance_sampling_correction": True,
            "vllm_importance_sampling_mode": mode,
            "vllm_importance_sampling_clip_min": clip_min,
            "vllm_importance_sampling_clip_max": clip_max,
        }
        old32 = old.detach().to(torch.float32)
        # the policy's log-probs (the ratio is old vs sampling; the policy's are not read):
        # one moderate value that the stand-in model's logits express
        policy = torch.full((batch, width), -1.0, dtype=torch.float32)
        (_, _, _, _, flat_is_ratio, *_), _ = self._call(
            fields,
            policy,
            response_mask,
            per_sequence=torch.zeros(batch, dtype=torch.float32),
            old=old32,
            sampling=rollout.detach().to(torch.float32),
        )
        if flat_is_ratio is None or flat_is_ratio.numel() == 0:
            raise RuntimeError(
                "grpo_accumulated_loss returned no importance-sampling ratio with use_vllm and "
                "vllm_importance_sampling_correction on"
            )
        return _widen(flat_is_ratio.detach(), response_mask.shape[1]).to(old.dtype)


def _widen(ratio: torch.Tensor, columns: int) -> torch.Tensor:
    """The (B, W) ratio on the batch's (B, T) columns: columns past the completion width are
    padding (0)."""
    kept = ratio[:, :columns]
    pad = columns - kept.shape[1]
    if pad > 0:
        kept = torch.cat([kept, kept.new_zeros((kept.shape[0], pad))], dim=1)
    return kept

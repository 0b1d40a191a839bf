"""ROLL bindings for the CONTRACT areas `logprob` / `entropy` (``roll.utils.functionals``)."""

from __future__ import annotations

import torch

from rlconform.adapters.roll.common import RollCommon


class LogprobBindings(RollCommon):
    """Entropy from logits. ``response_logprobs`` is not bound: ROLL's alignment lives in
    the strategy method ``op_compute_log_probs``, whose module needs the whole
    distributed runtime (executor, collective, checkpointing) to import."""

    def entropy_from_logits(self, logits: torch.Tensor) -> torch.Tensor:
        """entropy.from_logits -> ``entropy_from_logits(logits)`` (computed in float32)."""
        return self.F.entropy_from_logits(logits)

    def entropy_mean(self, logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """entropy.from_logits (mean) -> ``masked_mean(entropy_from_logits(logits), mask)``."""
        return self.F.masked_mean(self.F.entropy_from_logits(logits), mask)

"""verl bindings for the CONTRACT areas `logprob` and `entropy`: ``torch_functional`` and
``compute_entropy_loss``."""

from __future__ import annotations

import torch


class LogprobOps:
    """`entropy` operations through verl's helpers."""

    def entropy_from_logits(self, logits: torch.Tensor) -> torch.Tensor:
        """entropy.from_logits: ``verl.utils.torch_functional.entropy_from_logits``."""
        from verl.utils.torch_functional import entropy_from_logits

        return entropy_from_logits(logits)

    def entropy_mean(self, logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """entropy.from_logits: ``core_algos.compute_entropy_loss`` in token-mean mode."""
        from verl.trainer.ppo.core_algos import compute_entropy_loss

        return compute_entropy_loss(logits, mask, loss_agg_mode="token-mean")

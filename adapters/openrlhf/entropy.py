"""OpenRLHF bindings for the CONTRACT area `entropy` (clause ``entropy.from_logits``).

``Actor.forward(..., return_entropy=True)`` (``openrlhf/models/actor.py``) computes the
per-position entropy with ``openrlhf.models.utils.compute_entropy`` on the float32,
temperature-scaled logits; ``PPOActor.training_step`` then reduces it over the action
tokens with ``aggregate_loss(entropy, action_mask, **loss_batch_info)`` into
``entropy_loss``, the value it logs and subtracts times ``entropy_coef``: no
``token_level_loss`` argument, so a token mean whatever ``--actor.loss_agg_mode`` is.

``compute_entropy`` is decorated with ``@torch.compile``; it is called uncompiled
(``__wrapped__``, the same Python body) so that each new logits shape does not recompile.
"""

from __future__ import annotations

from typing import Any

import torch

from rlconform.adapters.openrlhf.common import action_mask


class EntropyBindings:
    """`entropy.from_logits`: ``compute_entropy`` and the actor's ``entropy_loss`` (mixed
    into ``OpenRLHFTarget`` beside ``LossBindings``, whose ``_batch_info`` it uses)."""

    runtime: Any
    _batch_info: Any

    def _compute_entropy(self) -> Any:
        function = self.runtime.utils.compute_entropy
        return getattr(function, "__wrapped__", function)

    def entropy_from_logits(self, logits: torch.Tensor) -> torch.Tensor:
        """entropy.from_logits -> ``compute_entropy(logits)`` (the actor's float32 logits)."""
        return self._compute_entropy()(logits.to(torch.float32))

    def entropy_mean(self, logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """entropy.from_logits (mean) -> ``training_step``'s ``entropy_loss``:
        ``aggregate_loss(compute_entropy(logits), action_mask, **get_loss_batch_info(...))``
        with this batch's denominators (``LossBindings._batch_info``)."""
        actions = action_mask(mask)
        entropy = self._compute_entropy()(logits.to(torch.float32))
        return self.runtime.loss.aggregate_loss(entropy, actions, **self._batch_info(actions))

"""ROLL bindings for the CONTRACT areas `logprob` / `entropy`: the training strategy's
``op_compute_log_probs`` / ``op_compute_entropy`` and ``roll.utils.functionals``.

``FSDP2InferStrategy.op_compute_log_probs`` (the default strategy, ``fsdp2_train``; its
non-context-parallel branch, ``worker.rank_info.cp_size == 1``) is compiled from
``roll/distributed/strategy/fsdp2_strategy.py`` (its module imports FSDP, transformers and
the checkpoint runtime). It takes the model's (B, L, V) logits of the right-padded
prompt+response ``input_ids`` and the (B, L) ``response_mask`` (passed as its
``attention_mask``, as every ``loss_func`` / ``forward_func_log_probs`` does) and returns the
(B, L - 1) log-probs, column t scoring token t + 1. Megatron's ``op_compute_log_probs``
(``vocab_parallel_logprobs``) needs megatron-core's tensor-parallel runtime and is not bound.
Neither takes a temperature: ROLL's training log-probs use the model's logits unscaled.
"""

from __future__ import annotations

import types

import torch

from rlconform.adapters.base import Inexpressible
from rlconform.adapters.roll.common import RollCommon
from rlconform.adapters.roll.layout import RollLayout
from rlconform.adapters.roll.source import rank_info


class LogprobBindings(RollCommon):
    """Response log-probs and entropies as ROLL's training strategy computes them."""

    def _strategy(self) -> types.SimpleNamespace:
        return types.SimpleNamespace(worker=types.SimpleNamespace(rank_info=rank_info()))

    def response_logprobs(
        self,
        logits: torch.Tensor,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        response_width: int,
        temperature: float = 1.0,
    ) -> torch.Tensor:
        """logprob.alignment -> ``op_compute_log_probs(logits, input_ids, response_mask)``.

        Canonical: prompts left-padded to W = S - R, responses right-padded to R. ROLL: one
        right-padded row per sample (prompt, response, padding); the logits rows move with
        their tokens. ``temperature`` is not passed: ROLL has no such argument."""
        del temperature
        width = logits.shape[1]
        prompt_width = width - response_width
        prompt_lengths = RollLayout.prompt_lengths_from_mask(attention_mask[:, :prompt_width])
        if prompt_lengths.numel() and int(prompt_lengths.min()) < 1:
            raise Inexpressible("ROLL scores response token j with logits row P + j - 1: P >= 1")
        response_mask = attention_mask[:, prompt_width:]
        layout = RollLayout.build(
            response_mask.to(torch.int64).sum(-1), response_width, prompt_lengths, width
        )
        ids = layout.ids_to_roll(input_ids[:, :prompt_width], input_ids[:, prompt_width:])
        # Logits rows: prompt rows from the left-padded block, response rows from the right.
        rows = torch.arange(width, device=logits.device)
        source = torch.where(
            rows < layout.prompt_lengths.unsqueeze(-1),
            prompt_width - layout.prompt_lengths.unsqueeze(-1) + rows,
            rows - layout.prompt_lengths.unsqueeze(-1) + prompt_width,
        ).clamp(0, width - 1)
        roll_logits = logits.gather(1, source.unsqueeze(-1).expand(-1, -1, logits.shape[-1]))
        op = self.sources.get("fsdp2_log_probs")
        out = op(self._strategy(), roll_logits, ids, layout.response_mask())
        return layout.tokens_from_roll(out)

    def entropy_from_logits(self, logits: torch.Tensor) -> torch.Tensor:
        """entropy.from_logits -> ``entropy_from_logits(logits)`` (computed in float32)."""
        return self.F.entropy_from_logits(logits)

    def entropy_mean(self, logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """entropy.from_logits (mean) -> the pipeline's ``critic/entropy/mean``:
        ``op_compute_entropy(logits, response_mask)`` (FSDP2 strategy) then
        ``agg_loss(entropy, response_mask[:, 1:], "token-mean")``. Canonical logits row j
        (the distribution of response position j) is ROLL's logits row P_i + j - 1."""
        layout = self._layout(mask)
        grid = layout.tokens_to_roll(logits, fill=0.0)
        roll_logits = torch.cat([grid, torch.zeros_like(grid[:, :1])], dim=1)
        response_mask = layout.response_mask(mask)
        entropy = self.sources.get("fsdp2_entropy")(self._strategy(), roll_logits, response_mask)
        return self.F.agg_loss(
            loss_mat=entropy, loss_mask=response_mask[:, 1:], loss_agg_mode="token-mean"
        )

"""verl bindings for the CONTRACT areas `logprob` and `entropy`: the actor's training-side
forward (``engine.py``), on the path of the release's trainer.

The canonical padded batch becomes the samples verl's trainer holds (each sample's real
tokens, attention mask 1, and their logits rows); verl does the rest. Top-k / top-p: the
trainer hands its actor the rollout temperature only (``rollout.temperature`` in the
micro-batch or ``meta_info``); the rollout's top-k / top-p never reach the log-prob
recomputation, so those arguments have nowhere to go.
"""

from __future__ import annotations

import torch

from rlconform.adapters.verl import engine


def _sequences(
    logits: torch.Tensor, input_ids: torch.Tensor, attention_mask: torch.Tensor, prompt_width: int
) -> engine.Sequences:
    """Each sample's real prompt and response tokens and their logits rows."""
    prompts, responses, rows, masks = [], [], [], []
    real = attention_mask.bool()
    for i in range(input_ids.shape[0]):
        prompt = input_ids[i, :prompt_width][real[i, :prompt_width]]
        response = input_ids[i, prompt_width:][real[i, prompt_width:]]
        prompts.append(prompt)
        responses.append(response)
        rows.append(logits[i][real[i]])
        masks.append(torch.ones_like(response))
    return engine.Sequences(prompts, responses, rows, masks)


def _all_positions(logits: torch.Tensor) -> engine.Sequences:
    """Every response position of the (B, T, V) logits is a response token (no mask given)."""
    batch, width = logits.shape[:2]
    tokens = torch.zeros((batch, width), dtype=torch.int64, device=logits.device)
    return engine.response_aligned(logits, tokens, [width] * batch)


class LogprobOps:
    """`logprob` and `entropy` operations through verl's actor forward."""

    def response_logprobs(
        self,
        logits: torch.Tensor,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        response_width: int,
        temperature: float = 1.0,
    ) -> torch.Tensor:
        """logprob.alignment: verl's label shift and response cut (``engine.py``)."""
        prompt_width = input_ids.shape[1] - response_width
        sequences = _sequences(logits, input_ids, attention_mask, prompt_width)
        return engine.forward(
            self.release,
            sequences,
            temperature=temperature,
            entropy=False,
            chunking=False,
            width=response_width,
        ).log_probs

    def sampling_logprobs(
        self,
        logits: torch.Tensor,
        responses: torch.Tensor,
        response_mask: torch.Tensor,
        temperature: float = 1.0,
        top_k: int = -1,
        top_p: float = 1.0,
    ) -> torch.Tensor:
        """logprob.sampling_distribution: the actor's recomputation at the rollout
        temperature (top-k / top-p: see the module docstring)."""
        lengths = [int(n) for n in response_mask.sum(-1).tolist()]
        sequences = engine.response_aligned(logits, responses, lengths)
        return engine.forward(
            self.release,
            sequences,
            temperature=temperature,
            entropy=False,
            chunking=False,
            width=responses.shape[1],
        ).log_probs

    def entropy_from_logits(self, logits: torch.Tensor) -> torch.Tensor:
        """entropy.from_logits: the entropy verl's forward returns (calculate_entropy)."""
        return engine.forward(
            self.release,
            _all_positions(logits),
            temperature=1.0,
            entropy=True,
            chunking=self.settings.entropy_chunking and self.release.chunked_entropy,
            width=logits.shape[1],
        ).entropy

    def entropy_mean(self, logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """entropy.from_logits: the trainer's ``actor/entropy`` metric, ``agg_loss`` of the
        forward's entropy over the response mask in the actor's loss_agg_mode (token-mean)."""
        from verl.trainer.ppo.core_algos import agg_loss

        entropy = self.entropy_from_logits(logits)
        return agg_loss(loss_mat=entropy, loss_mask=mask, loss_agg_mode="token-mean")

"""torchref operations for the CONTRACT area `logprob` (vectorized torch, any device)."""

from __future__ import annotations

import torch


def _gather_token(logprobs: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    return logprobs.gather(-1, tokens.long().unsqueeze(-1)).squeeze(-1)


def _sampling_keep_mask(scaled: torch.Tensor, top_k: int, top_p: float, ties: str) -> torch.Tensor:
    """Top-k then top-p support of temperature-scaled logits, as a boolean (..., V) mask."""
    vocab = scaled.shape[-1]
    keep = torch.ones_like(scaled, dtype=torch.bool)
    if 0 < top_k < vocab:
        if ties == "keep":
            kth = scaled.topk(top_k, dim=-1).values[..., -1:]
            keep = scaled >= kth
        else:
            top = scaled.topk(top_k, dim=-1).indices
            keep = torch.zeros_like(keep).scatter(-1, top, True)
    if top_p < 1.0:
        probs = torch.softmax(scaled.masked_fill(~keep, float("-inf")), dim=-1)
        ranked, order = probs.sort(dim=-1, descending=True, stable=True)
        mass_before = ranked.cumsum(dim=-1) - ranked
        nucleus = torch.zeros_like(keep).scatter(-1, order, mass_before < top_p)
        keep = keep & nucleus
    return keep


class LogprobOps:
    """Vectorized `logprob` and `entropy` operations in the canonical padded layout.

    Logits are (B, S, V) over the full sequence for ``response_logprobs`` and (B, T, V)
    response-aligned (row t predicts response token t) for the other operations.
    """

    def response_logprobs(
        self,
        logits: torch.Tensor,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        response_width: int,
        temperature: float = 1.0,
    ) -> torch.Tensor:
        """logprob.alignment: (B, R) log-probs of the response tokens, row P + j - 1 each."""
        seq_len = logits.shape[1]
        prompt_width = seq_len - response_width
        if response_width and prompt_width < 1:
            raise ValueError("the first response token needs a prompt column before it")
        rows = logits[:, prompt_width - 1 : seq_len - 1, :] if response_width else logits[:, :0, :]
        tokens = input_ids[:, prompt_width:]
        valid = attention_mask[:, prompt_width:].bool()
        logprobs = _gather_token(torch.log_softmax(rows / temperature, dim=-1), tokens)
        return torch.where(valid, logprobs, 0.0)

    def sampling_logprobs(
        self,
        logits: torch.Tensor,
        responses: torch.Tensor,
        response_mask: torch.Tensor,
        temperature: float = 1.0,
        top_k: int = -1,
        top_p: float = 1.0,
    ) -> torch.Tensor:
        """logprob.sampling_distribution: (B, T) log-probs under the sampled distribution."""
        scaled = logits / temperature
        keep = _sampling_keep_mask(scaled, top_k, top_p, self.profile.get("top_k_ties", "keep"))
        logprobs = torch.log_softmax(scaled.masked_fill(~keep, float("-inf")), dim=-1)
        return torch.where(response_mask.bool(), _gather_token(logprobs, responses), 0.0)

    def logprobs_on_support(
        self,
        logits: torch.Tensor,
        responses: torch.Tensor,
        keep_mask: torch.Tensor,
        response_mask: torch.Tensor,
        temperature: float = 1.0,
    ) -> torch.Tensor:
        """logprob.keep_sampling_mask: (B, T) log-probs renormalised over the kept ids only."""
        scaled = (logits / temperature).masked_fill(~keep_mask.bool(), float("-inf"))
        logprobs = _gather_token(torch.log_softmax(scaled, dim=-1), responses)
        return torch.where(response_mask.bool(), logprobs, 0.0)

    def entropy_from_logits(self, logits: torch.Tensor) -> torch.Tensor:
        """entropy.from_logits: (..., V) -> (...) H = -sum p log p (= logsumexp - sum p x)."""
        logp = torch.log_softmax(logits, dim=-1)
        p = logp.exp()
        return -torch.where(p > 0, p * logp, 0.0).sum(dim=-1)

    def entropy_mean(self, logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """entropy.from_logits: mean of H over valid positions only; 0 when there are none."""
        valid = mask.bool()
        per_token = torch.where(valid, self.entropy_from_logits(logits), 0.0)
        return per_token.sum() / valid.sum().clamp(min=1)

"""Oracle-target operations for `logprob`: padded tensors -> ragged lists -> oracle -> padded."""

from __future__ import annotations

import math

import torch

from rlconform.adapters.oracle_target._convert import row_lengths
from rlconform.conformance.harness import pad_right, to_float_list
from rlconform.oracle import logprob as oracle_logprob


class LogprobOps:
    """`logprob` and `entropy` operations that delegate to `rlconform.oracle.logprob`."""

    def response_logprobs(
        self,
        logits: torch.Tensor,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        response_width: int,
        temperature: float = 1.0,
    ) -> torch.Tensor:
        prompt_width = logits.shape[1] - response_width
        rows = []
        for sample_logits, ids, mask in zip(
            to_float_list(logits), input_ids.tolist(), attention_mask.tolist(), strict=True
        ):
            real = [c for c, m in enumerate(mask) if m]
            rows.append(
                oracle_logprob.response_logprobs(
                    [sample_logits[c] for c in real],
                    [ids[c] for c in real],
                    sum(mask[:prompt_width]),
                    temperature=temperature,
                )
            )
        return pad_right(rows, width=response_width, dtype=logits.dtype, device=logits.device)

    def sampling_logprobs(
        self,
        logits: torch.Tensor,
        responses: torch.Tensor,
        response_mask: torch.Tensor,
        temperature: float = 1.0,
        top_k: int = -1,
        top_p: float = 1.0,
    ) -> torch.Tensor:
        ties = self.profile.get("top_k_ties", "keep")
        rows = [
            [
                oracle_logprob.sampling_logprob(
                    row, token, temperature=temperature, top_k=top_k, top_p=top_p, top_k_ties=ties
                )
                for row, token in zip(sample_logits[:n], tokens[:n], strict=True)
            ]
            for sample_logits, tokens, n in zip(
                to_float_list(logits), responses.tolist(), row_lengths(response_mask), strict=True
            )
        ]
        return pad_right(rows, width=responses.shape[-1], dtype=logits.dtype, device=logits.device)

    def logprobs_on_support(
        self,
        logits: torch.Tensor,
        responses: torch.Tensor,
        keep_mask: torch.Tensor,
        response_mask: torch.Tensor,
        temperature: float = 1.0,
    ) -> torch.Tensor:
        rows = [
            [
                oracle_logprob.support_logprob(
                    row, token, [v for v, k in enumerate(kept) if k], temperature=temperature
                )
                for row, token, kept in zip(sample_logits[:n], tokens[:n], keeps[:n], strict=True)
            ]
            for sample_logits, tokens, keeps, n in zip(
                to_float_list(logits),
                responses.tolist(),
                keep_mask.tolist(),
                row_lengths(response_mask),
                strict=True,
            )
        ]
        return pad_right(rows, width=responses.shape[-1], dtype=logits.dtype, device=logits.device)

    def entropy_from_logits(self, logits: torch.Tensor) -> torch.Tensor:
        # No mask here: positions with non-finite logits are padding, reported as NaN.
        rows = [
            [
                oracle_logprob.entropy(row) if all(math.isfinite(x) for x in row) else math.nan
                for row in sample_logits
            ]
            for sample_logits in to_float_list(logits)
        ]
        return pad_right(rows, width=logits.shape[1], dtype=logits.dtype, device=logits.device)

    def entropy_mean(self, logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        value = oracle_logprob.entropy_mean(to_float_list(logits), mask.tolist())
        return torch.tensor(value, dtype=logits.dtype, device=logits.device)

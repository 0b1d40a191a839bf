"""torchref operations for the CONTRACT area `mask` (vectorized torch, any device)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch


class MaskOps:
    """Vectorized `mask` operations in the canonical padded layout."""

    def response_mask_from_eos(
        self, response_ids: torch.Tensor, eos_token: int | Sequence[int]
    ) -> torch.Tensor:
        """mask.response_from_eos: (B, T) ids -> (B, T) int64, 1 through the first EOS."""
        eos_ids = [eos_token] if isinstance(eos_token, int) else list(eos_token)
        eos_ids_tensor = torch.tensor(eos_ids, dtype=response_ids.dtype, device=response_ids.device)
        is_eos = torch.isin(response_ids, eos_ids_tensor).to(torch.int64)
        if is_eos.shape[-1] == 0:
            return is_eos
        from_first_eos = is_eos.cummax(dim=-1).values
        after_first_eos = torch.nn.functional.pad(from_first_eos[..., :-1], (1, 0))
        return 1 - after_first_eos

    def response_mask_from_attention(
        self, attention_mask: torch.Tensor, response_width: int
    ) -> torch.Tensor:
        """mask.response_from_attention: the last R columns of a conforming (B, P + R) mask.

        Raises ValueError, naming the rows, when the mask holds values other than 0/1, a
        right-padded (or holed) prompt, or a left-padded (or holed) response.
        """
        width = attention_mask.shape[-1]
        if not 0 <= response_width <= width:
            raise ValueError(f"response width {response_width} outside [0, {width}]")
        mask = attention_mask.to(torch.int64)
        prompt = mask[:, : width - response_width]
        response = mask[:, width - response_width :]
        problems = {
            "a value other than 0 or 1": ((mask != 0) & (mask != 1)).any(dim=-1),
            "a prompt that is not left-padded (0 after 1)": (prompt[:, 1:] < prompt[:, :-1]).any(
                dim=-1
            ),
            "a response that is not right-padded (1 after 0)": (
                response[:, 1:] > response[:, :-1]
            ).any(dim=-1),
        }
        for what, bad_rows in problems.items():
            if bool(bad_rows.any()):
                rows = torch.nonzero(bad_rows).flatten().tolist()
                raise ValueError(
                    f"attention_mask violates the padded layout: rows {rows} have {what}; "
                    "expected left-padded prompts and right-padded responses"
                )
        return response.clone()

    def valid_token_mask(
        self, response_mask: torch.Tensor, loss_mask: torch.Tensor, keep_mask: torch.Tensor
    ) -> torch.Tensor:
        """mask.loss: (B, T) response ∩ (B, T) loss mask ∩ (B,) task keep flag, as int64."""
        keep = keep_mask.reshape(-1, 1).bool()
        return (response_mask.bool() & loss_mask.bool() & keep).to(torch.int64)

    def masked_mean(self, values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """mask.loss: sum over mask-1 positions / their count; values elsewhere never read."""
        selected = mask.bool()
        total = torch.where(selected, values, torch.zeros_like(values)).sum()
        count = selected.sum()
        empty = torch.full_like(total, self.profile.get("masked_mean_empty", 0.0))
        return torch.where(count > 0, total / count.clamp(min=1), empty)

    def multi_turn_loss_mask(
        self, conversations: Sequence[Sequence[dict[str, Any]]]
    ) -> torch.Tensor:
        """mask.multi_turn: (B, T) int64 loss mask over ``header + think + content`` per message."""
        mask_think = bool(self.profile.get("mask_think_block", False))
        rows = []
        for messages in conversations:
            pieces = []
            for message in messages:
                trained = message["role"] == "assistant" and message.get("step_loss_mask", 1) == 1
                pieces.append(torch.zeros(len(message.get("header", [])), dtype=torch.int64))
                pieces.append(
                    torch.full((len(message.get("think", [])),), int(trained and not mask_think))
                )
                pieces.append(torch.full((len(message.get("content", [])),), int(trained)))
            rows.append(torch.cat(pieces) if pieces else torch.zeros(0, dtype=torch.int64))
        width = max((len(row) for row in rows), default=0)
        out = torch.zeros((len(rows), width), dtype=torch.int64)
        for i, row in enumerate(rows):
            out[i, : len(row)] = row
        return out.to(self.device)

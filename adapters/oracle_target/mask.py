"""Oracle-target operations for `mask`: padded tensors -> ragged lists -> oracle -> padded."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from rlconform.adapters.oracle_target._convert import binary_rows, row_lengths
from rlconform.conformance.harness import pad_right, to_float_list
from rlconform.oracle import mask as oracle_mask


class MaskOps:
    """`mask` operations that delegate to `rlconform.oracle.mask`."""

    def response_mask_from_eos(
        self, response_ids: torch.Tensor, eos_token: int | Sequence[int]
    ) -> torch.Tensor:
        rows = [oracle_mask.response_mask_from_eos(row, eos_token) for row in response_ids.tolist()]
        return torch.tensor(rows, dtype=torch.int64, device=response_ids.device).reshape(
            response_ids.shape
        )

    def response_mask_from_attention(
        self, attention_mask: torch.Tensor, response_width: int
    ) -> torch.Tensor:
        rows = [
            oracle_mask.response_mask_from_attention(row, response_width, uid=f"row {i}")
            for i, row in enumerate(attention_mask.tolist())
        ]
        return torch.tensor(rows, dtype=torch.int64, device=attention_mask.device).reshape(
            attention_mask.shape[0], response_width
        )

    def valid_token_mask(
        self, response_mask: torch.Tensor, loss_mask: torch.Tensor, keep_mask: torch.Tensor
    ) -> torch.Tensor:
        # The oracle sees only the real tokens (response_mask 1); padding stays 0.
        lengths = row_lengths(response_mask)
        rows = [
            oracle_mask.valid_token_mask(
                [1] * n, [1 if m else 0 for m in row[:n]], int(keep), uid=f"row {i}"
            )
            for i, (n, row, keep) in enumerate(
                zip(lengths, to_float_list(loss_mask), keep_mask.tolist(), strict=True)
            )
        ]
        return pad_right(
            rows, width=response_mask.shape[-1], dtype=torch.int64, device=response_mask.device
        )

    def masked_mean(self, values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        result = oracle_mask.masked_mean(
            to_float_list(values),
            binary_rows(mask),
            empty=self.profile.get("masked_mean_empty", 0.0),
        )
        return torch.tensor(result, dtype=values.dtype, device=values.device)

    def multi_turn_loss_mask(
        self, conversations: Sequence[Sequence[dict[str, Any]]]
    ) -> torch.Tensor:
        rows = [
            oracle_mask.multi_turn_loss_mask(
                messages, mask_think_block=bool(self.profile.get("mask_think_block", False)), uid=i
            )
            for i, messages in enumerate(conversations)
        ]
        return pad_right(rows, dtype=torch.int64, device=self.device)

"""Oracle-target operations for `agg`: padded tensors -> ragged lists -> oracle -> scalar."""

from __future__ import annotations

from typing import Any

import torch

from rlconform.adapters.oracle_target._convert import pad_like
from rlconform.conformance.harness import to_float_list
from rlconform.oracle import aggregate as oracle_agg

# The contract default of the profile key ``agg_norm_length`` (see the agg clauses).
DEFAULT_NORM_LENGTH = 10


class _OracleAggregate(torch.autograd.Function):
    """Forward: the oracle's value; backward: the oracle's analytic per-token weights."""

    @staticmethod
    def forward(
        ctx: Any, loss_mat: torch.Tensor, masks: list, mode: str, settings: dict
    ) -> torch.Tensor:
        value = oracle_agg.aggregate(to_float_list(loss_mat), masks, mode, **settings)
        weights = oracle_agg.aggregate_gradient(masks, mode, **settings)
        ctx.save_for_backward(pad_like(weights, loss_mat))
        return torch.tensor(value, dtype=loss_mat.dtype, device=loss_mat.device)

    @staticmethod
    def backward(ctx: Any, grad_output: torch.Tensor) -> tuple:
        (weights,) = ctx.saved_tensors
        return grad_output * weights, None, None, None


class AggregateOps:
    """`agg` operations that delegate to `rlconform.oracle.aggregate`."""

    def agg_loss(
        self,
        loss_mat: torch.Tensor,
        loss_mask: torch.Tensor,
        mode: str,
        dp_size: int = 1,
        batch_num_tokens: int | torch.Tensor | None = None,
        global_batch_size: int | torch.Tensor | None = None,
        loss_scale_factor: float | None = None,
    ) -> torch.Tensor:
        if loss_scale_factor is None:
            loss_scale_factor = self.profile.get("agg_norm_length", DEFAULT_NORM_LENGTH)
        settings = {
            "dp_size": int(dp_size),
            "num_tokens": None if batch_num_tokens is None else int(batch_num_tokens),
            "num_sequences": None if global_batch_size is None else int(global_batch_size),
            "norm_length": float(loss_scale_factor),
        }
        return _OracleAggregate.apply(loss_mat, _mask_rows(loss_mask), mode, settings)

    def agg_batch_info(self, loss_mask: torch.Tensor) -> dict[str, int]:
        masks = _mask_rows(loss_mask)
        return {
            "batch_num_tokens": oracle_agg.action_token_count(masks),
            "global_batch_size": oracle_agg.sequence_count(masks),
        }


def _mask_rows(loss_mask: torch.Tensor) -> list[list[int]]:
    return [[int(m) if m in (0, 1) else m for m in row] for row in to_float_list(loss_mask)]

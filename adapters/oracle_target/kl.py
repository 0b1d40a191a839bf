"""Oracle-target operations for `kl`: padded tensors -> ragged lists -> oracle -> padded."""

from __future__ import annotations

from typing import Any

import torch

from rlconform.conformance.harness import pad_right, to_float_list
from rlconform.oracle import kl as oracle_kl


class OracleGradient(torch.autograd.Function):
    """Returns precomputed oracle values; backward multiplies by the oracle's d value / d input."""

    @staticmethod
    def forward(
        ctx: Any, leaf: torch.Tensor, values: torch.Tensor, grads: torch.Tensor
    ) -> torch.Tensor:
        ctx.save_for_backward(grads)
        return values.clone()

    @staticmethod
    def backward(ctx: Any, grad_output: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        (grads,) = ctx.saved_tensors
        return grad_output * grads, None, None


def _like(rows: list[list[float]], template: torch.Tensor) -> torch.Tensor:
    return pad_right(rows, width=template.shape[-1], dtype=template.dtype, device=template.device)


def _with_oracle_gradient(
    leaf: torch.Tensor, values: list[list[float]], grads: list[list[float]]
) -> torch.Tensor:
    return OracleGradient.apply(leaf, _like(values, leaf), _like(grads, leaf))


class KLOps:
    """`kl` operations that delegate to `rlconform.oracle.kl`."""

    def _clamps(self) -> dict[str, float | None]:
        return {
            "ref_clamp": self.profile.get("kl_ref_clamp", 20.0),
            "value_clamp": self.profile.get("k3_value_clamp", 10.0),
        }

    def kl_penalty(
        self, logprob: torch.Tensor, ref_logprob: torch.Tensor, mode: str
    ) -> torch.Tensor:
        rows = [
            oracle_kl.kl_penalty(lp, rf, mode, **self._clamps())
            for lp, rf in zip(to_float_list(logprob), to_float_list(ref_logprob), strict=True)
        ]
        return _with_oracle_gradient(logprob, [r[0] for r in rows], [r[1] for r in rows])

    def importance_weighted_kl(
        self,
        logprob: torch.Tensor,
        ref_logprob: torch.Tensor,
        old_logprob: torch.Tensor,
        mode: str,
    ) -> torch.Tensor:
        log_ratio_clamp = self.profile.get("kl_is_log_ratio_clamp", 20.0)
        rows = [
            oracle_kl.importance_weighted_kl(
                lp, rf, od, mode, log_ratio_clamp=log_ratio_clamp, **self._clamps()
            )
            for lp, rf, od in zip(
                to_float_list(logprob),
                to_float_list(ref_logprob),
                to_float_list(old_logprob),
                strict=True,
            )
        ]
        return _with_oracle_gradient(logprob, [r[0] for r in rows], [r[1] for r in rows])

    def apply_kl_in_reward(
        self,
        token_scores: torch.Tensor,
        old_logprob: torch.Tensor,
        ref_logprob: torch.Tensor,
        response_mask: torch.Tensor,
        beta: float,
        mode: str,
    ) -> tuple[torch.Tensor, float]:
        olds, refs = to_float_list(old_logprob), to_float_list(ref_logprob)
        masks = [[int(m) for m in row] for row in response_mask.tolist()]
        rewards = [
            oracle_kl.kl_in_reward(s, od, rf, m, beta=float(beta), mode=mode, **self._clamps())
            for s, od, rf, m in zip(to_float_list(token_scores), olds, refs, masks, strict=True)
        ]
        metric = oracle_kl.kl_in_reward_metric(
            olds,
            refs,
            masks,
            mode=mode,
            reduction=self.profile.get("kl_metric_reduction", "token_mean"),
            **self._clamps(),
        )
        return _like(rewards, token_scores), metric

    def kl_controller_update(
        self,
        kind: str,
        value: float,
        current_kl: float,
        n_steps: int,
        target_kl: float,
        horizon: float,
    ) -> float:
        return oracle_kl.kl_controller_update(
            kind, value, current_kl, n_steps, target_kl=target_kl, horizon=horizon
        )

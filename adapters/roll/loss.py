"""ROLL bindings for the CONTRACT area `loss`: the actors' and the critic's ``loss_func``.

ROLL's policy loss is a method, ``ActorWorker.loss_func(self, data, output_tensor)``, that
takes the log-probs from ``self.strategy.op_compute_log_probs(output_tensor, ...)``, builds
the per-token PPO loss and reduces it itself with ``agg_loss`` (rlvr actor:
``roll/pipeline/rlvr/actor_worker.py``; agentic actor, for multi-turn responses with mask
holes: ``roll/pipeline/agentic/agentic_actor_worker.py``). The value loss is
``CriticWorker.loss_func`` (``roll/pipeline/base_worker.py``). Their modules import the
distributed runtime, so each method is compiled from its source file (``source.py``) and
called with a stub ``self``: ``pipeline_config`` (ROLL's config defaults plus the case's
clip settings), ``strategy`` whose ``op_compute_log_probs`` hands back the log-probs the
model produced (``output_tensor`` here *is* that (B, L - 1) grid, so the gradient reaches
the case's ``log_prob``), and the worker's own ``get_old_log_probs_with_cache`` /
``compute_sample_weights`` / ``forward_func_values``, compiled from ROLL the same way.

The contract compares per-token losses; ``loss_func`` returns one scalar. Each action token
(i, t) is read out by one ``loss_func`` call whose loss mask (``final_response_mask`` for the
rlvr actor, ``response_mask`` for the agentic one, row i alone for the critic) holds only
(i, t), under ``loss_agg_mode="seq-mean-token-sum"`` (actors) with one valid sample: the
scalar is then exactly that token's loss (``masked_sum`` of one element / (1 + 1e-8)) and
its autograd gradient is that token's. The metrics come from one call on the whole batch
under ROLL's default configuration: the actor's ``actor/clipfrac@sum`` (``torch.lt(surr2,
surr1)``, where the clipped term is chosen, aggregated with the default ``loss_agg_mode``
"seq-mean-token-mean"), the critic's ``critic/clipfrac``.
"""

from __future__ import annotations

import copy
import types
from typing import Any

import torch

from rlconform.adapters.base import Unsupported
from rlconform.adapters.roll.advantage import has_holes
from rlconform.adapters.roll.common import RollCommon
from rlconform.adapters.roll.layout import RollLayout


class _Strategy:
    """``self.strategy`` of a worker: the model's outputs are the log-probs / values."""

    def __init__(self, entropy: torch.Tensor | None = None):
        self.entropy = entropy

    def op_compute_log_probs(self, logits: torch.Tensor, input_ids: Any, attention_mask: Any):
        return logits

    def op_compute_entropy(self, logits: Any, attention_mask: Any) -> torch.Tensor:
        return self.entropy


def _per_token(
    picked: list[tuple[tuple[int, int], torch.Tensor]],
    batch_loss: torch.Tensor,
    response_mask: torch.Tensor,
    dtype: torch.dtype,
) -> torch.Tensor:
    """The (B, T) per-token losses read out at the action tokens. Every other position holds
    ROLL's loss of the whole batch (broadcast, not read by anyone), which keeps the result
    on the autograd graph when the batch has no action token at all."""
    loss = batch_loss.reshape(()).to(dtype).expand(response_mask.shape)
    if not picked:
        return loss
    index = torch.tensor([p for p, _ in picked], device=response_mask.device).T
    values = torch.stack([v.reshape(()) for _, v in picked]).to(dtype)
    return loss.index_put((index[0], index[1]), values)


class LossBindings(RollCommon):
    """`loss` operations: PPO clip and dual clip (actor ``loss_func``), clipped value loss
    (critic ``loss_func``)."""

    # ------------------------------------------------------------------ stubs

    def _actor_config(self, clip_low: float, clip_high: float, clip_c: float | None) -> Any:
        """ROLL's PPO defaults plus the case's clipping. ROLL's dual-clip constant is
        1 + 2 pg_clip and its clip range is (pg_clip_low, pg_clip_high) under
        ``use_pg_clip_range``: any (low, high, c) is expressed with pg_clip = (c - 1) / 2."""
        corrections = self.runtime.corrections
        if corrections is None:
            raise RuntimeError(
                f"roll.utils.train_infer_corrections: {self.runtime.corrections_error}"
            )
        return self._config(
            use_pg_clip_range=True,
            pg_clip_low=clip_low,
            pg_clip_high=clip_high,
            pg_clip=0.2 if clip_c is None else (clip_c - 1.0) / 2.0,
            dual_clip_loss=clip_c is not None,
            loss_agg_mode="seq-mean-token-sum",
            enable_old_logprobs_recompute=False,
            train_infer_correction=self.config_module.TrainInferCorrectionConfig(),
            ratio_type="token",
            use_kl_loss=False,
            entropy_loss_coef=0,
        )

    def _worker(self, config: Any, strategy: _Strategy, agentic: bool) -> types.SimpleNamespace:
        worker = types.SimpleNamespace(
            pipeline_config=config, strategy=strategy, _logprobs_cache={}, logger=None
        )
        worker.get_old_log_probs_with_cache = types.MethodType(
            self.sources.get("old_log_probs"), worker
        )
        worker.compute_sample_weights = types.MethodType(
            self.sources.get("rlvr_sample_weights"), worker
        )
        key = "agentic_actor_loss" if agentic else "rlvr_actor_loss"
        worker.loss_func = types.MethodType(self.sources.get(key), worker)
        return worker

    def _actor_data(
        self,
        layout: RollLayout,
        old: torch.Tensor,
        advantages: torch.Tensor,
        response_mask: torch.Tensor,
        loss_mask: torch.Tensor,
        agentic: bool,
    ) -> Any:
        """The mini-batch ``loss_func`` reads: ``loss_mask`` (canonical, (B, R)) is the mask
        the loss reduces over (final_response_mask, or the agentic response_mask)."""
        grid_loss_mask = layout.tokens_to_roll(loss_mask, fill=0)
        fields = self._sequence_fields(layout, loss_mask if agentic else response_mask)
        old_grid = layout.tokens_to_roll(old, fill=0.0)
        tensors = {
            **fields,
            "input_ids": torch.zeros_like(fields["attention_mask"]),
            "old_log_probs": old_grid,
            "ref_log_probs": old_grid.clone(),
            "advantages": layout.tokens_to_roll(advantages, fill=0.0),
        }
        if not agentic:
            tensors["final_response_mask"] = grid_loss_mask
        # The strategy's counts of the mini-batch (ROLL's own counters, one rank).
        tokens, samples, _ = self.counted(grid_loss_mask, None)
        counts = {"response_mask": tokens, "final_response_mask": tokens}
        valid = {"response_mask": samples, "final_response_mask": samples}
        return self._proto(
            tensors, meta={"batch_num_tokens": counts, "global_valid_samples": valid}
        )

    # ------------------------------------------------------------------ policy loss

    def ppo_clip_loss(
        self,
        old_log_prob: torch.Tensor,
        log_prob: torch.Tensor,
        advantages: torch.Tensor,
        response_mask: torch.Tensor,
        *,
        clip_ratio_low: float,
        clip_ratio_high: float,
        clip_ratio_c: float | None = None,
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """loss.ppo_clip / loss.dual_clip -> ``ActorWorker.loss_func`` (rlvr actor; the
        agentic actor for responses with mask holes), read out per token (module docstring)."""
        if clip_ratio_c is not None and not clip_ratio_c > 1.0:
            raise Unsupported(f"ROLL's dual-clip constant 1 + 2 pg_clip > 1, not {clip_ratio_c}")
        agentic = has_holes(response_mask)
        layout = self._layout(response_mask)
        config = self._actor_config(clip_ratio_low, clip_ratio_high, clip_ratio_c)
        logp_grid = layout.tokens_to_roll(log_prob, fill=0.0)
        worker = self._worker(config, _Strategy(), agentic)
        full_config = copy.copy(config)
        full_config.loss_agg_mode = self.config_defaults.get("loss_agg_mode", "seq-mean-token-mean")
        full = self._worker(full_config, _Strategy(), agentic)
        data = self._actor_data(
            layout, old_log_prob, advantages, response_mask, response_mask, agentic
        )
        batch_loss, metrics = full.loss_func(data, logp_grid)
        picked = []
        for i, t in response_mask.nonzero().tolist():
            one = torch.zeros_like(response_mask)
            one[i, t] = 1
            data = self._actor_data(layout, old_log_prob, advantages, response_mask, one, agentic)
            value, _ = worker.loss_func(data, logp_grid)
            picked.append(((i, t), value))
        loss = _per_token(picked, batch_loss, response_mask, log_prob.dtype)
        return loss, {"clipfrac": float(metrics["actor/clipfrac@sum"])}

    def policy_loss_reduced(
        self,
        mode: str,
        old_log_prob: torch.Tensor,
        log_prob: torch.Tensor,
        advantages: torch.Tensor,
        response_mask: torch.Tensor,
        *,
        clip_ratio_low: float,
        clip_ratio_high: float,
        clip_ratio_c: float | None = None,
        global_batch_info: dict[str, Any],
    ) -> torch.Tensor:
        """loss.* (reduced, shard_invariance) -> one ``ActorWorker.loss_func`` call on the
        micro-batch, as ``strategy.train_step`` makes it: ``loss_agg_mode`` from the profile
        (ROLL's default seq-mean-token-mean), ``meta_info`` counts from the strategy's
        counters whose all-reduce gives the mini-batch totals of ``global_batch_info``, and
        the loss times ``dp_size`` (``apply_loss_scale``, see ``aggregate.py``)."""
        if mode not in ("ppo_clip", "dual_clip"):
            raise Unsupported(f"ROLL's actor loss_func has no policy loss {mode!r}")
        if global_batch_info.get("loss_scale_factor") is not None:
            raise Unsupported("ROLL's seq-mean-token-sum-norm takes no constant (grid width)")
        agentic = has_holes(response_mask)
        layout = self._layout(response_mask)
        config = self._actor_config(
            clip_ratio_low, clip_ratio_high, clip_ratio_c if mode == "dual_clip" else None
        )
        config.loss_agg_mode = self.profile.get("loss_agg_mode", "seq-mean-token-mean")
        data = self._actor_data(
            layout, old_log_prob, advantages, response_mask, response_mask, agentic
        )
        grid_mask = layout.tokens_to_roll(response_mask, fill=0)
        totals = (
            int(global_batch_info["batch_num_tokens"]),
            int(global_batch_info["global_batch_size"]),
        )
        tokens, samples, _ = self.counted(grid_mask, totals)
        data.meta_info["batch_num_tokens"] = {
            "response_mask": tokens,
            "final_response_mask": tokens,
        }
        data.meta_info["global_valid_samples"] = {
            "response_mask": samples,
            "final_response_mask": samples,
        }
        worker = self._worker(config, _Strategy(), agentic)
        value, _ = worker.loss_func(data, layout.tokens_to_roll(log_prob, fill=0.0))
        dp_size = int(global_batch_info.get("dp_size", 1))
        return value * dp_size if dp_size != 1 else value

    # ------------------------------------------------------------------ value loss

    def value_loss(
        self,
        vpreds: torch.Tensor,
        returns: torch.Tensor,
        values: torch.Tensor,
        response_mask: torch.Tensor,
        *,
        cliprange_value: float,
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """loss.value_clip -> ``CriticWorker.loss_func`` with ``value_clip=cliprange_value``:
        0.5 * masked_mean(max(surr1, surr2), response_mask, dim=-1).mean(); ``output_tensor``
        is the value head's (B, L, 1) output, of which ``forward_func_values`` keeps
        ``[:, :-1]``."""
        layout = self._layout(response_mask)
        config = self._config(value_clip=cliprange_value)
        worker = types.SimpleNamespace(pipeline_config=config)
        worker.forward_func_values = types.MethodType(self.sources.get("critic_values"), worker)
        loss_func = types.MethodType(self.sources.get("critic_loss"), worker)
        grid = layout.tokens_to_roll(vpreds, fill=0.0)
        output = torch.cat([grid, torch.zeros_like(grid[:, :1])], dim=-1).unsqueeze(-1)
        old_grid = layout.tokens_to_roll(values, fill=0.0)
        returns_grid = layout.tokens_to_roll(returns, fill=0.0)

        def data_for(rows: list[int], mask: torch.Tensor) -> Any:
            sub = RollLayout.build(
                layout.lengths[rows],
                layout.response_width,
                layout.prompt_lengths[rows],
                layout.width,
            )
            return self._proto(
                {
                    **self._sequence_fields(sub, mask[rows]),
                    "values": old_grid[rows],
                    "returns": returns_grid[rows],
                }
            )

        everyone = list(range(response_mask.shape[0]))
        batch_loss, metrics = loss_func(data_for(everyone, response_mask), output)
        picked = []
        for i, t in response_mask.nonzero().tolist():
            one = torch.zeros_like(response_mask)
            one[i, t] = 1
            value, _ = loss_func(data_for([i], one), output[[i]])
            picked.append(((i, t), value))
        loss = _per_token(picked, batch_loss, response_mask, vpreds.dtype)
        return loss, {"vf_clipfrac": float(metrics["critic/clipfrac"])}

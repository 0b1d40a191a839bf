"""Policy losses, the KL term and loss aggregation on TRL's Liger branch.

Every operation runs ``GRPOTrainer.compute_loss`` with ``use_liger_kernel=True``
(``fused.py``): TRL's ``compute_liger_loss`` forms the loss mask, hands the micro-batch to
Liger, divides by the accumulation steps and logs the metrics.

- ``ppo_clip_loss`` (``delta`` = TRL's dual clip), ``gspo_loss``, ``cispo_loss``,
  ``sapo_loss``, ``kl_penalty`` / ``importance_weighted_kl`` and ``agg_loss``: one-chunk
  mode, the per-token loss ``per_token_loss`` and KL ``kl_div`` read back from
  ``ppo_loss_fn``'s frame at its return (``capture_locals``);
- ``policy_loss_reduced``: the fused loss itself (hidden states -> float32 log-probs in
  the fused kernel -> loss, its hand-written backward), the scalar the trainer
  back-propagates;
- ``agg_batch_info``: the scoring path's ``num_items_in_batch``, TRL's own
  (``adapters/trl/loss.py``).

Liger takes one advantage per completion (``advantages.unsqueeze(1)``): a case whose
advantages vary along a sequence is ``Inexpressible``. ``agg_loss`` carries the loss
matrix as the vLLM IS ratio, the one per-token multiplier of Liger's per-token loss: with
the log-probs as their own old ones (ratio 1) and advantage -1 the per-token loss is
``1 * ratio = loss_mat`` (values, NaN and inf alike), and its gradient w.r.t. ``loss_mat``
is the aggregation weight. Liger divides dapo's ``num_items_in_batch`` by
``torch.distributed``'s world size, not the accelerator's process count: with more than
one data-parallel rank the one-process shell cannot express it.
"""

from __future__ import annotations

from typing import Any

import torch

from rlconform.adapters.base import Inexpressible, Unsupported
from rlconform.adapters.trl import layout
from rlconform.adapters.trl import loss as trl_loss
from rlconform.adapters.trl.shell import capture_locals, last_metric

# loss types whose normaliser Liger divides by the world size (_compute_dapo_normalizer)
_WORLD_NORMALISED = ("dapo", "cispo", "vespo")
CLIP_METRIC = "clip_ratio"  # compute_liger_loss's name


class LigerLossBindings:
    """The loss-area operations of TRL's Liger branch (module docstring)."""

    fused: Any
    profile: Any

    agg_batch_info = trl_loss.LossBindings.agg_batch_info

    # -- policy losses ------------------------------------------------------------------

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
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        """loss_type dapo's per-token clipped surrogate; ``delta`` is the dual clip."""
        mode = "ppo_clip" if clip_ratio_c is None else "dual_clip"
        fields = trl_loss._loss_fields(mode, clip_ratio_low, clip_ratio_high, clip_ratio_c)
        return self._per_token(fields, old_log_prob, log_prob, advantages, response_mask)

    def gspo_loss(
        self,
        old_log_prob: torch.Tensor,
        log_prob: torch.Tensor,
        advantages: torch.Tensor,
        response_mask: torch.Tensor,
        *,
        clip_ratio_low: float,
        clip_ratio_high: float,
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        """importance_sampling_level='sequence', loss_type dapo."""
        fields = trl_loss._loss_fields("gspo", clip_ratio_low, clip_ratio_high, None)
        return self._per_token(fields, old_log_prob, log_prob, advantages, response_mask)

    def cispo_loss(
        self,
        old_log_prob: torch.Tensor,
        log_prob: torch.Tensor,
        advantages: torch.Tensor,
        response_mask: torch.Tensor,
        *,
        clip_ratio_low: float,
        clip_ratio_high: float,
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        """loss_type cispo (``epsilon_high`` is the weight's upper bound, as in TRL)."""
        fields = trl_loss._loss_fields("cispo", clip_ratio_low, clip_ratio_high, None)
        return self._per_token(fields, old_log_prob, log_prob, advantages, response_mask)

    def sapo_loss(
        self,
        old_log_prob: torch.Tensor,
        log_prob: torch.Tensor,
        advantages: torch.Tensor,
        response_mask: torch.Tensor,
        *,
        tau_pos: float,
        tau_neg: float,
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        """loss_type sapo with its two temperatures (Liger's ``clip_ratio`` for sapo is a
        constant 0, no metric of the clause)."""
        fields = trl_loss.sapo_fields(tau_pos, tau_neg)
        per_token_loss, _ = self._per_token(
            fields, old_log_prob, log_prob, advantages, response_mask
        )
        return per_token_loss, {}

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
        """The scalar the fused branch returns for one micro-batch, aggregated by the loss
        type of the profile's ``loss_agg_mode``, with the mini-batch's global denominators."""
        fields = trl_loss._loss_fields(mode, clip_ratio_low, clip_ratio_high, clip_ratio_c)
        agg_mode = self.profile.get("loss_agg_mode", "token-mean")
        loss_type = trl_loss.AGG_LOSS_TYPES.get(agg_mode)
        if fields["loss_type"] == "cispo":
            if loss_type != "dapo":
                raise Unsupported(f"cispo aggregates as token-mean only, not {agg_mode!r}")
        elif loss_type is None:
            raise Unsupported(f"TRL has no loss_type that aggregates as {agg_mode!r}")
        else:
            fields["loss_type"] = loss_type
        loss, _, _ = self._run(
            fields,
            log_prob,
            response_mask,
            advantages=advantages,
            old=old_log_prob,
            denominators=global_batch_info,
            fused=True,
        )
        return loss

    def _per_token(
        self,
        fields: dict[str, Any],
        old: torch.Tensor,
        log_prob: torch.Tensor,
        advantages: torch.Tensor,
        response_mask: torch.Tensor,
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        _, captured, metrics = self._run(
            fields,
            log_prob,
            response_mask,
            advantages=advantages,
            old=old,
            capture=("per_token_loss",),
        )
        per_token_loss = captured["per_token_loss"].expand(response_mask.shape)
        clipfrac = torch.tensor(last_metric(metrics, CLIP_METRIC), dtype=torch.float64)
        return per_token_loss, {"clipfrac": clipfrac}

    def _run(
        self,
        fields: dict[str, Any],
        log_prob: torch.Tensor,
        response_mask: torch.Tensor,
        *,
        advantages: torch.Tensor | None = None,
        per_sequence: torch.Tensor | None = None,
        old: torch.Tensor | None = None,
        ref: torch.Tensor | None = None,
        is_ratio: torch.Tensor | None = None,
        denominators: dict[str, Any] | None = None,
        fused: bool = False,
        capture: tuple[str, ...] = (),
    ) -> tuple[torch.Tensor, dict[str, Any], dict[str, list[float]]]:
        """One ``compute_loss`` call on the Liger branch: (its scalar, the captured
        ``ppo_loss_fn`` locals, the logged metrics)."""
        masks = trl_loss._micro_batch(response_mask)
        if per_sequence is None:
            per_sequence = layout.per_sequence(advantages, response_mask)
        if per_sequence is None:
            raise Inexpressible(
                "Liger's GRPO loss takes one advantage per completion (advantages.unsqueeze(1)); "
                "this case varies it along a sequence"
            )
        run = trl_loss._denominators(fields, response_mask, denominators or {})
        if run["num_processes"] != 1 and fields["loss_type"] in _WORLD_NORMALISED:
            raise Inexpressible(
                "Liger divides num_items_in_batch by torch.distributed's world size; the shell "
                f"runs one process, not {run['num_processes']} ranks"
            )
        args = self.fused.config(**fields)
        trainer = self.fused.trainer(
            args,
            num_processes=run["num_processes"],
            accumulation_steps=run["accumulation_steps"],
        )
        batch, width = masks.completion_mask.shape
        inputs: dict[str, Any] = {
            "prompt_ids": torch.zeros((batch, 1), dtype=torch.long),
            "prompt_mask": torch.ones((batch, 1), dtype=torch.long),
            # the generator's token ids: 1 on a completion's tokens, the pad id 0 after
            "completion_ids": masks.completion_mask.clone(),
            "completion_mask": masks.completion_mask,
            "advantages": per_sequence,
            "num_items_in_batch": run["num_items"],
        }
        optional = {
            "tool_mask": masks.tool_mask,
            "old_per_token_logps": old,
            "ref_per_token_logps": ref,
            "importance_sampling_ratio": is_ratio,
        }
        inputs.update({k: v for k, v in optional.items() if v is not None})
        with capture_locals(self.fused.function_cls.ppo_loss_fn, capture) as captured:
            loss = self.fused.loss(trainer, inputs, log_prob, fused=fused)
        return loss, captured, dict(trainer._metrics["train"])

    # -- KL -----------------------------------------------------------------------------

    def kl_penalty(
        self, logprob: torch.Tensor, ref_logprob: torch.Tensor, mode: str
    ) -> torch.Tensor:
        """``kl_div`` of ``ppo_loss_fn`` with beta != 0 and no bias correction (k3)."""
        trl_loss._k3_only(mode)
        fields = {"loss_type": "dapo", "beta": 1.0, "use_bias_correction_kl": False}
        return self._kl(fields, logprob, ref_logprob)

    def importance_weighted_kl(
        self,
        logprob: torch.Tensor,
        ref_logprob: torch.Tensor,
        old_logprob: torch.Tensor,
        mode: str,
    ) -> torch.Tensor:
        """``kl_div`` with use_bias_correction_kl: k3 x exp(logp - old)."""
        trl_loss._k3_only(mode)
        fields = {"loss_type": "dapo", "beta": 1.0, "use_bias_correction_kl": True}
        return self._kl(fields, logprob, ref_logprob, old=old_logprob)

    def _kl(
        self,
        fields: dict[str, Any],
        logprob: torch.Tensor,
        ref: torch.Tensor,
        old: torch.Tensor | None = None,
    ) -> torch.Tensor:
        batch, width = logprob.shape
        layout.require_micro_batch(logprob.shape)
        # element-wise: every position is a completion token (nothing is masked); the loss
        # type is TRL's default (the KL term does not depend on it)
        mask = torch.ones((batch, width), dtype=torch.long, device=logprob.device)
        _, captured, _ = self._run(
            fields,
            logprob,
            mask,
            per_sequence=torch.zeros(batch, dtype=logprob.dtype),
            old=old,
            ref=ref,
            capture=("kl_div",),
        )
        return captured["kl_div"]

    # -- aggregation --------------------------------------------------------------------

    def agg_loss(
        self,
        loss_mat: torch.Tensor,
        loss_mask: torch.Tensor,
        mode: str,
        dp_size: int = 1,
        batch_num_tokens: int | None = None,
        global_batch_size: int | None = None,
        loss_scale_factor: float | None = None,
    ) -> torch.Tensor:
        """The normaliser of the loss_type for ``mode`` on ``loss_mat`` (module docstring:
        the loss matrix rides as the IS ratio)."""
        loss_type = trl_loss.AGG_LOSS_TYPES.get(mode)
        if loss_type is None:
            raise Unsupported(f"TRL has no loss_type that aggregates as {mode!r}")
        batch, _ = loss_mat.shape
        layout.require_micro_batch(loss_mat.shape)
        denominators = {
            "dp_size": dp_size,
            "batch_num_tokens": batch_num_tokens,
            "global_batch_size": global_batch_size,
            "loss_scale_factor": loss_scale_factor,
        }
        loss, _, _ = self._run(
            {"loss_type": loss_type},
            torch.zeros_like(loss_mat).detach(),
            loss_mask,
            per_sequence=-torch.ones(batch, dtype=loss_mat.dtype),
            is_ratio=loss_mat,
            denominators=denominators,
        )
        return loss

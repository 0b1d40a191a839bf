"""Policy losses, the KL term and loss aggregation: all ``GRPOTrainer._compute_loss``.

``_compute_loss`` returns one scalar; the per-token loss and per-token KL it aggregates are
its locals ``per_token_loss`` / ``per_token_kl`` (names from the release's binding table),
read back at its return with their autograd graph (``shell.capture_locals``). The case's
``log_prob`` is what the shell's ``_get_per_token_logps_and_entropies`` returns, so every
gradient the clauses take runs through TRL's own code. Metrics are the values TRL appends
to ``_metrics['train']``.
"""

from __future__ import annotations

from typing import Any

import torch

from rlconform.adapters.base import Inexpressible, Unsupported
from rlconform.adapters.trl import layout
from rlconform.adapters.trl.shell import last_metric

# canonical aggregation mode -> the TRL loss_type whose normaliser it is
AGG_LOSS_TYPES = {
    "token-mean": "dapo",
    "seq-mean-token-mean": "grpo",
    "seq-mean-token-sum": "luspo",
    "seq-mean-token-sum-norm": "dr_grpo",
}
# loss types whose normaliser is the micro-batch's sequence count times the accumulation steps
_PER_SEQUENCE = ("grpo", "luspo", "dr_grpo")
_K3 = ("k3", "low_var_kl")


class LossBindings:
    """``ppo_clip_loss`` (with ``delta`` as the dual clip), ``gspo_loss``, ``cispo_loss``,
    ``kl_penalty`` / ``importance_weighted_kl`` (k3) and ``agg_loss`` / ``agg_batch_info``."""

    shell: Any
    release_table: Any

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
        """The clipped surrogate of loss_type dapo (grpo, bnpo, dr_grpo and luspo share the
        per-token formula); ``delta`` (two-sided clipping) is TRL's form of the dual clip."""
        if clip_ratio_c is not None and clip_ratio_c <= 1.0 + clip_ratio_high:
            raise Inexpressible(
                f"TRL's delta caps the ratio of every token; it is the dual clip only above "
                f"1 + epsilon_high ({1.0 + clip_ratio_high}), not at {clip_ratio_c}"
            )
        args = self.shell.config(
            loss_type="dapo",
            epsilon=clip_ratio_low,
            epsilon_high=clip_ratio_high,
            delta=clip_ratio_c,
        )
        loss = self._policy(args, old_log_prob, log_prob, advantages, response_mask, per_token=True)
        return loss[0], {"clipfrac": loss[1][self.release_table.clip_metric]}

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
        """importance_sampling_level='sequence' (GSPO), loss_type dapo."""
        args = self.shell.config(
            loss_type="dapo",
            importance_sampling_level="sequence",
            epsilon=clip_ratio_low,
            epsilon_high=clip_ratio_high,
        )
        loss = self._policy(
            args, old_log_prob, log_prob, advantages, response_mask, per_token=False
        )
        return loss[0], {"clipfrac": loss[1][self.release_table.clip_metric]}

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
        """loss_type cispo: TRL's ``epsilon_high`` is the weight's upper bound itself (the
        ScaleRL eps_max), so the contract's 1 + eps_high is passed; TRL has no lower bound."""
        if 1.0 - clip_ratio_low > 0.0:
            raise Inexpressible(
                f"TRL's cispo clamps the weight from above only; a lower bound "
                f"1 - {clip_ratio_low} > 0 cannot be set"
            )
        args = self.shell.config(loss_type="cispo", epsilon_high=1.0 + clip_ratio_high)
        loss = self._policy(args, old_log_prob, log_prob, advantages, response_mask, per_token=True)
        return loss[0], {"clipfrac": loss[1][self.release_table.cispo_clip_metric]}

    def _policy(
        self,
        args: Any,
        old: torch.Tensor,
        log_prob: torch.Tensor,
        advantages: torch.Tensor,
        response_mask: torch.Tensor,
        *,
        per_token: bool,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        masks = _micro_batch(response_mask)
        per_sequence = layout.per_sequence(advantages, response_mask)
        if per_sequence is None and not per_token:
            raise Inexpressible(
                "TRL's sequence-level ratio (GSPO) takes one advantage per sequence; this "
                "case varies it along a sequence"
            )
        # (B,) as GRPOTrainer's own advantages; (B, T) where they vary per token (the
        # shape _compute_loss accepts for subclasses).
        given = per_sequence if per_sequence is not None else advantages
        loss, captured, metrics = self.shell.compute_loss(
            args,
            logps=log_prob,
            completion_mask=masks.completion_mask,
            tool_mask=masks.tool_mask,
            advantages=given,
            old=old,
            num_items=_num_items(response_mask),
            capture=(self.release_table.loss_local,),
        )
        per_token_loss = captured[self.release_table.loss_local]
        value = per_token_loss.expand(response_mask.shape)
        clip = {
            key: torch.tensor(last_metric(metrics, key), dtype=torch.float64)
            for key in (self.release_table.clip_metric, self.release_table.cispo_clip_metric)
            if metrics.get(key)
        }
        return value, clip

    # -- KL -----------------------------------------------------------------------------

    def kl_penalty(
        self, logprob: torch.Tensor, ref_logprob: torch.Tensor, mode: str
    ) -> torch.Tensor:
        """``per_token_kl`` of ``_compute_loss`` with beta != 0 and no bias correction."""
        _k3_only(mode)
        args = self.shell.config(beta=1.0, use_bias_correction_kl=False)
        return self._kl(args, logprob, ref_logprob, old=None)

    def importance_weighted_kl(
        self,
        logprob: torch.Tensor,
        ref_logprob: torch.Tensor,
        old_logprob: torch.Tensor,
        mode: str,
    ) -> torch.Tensor:
        """``per_token_kl`` with use_bias_correction_kl (TRL's default): k3 x exp(logp - old)."""
        _k3_only(mode)
        args = self.shell.config(beta=1.0, use_bias_correction_kl=True)
        return self._kl(args, logprob, ref_logprob, old=old_logprob)

    def _kl(
        self,
        args: Any,
        logprob: torch.Tensor,
        ref: torch.Tensor,
        old: torch.Tensor | None,
    ) -> torch.Tensor:
        batch, width = logprob.shape
        if batch == 0:
            raise Inexpressible("TRL's micro-batches hold at least one completion")
        # element-wise: every position is a completion token (nothing is masked)
        mask = torch.ones((batch, width), dtype=torch.long, device=logprob.device)
        _, captured, _ = self.shell.compute_loss(
            args,
            logps=logprob,
            completion_mask=mask,
            tool_mask=None,
            advantages=torch.zeros(batch, dtype=logprob.dtype),
            old=old,
            ref=ref,
            num_items=torch.tensor(batch * width),
            capture=(self.release_table.kl_local,),
        )
        return captured[self.release_table.kl_local]

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
        """TRL's normaliser of the loss_type for ``mode`` applied to ``loss_mat``.

        The per-token loss ``_compute_loss`` aggregates is -min(r A, clip(r) A); with the
        log-probs as their own old (TRL's ``old = logps.detach()``: r = 1) and per-token
        advantages A = -loss_mat it is exactly loss_mat (values, NaN and inf alike), and its
        gradient w.r.t. loss_mat is TRL's aggregation weight.
        """
        loss_type = AGG_LOSS_TYPES.get(mode)
        if loss_type is None:
            raise Unsupported(f"TRL has no loss_type that aggregates as {mode!r}")
        batch, width = loss_mat.shape
        if batch == 0:
            raise Inexpressible("TRL's micro-batches hold at least one completion")
        fields: dict[str, Any] = {"loss_type": loss_type}
        if loss_type == "dr_grpo" and loss_scale_factor is not None:
            fields["max_completion_length"] = int(loss_scale_factor)
            if fields["max_completion_length"] != loss_scale_factor:
                raise Inexpressible(f"max_completion_length is an integer, not {loss_scale_factor}")
        accumulation = 1
        if loss_type in _PER_SEQUENCE and global_batch_size is not None:
            # an optimizer step of dp_size ranks x accumulation_steps micro-batches of
            # per_device_train_batch_size completions each: TRL's only global denominator
            steps, rest = divmod(int(global_batch_size), dp_size * batch)
            if rest or steps < 1:
                raise Inexpressible(
                    f"TRL's {loss_type} divides by the micro-batch's {batch} sequences times "
                    f"gradient_accumulation_steps; a global batch of {global_batch_size} "
                    f"sequences over {dp_size} ranks is no whole number of such micro-batches"
                )
            accumulation = steps
        args = self.shell.config(**fields)
        masks = _micro_batch(loss_mask)
        num_items = (
            torch.tensor(int(batch_num_tokens))
            if batch_num_tokens is not None
            else _num_items(loss_mask)
        )
        loss, _, _ = self.shell.compute_loss(
            args,
            logps=torch.zeros_like(loss_mat, dtype=loss_mat.dtype).detach(),
            completion_mask=masks.completion_mask,
            tool_mask=masks.tool_mask,
            advantages=-loss_mat,
            num_items=num_items,
            num_processes=dp_size,
            accumulation_steps=accumulation,
        )
        return loss

    def agg_batch_info(self, loss_mask: torch.Tensor) -> dict[str, int]:
        """What one micro-batch contributes to TRL's denominators: its loss-mask tokens (the
        count ``_generate_and_score_completions`` gathers into num_items_in_batch) and its
        completions (per_device_train_batch_size, every row, with or without tokens)."""
        return {
            "batch_num_tokens": int(_num_items(loss_mask)),
            "global_batch_size": int(loss_mask.shape[0]),
        }


def _micro_batch(response_mask: torch.Tensor) -> layout.Completions:
    if response_mask.shape[0] == 0:
        raise Inexpressible("TRL's micro-batches hold at least one completion")
    return layout.completions(response_mask)


def _num_items(response_mask: torch.Tensor) -> torch.Tensor:
    """num_items_in_batch as _generate_and_score_completions forms it on one process:
    gather(loss_mask.sum()).sum() with loss_mask = completion_mask * tool_mask."""
    return response_mask.detach().to("cpu").long().sum()


def _k3_only(mode: str) -> None:
    if mode not in _K3:
        raise Unsupported(f"TRL's GRPO KL term is k3 only (asked: {mode!r})")

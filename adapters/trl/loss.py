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
    ``sapo_loss``, ``kl_penalty`` / ``importance_weighted_kl`` (k3) and ``agg_loss`` / ``agg_batch_info``."""

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
        mode = "ppo_clip" if clip_ratio_c is None else "dual_clip"
        return self._per_token(
            mode,
            old_log_prob,
            log_prob,
            advantages,
            response_mask,
            clip_ratio_low,
            clip_ratio_high,
            clip_ratio_c,
        )

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
        return self._per_token(
            "gspo",
            old_log_prob,
            log_prob,
            advantages,
            response_mask,
            clip_ratio_low,
            clip_ratio_high,
            None,
        )

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
        return self._per_token(
            "cispo",
            old_log_prob,
            log_prob,
            advantages,
            response_mask,
            clip_ratio_low,
            clip_ratio_high,
            None,
        )

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
        """loss_type sapo: ``sapo_temperature_pos`` / ``sapo_temperature_neg`` (the per-token
        loss does not depend on sapo's grpo-style normaliser); no clip metric belongs to it."""
        _, per_token_loss, _ = self._run(
            sapo_fields(tau_pos, tau_neg),
            old_log_prob,
            log_prob,
            advantages,
            response_mask,
            per_token=True,
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
        """The scalar ``_compute_loss`` returns for one micro-batch: the loss ``mode``
        aggregated by the loss_type of the profile's ``loss_agg_mode`` (TRL's default dapo:
        token-mean over num_items_in_batch), with the mini-batch's global denominators."""
        fields = _loss_fields(mode, clip_ratio_low, clip_ratio_high, clip_ratio_c)
        agg_mode = self.profile.get("loss_agg_mode", "token-mean")
        loss_type = AGG_LOSS_TYPES.get(agg_mode)
        if fields["loss_type"] == "cispo":
            if loss_type != "dapo":
                raise Unsupported(f"TRL's cispo aggregates as token-mean only, not {agg_mode!r}")
        elif loss_type is None:
            raise Unsupported(f"TRL has no loss_type that aggregates as {agg_mode!r}")
        else:
            fields["loss_type"] = loss_type
        loss, _, _ = self._run(
            fields,
            old_log_prob,
            log_prob,
            advantages,
            response_mask,
            per_token=mode != "gspo",
            denominators=global_batch_info,
        )
        return loss

    def _per_token(
        self,
        mode: str,
        old: torch.Tensor,
        log_prob: torch.Tensor,
        advantages: torch.Tensor,
        response_mask: torch.Tensor,
        clip_low: float,
        clip_high: float,
        clip_c: float | None,
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        fields = _loss_fields(mode, clip_low, clip_high, clip_c)
        _, per_token_loss, metrics = self._run(
            fields, old, log_prob, advantages, response_mask, per_token=mode != "gspo"
        )
        key = (
            self.release_table.cispo_clip_metric
            if fields["loss_type"] == "cispo"
            else self.release_table.clip_metric
        )
        clipfrac = torch.tensor(last_metric(metrics, key), dtype=torch.float64)
        return per_token_loss, {"clipfrac": clipfrac}

    def _run(
        self,
        fields: dict[str, Any],
        old: torch.Tensor,
        log_prob: torch.Tensor,
        advantages: torch.Tensor,
        response_mask: torch.Tensor,
        *,
        per_token: bool,
        denominators: dict[str, Any] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, dict[str, list[float]]]:
        """One ``_compute_loss`` call: (its scalar, its per-token loss (B, T), its metrics)."""
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
        run = _denominators(fields, response_mask, denominators or {})
        loss, captured, metrics = self.shell.compute_loss(
            self.shell.config(**fields),
            logps=log_prob,
            completion_mask=masks.completion_mask,
            tool_mask=masks.tool_mask,
            advantages=given,
            old=old,
            capture=(self.release_table.loss_local,),
            **run,
        )
        per_token_loss = captured[self.release_table.loss_local].expand(response_mask.shape)
        return loss, per_token_loss, metrics

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
        layout.require_micro_batch(logprob.shape)
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
        layout.require_micro_batch(loss_mat.shape)
        fields: dict[str, Any] = {"loss_type": loss_type}
        denominators = {
            "dp_size": dp_size,
            "batch_num_tokens": batch_num_tokens,
            "global_batch_size": global_batch_size,
            "loss_scale_factor": loss_scale_factor,
        }
        run = _denominators(fields, loss_mask, denominators)
        masks = _micro_batch(loss_mask)
        loss, _, _ = self.shell.compute_loss(
            self.shell.config(**fields),
            logps=torch.zeros_like(loss_mat, dtype=loss_mat.dtype).detach(),
            completion_mask=masks.completion_mask,
            tool_mask=masks.tool_mask,
            advantages=-loss_mat,
            **run,
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


def _loss_fields(
    mode: str, clip_low: float, clip_high: float, clip_c: float | None
) -> dict[str, Any]:
    """GRPOConfig fields of the policy loss ``mode`` (its per-token formula)."""
    if mode in ("ppo_clip", "dual_clip"):
        if clip_c is not None and clip_c <= 1.0 + clip_high:
            raise Inexpressible(
                f"TRL's delta caps the ratio of every token; it is the dual clip only above "
                f"1 + epsilon_high ({1.0 + clip_high}), not at {clip_c}"
            )
        return {
            "loss_type": "dapo",
            "epsilon": clip_low,
            "epsilon_high": clip_high,
            "delta": clip_c,
        }
    if mode == "gspo":
        return {
            "loss_type": "dapo",
            "importance_sampling_level": "sequence",
            "epsilon": clip_low,
            "epsilon_high": clip_high,
        }
    if mode == "cispo":
        if 1.0 - clip_low > 0.0:
            raise Inexpressible(
                f"TRL's cispo clamps the weight from above only; a lower bound "
                f"1 - {clip_low} > 0 cannot be set"
            )
        return {"loss_type": "cispo", "epsilon_high": 1.0 + clip_high}
    raise Unsupported(f"TRL has no {mode!r} policy loss")


def sapo_fields(tau_pos: float, tau_neg: float) -> dict[str, Any]:
    """GRPOConfig fields of loss.sapo: loss_type sapo and its two temperatures."""
    return {
        "loss_type": "sapo",
        "sapo_temperature_pos": float(tau_pos),
        "sapo_temperature_neg": float(tau_neg),
    }


def _denominators(
    fields: dict[str, Any], loss_mask: torch.Tensor, given: dict[str, Any]
) -> dict[str, Any]:
    """The contract's global denominators as TRL's inputs: ``num_items_in_batch`` (the token
    count of dapo / cispo), ``num_processes`` (dp_size), ``gradient_accumulation_steps``
    (grpo / luspo / dr_grpo: the global sequence count is dp_size x steps x the micro-batch's
    rows) and ``max_completion_length`` (dr_grpo's constant). Sets the last in ``fields``."""
    batch = int(loss_mask.shape[0])
    dp_size = int(given.get("dp_size") or 1)
    loss_type = fields["loss_type"]
    scale = given.get("loss_scale_factor")
    if loss_type == "dr_grpo" and scale is not None:
        if int(scale) != scale:
            raise Inexpressible(f"max_completion_length is an integer, not {scale}")
        fields["max_completion_length"] = int(scale)
    accumulation = 1
    sequences = given.get("global_batch_size")
    if loss_type in _PER_SEQUENCE and sequences is not None:
        steps, rest = divmod(int(sequences), dp_size * batch)
        if rest or steps < 1:
            raise Inexpressible(
                f"TRL's {loss_type} divides by the micro-batch's {batch} sequences times "
                f"gradient_accumulation_steps; a global batch of {sequences} sequences over "
                f"{dp_size} ranks is no whole number of such micro-batches"
            )
        accumulation = steps
    tokens = given.get("batch_num_tokens")
    return {
        "num_items": torch.tensor(int(tokens)) if tokens is not None else _num_items(loss_mask),
        "num_processes": dp_size,
        "accumulation_steps": accumulation,
    }


def _micro_batch(response_mask: torch.Tensor) -> layout.Completions:
    layout.require_micro_batch(response_mask.shape)
    return layout.completions(response_mask)


def _num_items(response_mask: torch.Tensor) -> torch.Tensor:
    """num_items_in_batch as _generate_and_score_completions forms it on one process:
    gather(loss_mask.sum()).sum() with loss_mask = completion_mask * tool_mask."""
    return response_mask.detach().to("cpu").long().sum()


def _k3_only(mode: str) -> None:
    if mode not in _K3:
        raise Unsupported(f"TRL's GRPO KL term is k3 only (asked: {mode!r})")

"""Policy losses, the KL term and loss aggregation of Unsloth's GRPO loss.

Every operation runs the generated ``compute_loss``'s call of
``grpo_accumulated_loss`` (``accumulated.py``) on one micro-batch:

- ``policy_loss_reduced``: the scalar it returns (the log-probs from the model's hidden
  states in Unsloth's chunked log-softmax, ``UnslothEfficientGRPO``'s loss and its
  precomputed gradient), the loss the trainer back-propagates;
- ``ppo_clip_loss`` (``delta`` = the dual clip), ``gspo_loss``, ``cispo_loss``,
  ``sapo_loss``, ``kl_penalty`` / ``importance_weighted_kl``: the per-token values.
  ``UnslothEfficientGRPO`` runs ``grpo_compute_loss`` inside ``torch.func.grad_and_value``, where its locals are
  functorch tensors; the binding reads the inputs ``grpo_accumulated_loss`` hands it (its
  locals at return: the new log-probs with their graph, the masks it rebuilt, the keywords it
  formed) and calls ``grpo_compute_loss`` on them once more, outside the transform, reading
  ``loss_i`` / ``kl_i`` at its return;
- ``agg_loss``: ``grpo_compute_loss`` (which takes ``(B, T)`` advantages as well as TRL's
  ``(B,)``) at ratio 1 (new = old = 0) with advantages ``-loss_mat``, with the keywords
  ``grpo_accumulated_loss`` formed for the loss type and denominators: its per-token loss
  is then ``loss_mat`` and the gradient w.r.t. ``loss_mat`` the aggregation weight. The
  trainer's advantages are one finite value per completion and its per-token garbage can
  only come through the log-probs, which ``grpo_compute_loss`` zeroes at mask-0 positions
  first (the loss bindings exercise that): a loss matrix with a non-finite value at a
  mask-0 position is ``Inexpressible`` here;
- ``agg_batch_info``: TRL's ``num_items_in_batch`` (the scoring path is TRL's).

``clipfrac`` is ``None``: Unsloth's clip ratios are logged by the generated
``compute_loss`` from the ``coef_1`` the loss returns, code the binding does not run.
"""

from __future__ import annotations

from typing import Any

import torch

from rlconform.adapters.base import Inexpressible, Unsupported
from rlconform.adapters.trl import layout
from rlconform.adapters.trl import loss as trl_loss
from rlconform.adapters.trl.shell import capture_locals
from rlconform.adapters.unsloth import accumulated

# grpo_compute_loss's positional parameters (its caller passes them positionally)
_POSITIONAL = frozenset(
    ("ref", "new", "old", "sampling_per_token_logps", "input_ids", "mask", "beta", "advantages")
)


class UnslothLossBindings:
    """The loss-area operations of Unsloth's GRPO loss (module docstring)."""

    shell: Any
    zoo: Any
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
        """loss_type sapo with its two temperatures (the trainer's temperatures reach
        ``grpo_compute_loss`` as keywords)."""
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
        """The scalar ``grpo_accumulated_loss`` returns for one micro-batch, aggregated by
        the loss type of the profile's ``loss_agg_mode``, with the global denominators."""
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
        (loss, *_), _ = self._call(
            fields,
            log_prob,
            response_mask,
            advantages=advantages,
            old=old_log_prob,
            denominators=global_batch_info,
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
        captured = self._locals(
            fields, log_prob, response_mask, ("loss_i",), advantages=advantages, old=old
        )
        per_token_loss = captured["loss_i"].expand(response_mask.shape)
        return per_token_loss, {"clipfrac": None}

    # -- one call -----------------------------------------------------------------------

    def _call(
        self,
        fields: dict[str, Any],
        log_prob: torch.Tensor,
        response_mask: torch.Tensor,
        *,
        advantages: torch.Tensor | None = None,
        per_sequence: torch.Tensor | None = None,
        old: torch.Tensor | None = None,
        ref: torch.Tensor | None = None,
        sampling: torch.Tensor | None = None,
        denominators: dict[str, Any] | None = None,
        capture: tuple[str, ...] = (),
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """One ``grpo_accumulated_loss`` call: (its 7-tuple, the captured locals)."""
        masks = trl_loss._micro_batch(response_mask)
        if per_sequence is None:
            per_sequence = layout.per_sequence(advantages, response_mask)
        if per_sequence is None:
            raise Inexpressible(
                "TRL hands Unsloth's GRPO loss one advantage per completion; this case varies "
                "it along a sequence"
            )
        run = trl_loss._denominators(fields, response_mask, denominators or {})
        args = accumulated.configure(self.shell.config(**fields))
        trainer = self.shell.trainer(
            args,
            num_processes=run["num_processes"],
            accumulation_steps=run["accumulation_steps"],
        )
        return accumulated.call(
            self.zoo,
            trainer,
            log_prob=log_prob,
            completion_mask=masks.completion_mask,
            tool_mask=masks.tool_mask,
            advantages=per_sequence.to(torch.float32),
            old=old,
            ref=ref,
            sampling=sampling,
            num_items=run["num_items"],
            capture=capture,
        )

    def _locals(
        self,
        fields: dict[str, Any],
        log_prob: torch.Tensor,
        response_mask: torch.Tensor,
        names: tuple[str, ...],
        **inputs: Any,
    ) -> dict[str, Any]:
        """``grpo_compute_loss``'s locals ``names`` on the inputs ``grpo_accumulated_loss``
        hands ``UnslothEfficientGRPO`` (module docstring)."""
        _, handed = self._call(
            fields, log_prob, response_mask, capture=accumulated.ACCUMULATED_LOCALS, **inputs
        )
        return self._compute(handed, names)

    def _compute(
        self,
        handed: dict[str, Any],
        names: tuple[str, ...],
        *,
        new: torch.Tensor | None = None,
        old: torch.Tensor | None = None,
        advantages: torch.Tensor | None = None,
    ) -> dict[str, Any]:
        keywords = {k: v for k, v in handed["kwargs"].items() if k not in _POSITIONAL}
        with capture_locals(self.zoo.grpo_compute_loss, names) as captured:
            self.zoo.grpo_compute_loss(
                handed["ref_logps"],
                handed["new_logprobs"] if new is None else new,
                handed["old_logps"] if old is None else old,
                handed["sampling_per_token_logps"],
                handed["completion_input_ids"],
                handed["completion_mask"],
                handed["beta"],
                handed["advantages"] if advantages is None else advantages,
                **keywords,
            )
        return captured

    # -- KL -----------------------------------------------------------------------------

    def kl_penalty(
        self, logprob: torch.Tensor, ref_logprob: torch.Tensor, mode: str
    ) -> torch.Tensor:
        """``kl_i`` of ``grpo_compute_loss`` with beta != 0 and no bias correction (k3)."""
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
        """``kl_i`` with use_bias_correction_kl: clamp(k3 x exp(logp - old), +-10)."""
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
        # element-wise: every position is a completion token (nothing is masked)
        mask = torch.ones((batch, width), dtype=torch.long, device=logprob.device)
        captured = self._locals(
            fields,
            logprob,
            mask,
            ("kl_i",),
            per_sequence=torch.zeros(batch, dtype=torch.float32),
            old=old,
            ref=ref,
        )
        return captured["kl_i"]

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
        the loss matrix rides as per-token advantages at ratio 1)."""
        loss_type = trl_loss.AGG_LOSS_TYPES.get(mode)
        if loss_type is None:
            raise Unsupported(f"TRL has no loss_type that aggregates as {mode!r}")
        batch, width = loss_mat.shape
        layout.require_micro_batch(loss_mat.shape)
        off = ~loss_mask.bool()
        if bool((off & ~torch.isfinite(loss_mat.detach())).any()):
            raise Inexpressible(
                "a non-finite loss at a mask-0 position reaches grpo_compute_loss only through "
                "the log-probs, which it zeroes there; this binding carries the loss matrix as "
                "advantages, which the trainer never sends per token"
            )
        denominators = {
            "dp_size": dp_size,
            "batch_num_tokens": batch_num_tokens,
            "global_batch_size": global_batch_size,
            "loss_scale_factor": loss_scale_factor,
        }
        zeros = torch.zeros((batch, width), dtype=torch.float32)
        _, handed = self._call(
            {"loss_type": loss_type},
            zeros - 1.0,
            loss_mask,
            per_sequence=torch.zeros(batch, dtype=torch.float32),
            old=zeros,
            denominators=denominators,
            capture=accumulated.ACCUMULATED_LOCALS,
        )
        captured = self._compute(handed, ("loss",), new=zeros, old=zeros, advantages=-loss_mat)
        return captured["loss"]

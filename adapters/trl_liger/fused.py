"""``GRPOTrainer``'s Liger branch on the trainer shell: ``compute_loss -> compute_liger_loss``.

With ``use_liger_kernel=True`` (TRL 1.9 .. 1.12) ``GRPOTrainer.compute_loss`` sends the
micro-batch to ``compute_liger_loss``: the model's last hidden state over the completion,
the LM head's weight and bias, the loss mask ``completion_mask * tool_mask``, the
advantages, the old / reference log-probs, the vLLM IS ratio and (1.11+)
``num_items_in_batch`` go to ``self.liger_loss``, a ``LigerFusedLinearGRPOLoss`` built in
``__init__`` from the config; the loss it returns is divided by the accumulation steps and
its KL and clip-ratio metrics are logged. The shell (``adapters/trl/shell.py``) gives the
trainer everything but the model; this module adds the branch's own state:

- ``liger_loss``: built with the keywords ``GRPOTrainer.__init__`` passes (transcribed from
  1.12's ``__init__``: beta, epsilon_low / high, temperature, use_ref_model, loss_type,
  max_completion_length, importance_sampling_level, delta, use_bias_correction_kl, the
  SAPO and VESPO constants), and ``compiled=False``: the trainer's path compiles the loss
  math with ``torch.compile`` (Liger's default); on a CPU runner the adapter runs it
  eagerly, the same function (``RLCONFORM_LIGER_COMPILED=1`` keeps it compiled);
- the model: a two-token LM head (identity weight, no bias, frozen) and, as
  ``_get_last_hidden_state``, hidden states that are the two-token logits of the case's
  log-prob leaf (``adapters/logits_from_logprobs.py``; the chosen token is the
  completion's token id), so the fused kernel computes the case's log-probs in float32
  and its hand-written backward returns the gradient to the leaf;
- ``_forward_redirection``: TRL's own ``_ForwardRedirection`` on the shell's policy module
  (it routes the call through the module's ``forward`` for ZeRO-3 hooks).

``GRPOTrainer.__init__`` refuses some configs with Liger (off-policy masking,
``top_entropy_quantile < 1``, an entropy bonus, an IS level other than token / sequence);
those refusals are transcribed (``refuse``) and are ``Inexpressible``.

One-chunk mode (``fused=False``, the per-token operations): ``liger_loss`` is replaced by
the fused function's per-chunk math, ``LigerFusedLinearPPOBase._compute_loss_from_logps``
with ``LigerFusedLinearGRPOFunction.ppo_loss_fn``, called on the whole micro-batch as one
chunk with the case's log-probs as they are (with their autograd graph), so that the
per-token loss and KL, locals of ``ppo_loss_fn``, can be read back with a gradient. The
fused path calls the same math once per row (``chunk_size=1``) and sums the rows' losses;
every loss type is a sum of per-row terms over the micro-batch's denominators
(``full_attention_mask``), so one chunk is the same sum. The fused kernel itself (the
log-probs from hidden states and its backward) is what ``policy_loss_reduced`` and the
step run.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from rlconform.adapters.base import Inexpressible
from rlconform.adapters.logits_from_logprobs import two_token_logits

COMPILED = os.environ.get("RLCONFORM_LIGER_COMPILED") == "1"

# LigerFusedLinearGRPOLoss attributes that LigerFusedLinearPPOBase.forward binds into the
# per-chunk math (its functools.partial of _compute_loss_from_logps)
_CHUNK_SETTINGS = (
    "epsilon_low",
    "epsilon_high",
    "beta",
    "loss_type",
    "max_completion_length",
    "importance_sampling_level",
    "sapo_temperature_pos",
    "sapo_temperature_neg",
    "delta",
    "use_bias_correction_kl",
    "vespo_k_pos",
    "vespo_lambda_pos",
    "vespo_k_neg",
    "vespo_lambda_neg",
)


class Policy(torch.nn.Module):
    """The model as ``compute_liger_loss`` reads it: ``lm_head.weight`` / ``.bias``."""

    def __init__(self) -> None:
        super().__init__()
        self.lm_head = torch.nn.Linear(2, 2, bias=False)
        with torch.no_grad():
            self.lm_head.weight.copy_(torch.eye(2))
        self.lm_head.weight.requires_grad_(False)
        self.is_gradient_checkpointing = False  # read by _generate_and_score_completions


def refuse(args: Any) -> None:
    """``GRPOTrainer.__init__``'s refusals of a Liger config (TRL 1.9 .. 1.12)."""
    if args.off_policy_mask_threshold is not None:
        raise Inexpressible("TRL refuses use_liger_kernel with off-policy sequence masking")
    if args.top_entropy_quantile < 1.0:
        raise Inexpressible("TRL refuses use_liger_kernel with top_entropy_quantile < 1")
    if args.importance_sampling_level not in ("token", "sequence"):
        raise Inexpressible(
            f"TRL refuses importance_sampling_level {args.importance_sampling_level!r}"
        )
    if args.entropy_coef != 0.0 or args.use_adaptive_entropy:
        raise Inexpressible("TRL refuses use_liger_kernel with an entropy bonus")


def hidden_states(
    log_probs: torch.Tensor, action: torch.Tensor, token_ids: torch.Tensor
) -> torch.Tensor:
    """(B, T, 2) float32 hidden states whose logits under the identity LM head give each
    position's log-prob at its token id (0 or 1)."""
    pair = two_token_logits(log_probs, action, framework="Liger's fused GRPO loss")
    swapped = pair.flip(-1)
    chosen_is_one = (token_ids == 1).unsqueeze(-1)
    return torch.where(chosen_is_one, swapped, pair).to(torch.float32)


class FusedShell:
    """Liger-branch trainers on top of one TRL ``Shell``."""

    def __init__(self, shell: Any, loss_cls: type, function_cls: type, base_cls: type):
        from trl.models.utils import _ForwardRedirection

        self.shell = shell
        self.loss_cls = loss_cls
        self.function_cls = function_cls
        self.base_cls = base_cls
        self.policy = Policy()
        self._redirection = _ForwardRedirection

    def config(self, **fields: Any) -> Any:
        args = self.shell.config(**fields, use_liger_kernel=True)
        refuse(args)
        return args

    def trainer(self, args: Any, **options: Any) -> Any:
        """A shell trainer with the Liger branch's state (module docstring)."""
        trainer = self.shell.trainer(args, **options)
        trainer.__dict__.update(
            use_liger_kernel=True,
            temperature=args.temperature,
            model=self.policy,
            _forward_redirection=self._redirection(),
            liger_loss=self.loss_cls(
                beta=trainer.beta,
                epsilon_low=trainer.epsilon_low,
                epsilon_high=trainer.epsilon_high,
                temperature=args.temperature,
                use_ref_model=trainer.beta != 0.0,
                loss_type=trainer.loss_type,
                max_completion_length=trainer.max_completion_length,
                importance_sampling_level=trainer.importance_sampling_level,
                delta=args.delta,
                use_bias_correction_kl=args.use_bias_correction_kl,
                sapo_temperature_pos=args.sapo_temperature_pos,
                sapo_temperature_neg=args.sapo_temperature_neg,
                vespo_k_pos=args.vespo_k_pos,
                vespo_lambda_pos=args.vespo_lambda_pos,
                vespo_k_neg=args.vespo_k_neg,
                vespo_lambda_neg=args.vespo_lambda_neg,
                compiled=COMPILED,
            ),
        )
        return trainer

    def loss(
        self,
        trainer: Any,
        inputs: dict[str, Any],
        log_probs: torch.Tensor,
        *,
        fused: bool = True,
    ) -> torch.Tensor:
        """``trainer.compute_loss(model, inputs)`` on the Liger branch: the real fused loss
        (``fused``) or its per-chunk math on the micro-batch as one chunk."""
        completion_ids = inputs["completion_ids"]
        action = inputs["completion_mask"].bool()
        if "tool_mask" in inputs:
            action = action & inputs["tool_mask"].bool()
        if fused:
            hidden = hidden_states(log_probs, action, completion_ids)
        else:
            hidden = None
            trainer.liger_loss = self._one_chunk(trainer.liger_loss, log_probs)

        def last_hidden_state(*args: Any, **kwargs: Any) -> Any:
            return hidden

        trainer._get_last_hidden_state = last_hidden_state
        return trainer.compute_loss(self.policy, inputs)

    def _one_chunk(self, module: Any, log_probs: torch.Tensor) -> Any:
        settings = {name: getattr(module, name) for name in _CHUNK_SETTINGS}
        compute = self.base_cls._compute_loss_from_logps
        ppo_loss_fn = self.function_cls.ppo_loss_fn

        def chunk_math(
            *,
            attention_mask: torch.Tensor,
            advantages: torch.Tensor,
            ref_per_token_logps: torch.Tensor | None = None,
            old_per_token_logps: torch.Tensor | None = None,
            vllm_is_ratio: torch.Tensor | None = None,
            num_items_in_batch: Any = None,
            **_: Any,
        ) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
            if vllm_is_ratio is not None and vllm_is_ratio.dim() == 1:
                vllm_is_ratio = vllm_is_ratio.unsqueeze(-1)  # as LigerFusedLinearPPOBase.forward
            loss, metrics = compute(
                log_probs,
                attention_mask,
                advantages,
                ref_per_token_logps_chunk=ref_per_token_logps if settings["beta"] != 0.0 else None,
                old_per_token_logps_chunk=old_per_token_logps,
                vllm_is_ratio_chunk=vllm_is_ratio,
                full_attention_mask=attention_mask,
                ppo_loss_fn=ppo_loss_fn,
                num_items_in_batch=num_items_in_batch,
                **settings,
            )
            return loss, tuple(metrics)

        return chunk_math

"""Unsloth's GRPO ``compute_loss`` on TRL's trainer shell: ``grpo_accumulated_loss``.

Unsloth's patched ``GRPOTrainer`` (``unsloth/models/rl_replacements.py``,
``grpo_trainer_compute_loss``, 2026.10.9) computes the loss of a micro-batch, on its
default path (no ``_get_per_token_logps`` log-probs: the efficient path), with one call::

    grpo_accumulated_loss(trainer=self, input_ids=cat(prompt_ids, completion_ids),
        logits_to_keep=completion width, completion_mask, advantages, old_logps, ref_logps,
        n_chunks=args.unsloth_num_chunks, loss_type, importance_sampling_level,
        epsilon_low, epsilon_high, max_completion_length, delta, temperature,
        max_left_pad, logit_softcapping, logit_scale_multiply, logit_scale_divide,
        attention_mask=cat(prompt_mask, completion_mask), num_items_in_batch,
        current_gradient_accumulation_steps, num_processes, sampling_per_token_logps,
        tool_mask=...)

``call`` makes that call with those keywords (transcribed from the generated method; the
generator, the ``unsloth`` package, is installed with ``--no-deps`` but never imported:
generating the trainer needs an accelerator, xformers and bitsandbytes) on a TRL shell
trainer (``adapters/trl/shell.py``: a real ``GRPOConfig`` with Unsloth's
three config fields at their ``UnslothGRPOConfig`` defaults, the attributes
``GRPOTrainer.__init__`` derives). What the function reads of a model is a stand-in:

- the model: ``get_output_embeddings()`` is a frozen 3 x 3 identity LM head (vocabulary:
  0 = pad, 1 = the completion's token, 2 = the other token) and its forward returns, as
  Unsloth's models do under ``UNSLOTH_RETURN_HIDDEN_STATES=1``, hidden states: at the
  position before each completion token, ``temperature`` x (-1e4, the two-token logits of
  the case's log-prob leaf, ``adapters/logits_from_logprobs.py``), so Unsloth's own chunked
  log-softmax (``chunked_hidden_states_selective_log_softmax``, float32) computes the
  case's log-probs and its gradient reaches the leaf;
- ``_unsloth_seq_packing_grad_ok = False`` on the model: the flag Unsloth sets itself on a
  model whose packed forward failed its self-check, so the padded per-row loop runs (the
  packed forward is verified against that loop before Unsloth uses it);
- ``_autocast_dtype`` / ``_autocast_enabled``: Unsloth's latch for a float32 config
  (``bf16=False, fp16=False``: no autocast);
- ``processing_class.pad_token_id = 0`` and an accelerator with no grad scaler.

Prompts are one token (row i's is ``3 + i``: the stand-in model reads which rows Unsloth's
mini-batch holds off it) and never padded, so Unsloth's re-packing of the padding
(``left_pack_padding``) leaves every row as it is; completions are right-padded with the pad
id (TRL's layout) and tool tokens carry token id 1: Unsloth rebuilds the completion mask
from the token ids (``create_completion_attention_mask``) and multiplies the tool mask in.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

import torch

from rlconform.adapters.logits_from_logprobs import two_token_logits
from rlconform.adapters.trl.shell import SingleRank, capture_locals

PAD_ID = 0
FIRST_PROMPT_ID = 3  # row i's one prompt token is 3 + i: the stand-in model reads its rows off it
_PAD_LOGIT = -1.0e4  # exp(-1e4) is 0 in float32: the pad token has probability 0
#: UnslothGRPOConfig's own fields at their defaults (unsloth/models/rl.py)
UNSLOTH_CONFIG = {
    "unsloth_num_chunks": -1,
    "unsloth_logit_chunk_multiplier": None,
    "unsloth_grpo_mini_batch": None,
}
#: grpo_accumulated_loss locals read back at its return: the inputs of UnslothEfficientGRPO
ACCUMULATED_LOCALS = (
    "new_logprobs",
    "old_logps",
    "ref_logps",
    "sampling_per_token_logps",
    "completion_input_ids",
    "completion_mask",
    "advantages",
    "kwargs",
)


class UnslothRank(SingleRank):
    """``SingleRank`` with what ``grpo_accumulated_loss`` reads besides: no grad scaler
    (float32), ``unwrap_model(model, keep_fp32_wrapper=...)``."""

    scaler = None

    def unwrap_model(self, model: Any, keep_fp32_wrapper: bool = True) -> Any:
        return model


class HiddenStatesModel(torch.nn.Module):
    """The policy as ``grpo_accumulated_loss`` reads it (module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self.lm_head = torch.nn.Linear(3, 3, bias=False)
        with torch.no_grad():
            self.lm_head.weight.copy_(torch.eye(3))
        self.lm_head.weight.requires_grad_(False)
        self._unsloth_seq_packing_grad_ok = False
        self.hidden: torch.Tensor | None = None
        self.calls: list[tuple[int, ...]] = []

    def get_output_embeddings(self) -> torch.nn.Module:
        return self.lm_head

    def forward(self, input_ids: torch.Tensor, attention_mask: Any = None, **_: Any) -> Any:
        """The hidden states of the rows whose prompt tokens ``input_ids[:, 0]`` name."""
        if self.hidden is None:
            raise RuntimeError("the stand-in model has no hidden states loaded")
        self.calls.append(tuple(input_ids.shape))
        rows = (input_ids[:, 0].detach().to("cpu") - FIRST_PROMPT_ID).tolist()
        if min(rows, default=0) < 0 or max(rows, default=0) >= self.hidden.shape[0]:
            raise RuntimeError(f"the stand-in model was called on rows it was not given: {rows}")
        return SimpleNamespace(logits=self.hidden[rows])

    def load(self, hidden: torch.Tensor) -> None:
        self.hidden = hidden


def hidden_states(
    log_probs: torch.Tensor, action: torch.Tensor, temperature: float
) -> torch.Tensor:
    """(B, 1 + T, 3) float32: position t (< T) predicts completion token t (id 1) with the
    case's log-prob; the last position predicts nothing."""
    pair = two_token_logits(log_probs, action, framework="Unsloth's GRPO loss")
    batch, width = log_probs.shape
    pad = torch.full((batch, width, 1), _PAD_LOGIT, dtype=pair.dtype)
    logits = torch.cat([pad, pair], dim=-1) * temperature
    tail = torch.zeros((batch, 1, 3), dtype=logits.dtype)
    return torch.cat([logits, tail], dim=1).to(torch.float32)


def configure(config: Any) -> Any:
    """``config`` with UnslothGRPOConfig's fields (set on the instance, as its subclass
    holds them)."""
    for name, value in UNSLOTH_CONFIG.items():
        if not hasattr(config, name):
            setattr(config, name, value)
    return config


def prepare(trainer: Any) -> HiddenStatesModel:
    """Give a shell trainer what ``grpo_accumulated_loss`` reads (module docstring)."""
    model = HiddenStatesModel()
    trainer.__dict__.update(
        model=model,
        accelerator=UnslothRank(trainer.accelerator.num_processes),
        processing_class=SimpleNamespace(pad_token_id=PAD_ID, batch_decode=_decode),
        _autocast_dtype=torch.bfloat16,
        _autocast_enabled=False,
        use_vllm=bool(getattr(trainer, "use_vllm", False)),
    )
    return model


def call(
    zoo: Any,
    trainer: Any,
    *,
    log_prob: torch.Tensor,
    completion_mask: torch.Tensor,
    tool_mask: torch.Tensor | None,
    advantages: torch.Tensor,
    old: torch.Tensor | None = None,
    ref: torch.Tensor | None = None,
    sampling: torch.Tensor | None = None,
    num_items: Any = None,
    capture: Sequence[str] = (),
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The generated ``compute_loss``'s ``grpo_accumulated_loss`` call on one micro-batch:
    (its 7-tuple: loss, completion_length, mean_kl, delta, flat_is_ratio, coef_1,
    completion_mask; the captured locals)."""
    model = prepare(trainer)
    args = trainer.args
    batch, width = completion_mask.shape
    action = completion_mask.bool()
    if tool_mask is not None:
        action = action & tool_mask.bool()
    completion_ids = torch.where(
        completion_mask.bool(), torch.ones_like(completion_mask), torch.zeros_like(completion_mask)
    ).long()
    prompt_ids = (FIRST_PROMPT_ID + torch.arange(batch, dtype=torch.long)).reshape(batch, 1)
    input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
    attention_mask = torch.cat([torch.ones_like(prompt_ids), completion_mask.long()], dim=1)
    model.load(hidden_states(log_prob, action, float(args.temperature)))
    keywords: dict[str, Any] = {}
    if tool_mask is not None:
        keywords["tool_mask"] = tool_mask
    importance_sampling_level = getattr(
        trainer, "importance_sampling_level", getattr(args, "importance_sampling_level", "token")
    )
    with _hidden_states_env(), capture_locals(zoo.grpo_accumulated_loss, capture) as captured:
        result = zoo.grpo_accumulated_loss(
            trainer=trainer,
            input_ids=input_ids,
            logits_to_keep=width,
            completion_mask=completion_mask,
            advantages=advantages,
            old_logps=old,
            ref_logps=ref,
            n_chunks=args.unsloth_num_chunks,
            loss_type=args.loss_type,
            importance_sampling_level=importance_sampling_level,
            epsilon_low=trainer.epsilon_low,
            epsilon_high=trainer.epsilon_high,
            max_completion_length=args.max_completion_length,
            delta=getattr(args, "delta", None),
            temperature=args.temperature,
            max_left_pad=0,
            logit_softcapping=0,
            logit_scale_multiply=0,
            logit_scale_divide=0,
            attention_mask=attention_mask,
            num_items_in_batch=num_items,
            current_gradient_accumulation_steps=trainer.current_gradient_accumulation_steps,
            num_processes=trainer.accelerator.num_processes,
            sampling_per_token_logps=sampling,
            **keywords,
        )
    if capture:
        captured["beta"] = trainer.beta  # what compute_loss hands UnslothEfficientGRPO
    return result, captured


class _hidden_states_env:
    """``grpo_accumulated_loss`` sets ``UNSLOTH_RETURN_HIDDEN_STATES`` for the forward and
    leaves it at ``"0"``; restore the process's own value afterwards."""

    def __enter__(self) -> None:
        self.prior = os.environ.get("UNSLOTH_RETURN_HIDDEN_STATES")

    def __exit__(self, *exc: Any) -> None:
        if self.prior is None:
            os.environ.pop("UNSLOTH_RETURN_HIDDEN_STATES", None)
        else:
            os.environ["UNSLOTH_RETURN_HIDDEN_STATES"] = self.prior


def _decode(ids: Any, skip_special_tokens: bool = True) -> list[str]:
    return [""] * len(ids)

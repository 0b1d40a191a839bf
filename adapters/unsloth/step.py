"""Unsloth's GRPO trainer bound to the CONTRACT area `step`: one optimizer step.

Unsloth's generated ``GRPOTrainer`` keeps TRL's step (``adapters/trl/step.py``: scoring with
``_generate_and_score_completions``, the shuffle, ``split_tensor_dict``, one ``backward`` per
micro-batch: its ``training_step`` wrapper adds only the DDP gradient average, the
metrics' means) and replaces two things this binding runs as Unsloth's:

- the config: ``UnslothGRPOConfig`` resolves the fields a user sets (``config.py``; e.g.
  ``loss_type="bnpo"`` alone turns a KL term on, beta 0.001, ``loss_type="dapo"`` set
  explicitly raises ``epsilon_high`` to 0.28 and masks truncated completions);
- the micro-batch's loss: the generated ``compute_loss`` itself (``compute_loss.py``, built from
  the installed unsloth's source: a source-level binding) on TRL's micro-batch, whose patched
  ``_get_per_token_logps_and_entropies`` returns no log-probs on the efficient path
  (``compute_efficient=True``), so the call reaches ``grpo_accumulated_loss`` with the
  stand-in model of ``accumulated.py`` (hidden states of the micro-batch's leaf log-probs;
  its token ids replace the shell's one-token prompts and completions); the metrics it
  logs (``completion_length``, ``kl``, the clip ratios) are its own.

Unsloth's scoring differs from TRL's only on paths a text batch does not take (vision, vLLM,
prompt truncation, left-padded prompts: ``max_left_pad`` is 0 for one-token prompts, and the
sample weights of ``UNSLOTH_GRPO_ZERO_VARIANCE_EXCLUDE`` / ``UNSLOTH_GRPO_LOSS_AGGREGATION``,
environment options left unset). The configs leave out the entropy bonus: Unsloth computes
the entropy from the same logits as the log-probs, and the case's entropy leaf is independent
of them (inexpressible through the stand-in model). Unsloth logs no policy loss and no entropy.
"""

from __future__ import annotations

import copy
from typing import Any

import torch

from rlconform.adapters.trl import step as trl_step
from rlconform.adapters.unsloth import accumulated, compute_loss, config

UNSLOTH_STEP_CONFIGS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("default", {}),
    ("grpo_kl", {"loss_type": "grpo", "beta": 0.04, "use_bias_correction_kl": False}),
    # beta resolves to 0.001 (Unsloth's default outside dapo / dr_grpo): a KL term is on
    ("bnpo", {"loss_type": "bnpo", "use_bias_correction_kl": False}),
    # scale_rewards "group" (TRL's default) is overridden to False
    ("dr_grpo", {"loss_type": "dr_grpo"}),
    # set explicitly: epsilon_high 0.28, mask_truncated_completions True
    ("dapo", {"loss_type": "dapo"}),
    ("two_iterations", {"num_iterations": 2}),
    # as bnpo: beta resolves to 0.001, the KL term is on
    ("sapo", {"loss_type": "sapo", "use_bias_correction_kl": False}),
    # Unsloth's own memory chunking (unsloth_num_chunks is ignored on 2026.10: always one
    # chunk). unsloth_grpo_mini_batch counts the forward's mini-batches (ceil(rows / it)
    # rows each; above the micro-batch's rows, one row each), the logit chunk multiplier
    # splits the log-softmax
    ("row_mini_batches", {"unsloth_grpo_mini_batch": 64, "unsloth_logit_chunk_multiplier": 2}),
)

STEP_METRIC_NAMES = {
    **trl_step.STEP_METRIC_NAMES,
    "policy_loss": None,  # Unsloth's compute_loss logs no policy loss
    "entropy/mean": None,  # nor an entropy
}


class UnslothStepOps(trl_step.StepOps):
    """``train_step`` of Unsloth's GRPO trainer (module docstring)."""

    step_metric_names = STEP_METRIC_NAMES
    step_configs = UNSLOTH_STEP_CONFIGS
    config_source_note = "as UnslothGRPOConfig resolves the fields"
    completions_end_on_eos = True  # finished completions: the dapo config masks truncated ones
    zoo: Any

    def _step_config(self, **fields: Any) -> Any:
        """The shell's ``GRPOConfig`` as ``UnslothGRPOConfig`` resolves ``fields``, with
        UnslothGRPOConfig's own fields (``unsloth_*``, set on the instance)."""
        own = {k: fields.pop(k) for k in list(fields) if k in accumulated.UNSLOTH_CONFIG}
        args = accumulated.configure(self.shell.config(**config.resolve(fields)))
        if own:
            args = copy.copy(args)  # the shell caches its configs: never set fields on one
            for name, value in own.items():
                setattr(args, name, value)
        return args

    def _micro_batch_loss(
        self, trainer: Any, inputs: dict[str, Any], logps: torch.Tensor, entropies: torch.Tensor
    ) -> torch.Tensor:
        loss_fn = self.__dict__.get("_unsloth_compute_loss")
        if loss_fn is None:
            loss_fn = self.__dict__["_unsloth_compute_loss"] = compute_loss.build(self.zoo)
        model = accumulated.prepare(trainer)
        mask = inputs["completion_mask"]
        rows = mask.shape[0]
        action = mask.bool()
        if inputs.get("tool_mask") is not None:
            action = action & inputs["tool_mask"].bool()
        model.load(accumulated.hidden_states(logps, action, float(trainer.args.temperature)))
        prompt_ids = accumulated.FIRST_PROMPT_ID + torch.arange(rows, dtype=torch.long)
        inputs = {
            **inputs,
            "prompt_ids": prompt_ids.reshape(rows, 1),
            "prompt_mask": torch.ones((rows, 1), dtype=mask.dtype),
            "completion_ids": torch.where(mask.bool(), 1, accumulated.PAD_ID).long(),
        }
        trainer._get_per_token_logps_and_entropies = _efficient_path
        with accumulated._hidden_states_env():
            return loss_fn(trainer, trainer.model, inputs)


def _efficient_path(
    model: Any,
    input_ids: Any,
    attention_mask: Any,
    logits_to_keep: int,
    batch_size: Any = None,
    compute_entropy: bool = False,
    compute_efficient: bool = False,
    *args: Any,
    **kwargs: Any,
) -> tuple[None, None]:
    """The patched ``_get_per_token_logps_and_entropies`` under ``compute_efficient``: no
    log-probs (its precision latches are ``accumulated.prepare``'s)."""
    if not compute_efficient:
        raise RuntimeError("Unsloth's compute_loss asked for log-probs off the efficient path")
    return None, None

"""TRL's Liger branch bound to the CONTRACT area `step`: one optimizer step of
``GRPOTrainer`` with ``use_liger_kernel=True``.

The step is TRL's (``adapters/trl/step.py``: scoring, shuffle, ``split_tensor_dict``, one
``backward`` per micro-batch, the metrics' means); what changes is the micro-batch's loss:
``compute_loss`` takes the Liger branch (``fused.py``), so the current log-probs come from
hidden states through the fused kernel, in float32, and the gradient to them from its
hand-written backward. The configs are plain TRL's with ``use_liger_kernel=True``, so the
two reports compare config by config; ``entropy_bonus`` is left out (TRL refuses an
entropy bonus with Liger), and ``luspo`` is added: Liger aggregates it with a
normaliser of its own. The branch logs ``clip_ratio`` and, with beta != 0, ``kl``
(token means over the micro-batch); it logs no entropy and no policy loss.
"""

from __future__ import annotations

from typing import Any

import torch

from rlconform.adapters.trl import step as trl_step

LIGER_STEP_CONFIGS: tuple[tuple[str, dict[str, Any]], ...] = (
    *((name, f) for name, f in trl_step.TRL_STEP_CONFIGS if "entropy_coef" not in f),
    # Liger's luspo normaliser is its own (not TRL's _compute_loss one): run it in the step
    ("luspo", {"loss_type": "luspo"}),
)

STEP_METRIC_NAMES = {
    **trl_step.STEP_METRIC_NAMES,
    "policy_loss": None,  # not logged on the Liger branch
    "entropy/mean": None,  # likewise: the fused loss computes no entropy
    "kl_loss/mean": "kl",
    "clip_fraction": "clip_ratio",
}


class LigerStepOps(trl_step.StepOps):
    """``train_step`` on the Liger branch (module docstring)."""

    step_metric_names = STEP_METRIC_NAMES
    step_configs = LIGER_STEP_CONFIGS
    config_source_note = "use_liger_kernel=True"
    fused: Any

    def _step_config(self, **fields: Any) -> Any:
        return self.fused.config(**fields)

    def _step_trainer(self, args: Any, n_micro: int) -> Any:
        return self.fused.trainer(args, accumulation_steps=n_micro)

    def _micro_batch_loss(
        self, trainer: Any, inputs: dict[str, Any], logps: torch.Tensor, entropies: torch.Tensor
    ) -> torch.Tensor:
        return self.fused.loss(trainer, inputs, logps, fused=True)

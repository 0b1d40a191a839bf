"""SkyRL binding of the `agg` modes: the loss is a masked *sum* of per-token losses whose
advantages the trainer pre-scaled, times the data-parallel size.

``RayPPOTrainer._normalize_advantages`` divides each mini-batch's advantages by the
denominators of ``algorithm.loss_reduction`` (``apply_loss_reduction_to_advantages_
minibatch``, on the whole mini-batch before it is split across the DP ranks); each rank's
policy worker then sums its shard's per-token loss (``reduce_loss``) and multiplies it by
``dp_size`` before backward (``grad_sum_correction_factor``: DDP averages gradients).

The binding runs exactly that: the clause's per-token losses become the advantages of a
PPO loss at ratio 1 (``ppo_policy_loss`` with ``log_probs = old_log_probs``: the per-token
loss is ``-A``, so ``A = -loss_mat`` gives ``loss_mat`` back, and scaling ``A`` scales it),
in a mini-batch made of the local rows and, when global denominators are given, rows that
stand for the other ranks' tokens and sequences; ``_normalize_advantages`` scales the
mini-batch, the local rows go through the loss and ``reduce_loss``, times ``dp_size``.
The ``dp_size`` factor is the worker's one line ``loss = policy_loss *
grad_sum_correction_factor`` (``mesh_rank.dp_size``), applied here: the worker method it
sits in needs a model, so a change to that line is not seen by this binding.
``_normalize_advantages`` is decorated ``torch.no_grad``; its undecorated body
(``__wrapped__``, the same code) is called so that the gradient with respect to the losses,
the weight SkyRL gives each token, is observable.

Modes: token-mean is ``token_mean``, seq-mean-token-mean is ``sequence_mean``,
seq-mean-token-sum-norm is ``seq_mean_token_sum_norm`` with ``max_seq_len`` the
``loss_scale_factor`` (SkyRL requires the user to set it; the contract's default length
when none is given). SkyRL has no token-sum or seq-mean-token-sum.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from rlconform.adapters.base import Unsupported
from rlconform.adapters.skyrl.layout import RightAligned

REDUCTIONS = {
    "token-mean": "token_mean",
    "seq-mean-token-mean": "sequence_mean",
    "seq-mean-token-sum-norm": "seq_mean_token_sum_norm",
}
DEFAULT_NORM_LENGTH = 10  # the contract's norm_length default (CONTRACT §3)


def _others(mode: str, width: int, tokens: int, sequences: int) -> torch.Tensor:
    """Loss-mask rows for the rest of the mini-batch: ``tokens`` action tokens (token-mean)
    or ``sequences`` rows with one action token each (the sequence modes count rows)."""
    if mode == "token-mean":
        rows = math.ceil(tokens / width) if tokens else 0
        flat = torch.zeros(rows * width)
        flat[:tokens] = 1.0
        return flat.reshape(rows, width)
    rows = torch.zeros((sequences, width))
    if sequences:
        rows[:, -1] = 1.0
    return rows


class AggregateBindings:
    runtime: Any

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
        """agg.*: ``_normalize_advantages`` on the mini-batch, then the rank's
        ``reduce_loss`` of ``ppo_policy_loss`` times ``dp_size`` (module docstring)."""
        reduction = REDUCTIONS.get(mode)
        if reduction is None:
            raise Unsupported(f"SkyRL has no loss_reduction that aggregates as {mode!r}")
        batch, width = loss_mat.shape
        local_tokens = int(loss_mask.sum())
        local_sequences = int((loss_mask.sum(dim=-1) > 0).sum())
        other_tokens = (batch_num_tokens or local_tokens) - local_tokens
        other_sequences = (global_batch_size or local_sequences) - local_sequences
        if other_tokens < 0 or other_sequences < 0:
            raise ValueError(
                f"global denominators ({batch_num_tokens}, {global_batch_size}) below this "
                f"shard's own ({local_tokens}, {local_sequences})"
            )
        layout = RightAligned.of(loss_mask)
        local_mask = layout.loss_mask(loss_mask).to(loss_mat.dtype)
        # the mini-batch is as wide as its longest response: a local shard of width 0
        # beside other ranks' tokens gets padding columns (on the left: right-aligned)
        wide = max(width, 1) if other_tokens or other_sequences else width
        left = torch.zeros((batch, wide - width), dtype=loss_mat.dtype)
        others = _others(mode, wide, other_tokens, other_sequences).to(loss_mat.dtype)
        mask = torch.cat([torch.cat([left, local_mask], dim=1), others])
        advantages = torch.cat(
            [torch.cat([left, -layout.to_skyrl(loss_mat)], dim=1), torch.zeros_like(others)]
        )
        norm = DEFAULT_NORM_LENGTH if loss_scale_factor is None else loss_scale_factor
        cfg = self._config(loss_reduction=reduction, max_seq_len=norm)
        data = self.runtime.training_batch.TrainingInputBatch(
            {"advantages": advantages, "response_mask": mask, "loss_mask": mask}
        )
        normalize = self.runtime.trainer.RayPPOTrainer._normalize_advantages.__wrapped__
        scaled = normalize(self._standin_trainer(cfg), data, [(0, mask.shape[0])])
        local = scaled["advantages"][:batch, wide - width :]
        zeros = torch.zeros((batch, width), dtype=loss_mat.dtype)
        policy_loss, _ = self.runtime.ppo_utils.PolicyLossRegistry.get("regular")(
            zeros,
            zeros,
            local,
            config=cfg.trainer.algorithm,
            loss_mask=local_mask,
            rollout_logprobs=None,
        )
        return policy_loss * dp_size

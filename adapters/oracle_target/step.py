"""The oracle target's training step (CONTRACT §2 `step`): ``oracle.step.train_step`` in float64.

The oracle gives the gradient analytically; it reaches the harness's leaf tensors through
``backward`` of ``sum(leaf * gradient)``, whose gradient is exactly that.
"""

from __future__ import annotations

from typing import Any

import torch

from rlconform.adapters.oracle_target._convert import pad_like
from rlconform.adapters.step_io import StepBatch, StepOutput
from rlconform.adapters.torchref.step import TORCHREF_CONFIGS
from rlconform.conformance.trainer_config import TrainerConfig
from rlconform.oracle.step import train_step


def _ragged(tensor: torch.Tensor, lengths: list[int]) -> list[list[float]]:
    return [row[:n] for row, n in zip(tensor.detach().to(torch.float64).tolist(), lengths)]


class StepOps:
    """The `step` operation of the oracle target (the same configs as torchref)."""

    def trainer_configs(self) -> list[TrainerConfig]:
        return [
            TrainerConfig(name, settings, native=dict(settings), source="contract defaults")
            for name, settings in TORCHREF_CONFIGS
        ]

    def train_step(
        self, batch: StepBatch, config: TrainerConfig, state: dict[str, Any] | None = None
    ) -> StepOutput:
        lengths = [int(n) for n in batch.response_mask.sum(-1).tolist()]
        masks = [[int(m) for m in row[:n]] for row, n in zip(batch.loss_mask.tolist(), lengths)]
        fields = {
            "old": batch.old_log_probs,
            "ref": batch.ref_log_probs,
            "logp": batch.log_probs,
            "entropy": batch.entropy,
        }
        if batch.values is not None:
            fields.update(values=batch.values, vpreds=batch.vpreds)
        ragged = {key: _ragged(t, lengths) for key, t in fields.items()}
        samples = [
            {
                "uid": uid,
                "group": group,
                "mask": mask,
                "reward": float(score),
                **{key: rows[i] for key, rows in ragged.items()},
            }
            for i, (uid, group, mask, score) in enumerate(
                zip(batch.uids, batch.index, masks, batch.scores.tolist())
            )
        ]
        coef = (state or {}).get("kl_coef")
        result = train_step(samples, config.settings, choices=self.profile.choices(), kl_coef=coef)
        leaves = [(batch.log_probs, result["grad_logp"]), (batch.entropy, result["grad_entropy"])]
        if batch.vpreds is not None:
            leaves.append((batch.vpreds, result["grad_vpreds"]))
        for leaf, grad in leaves:
            (leaf * pad_like(grad, leaf).detach()).sum().backward()
        stages = {
            key: pad_like(result[key], batch.log_probs)
            for key in ("token_rewards", "advantages", "returns", "per_token_loss")
        }
        return StepOutput(
            loss=result["loss"],
            value_loss=result.get("value_loss"),
            stages=stages,
            metrics=result["metrics"],
            state=result["state"],
        )

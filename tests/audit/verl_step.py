"""One GRPO step made by verl 0.9.1's own trainer functions (needs verl installed).

The inputs (prompts, responses, masks, log-probs) come from ``batches.grpo_step``; every
derived field is written by verl on the path its trainer runs: ``assemble_rm_scores``
(reward loop: the score at L_i - 1 of the attention span), ``apply_kl_penalty`` and
``compute_advantage`` (``ray_trainer``), ``agg_loss`` (``core_algos``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from rlconform.adapters.verl.imports import import_verl_module
from tests.audit.batches import KL_COEF, grpo_step

INPUTS = (
    "prompts",
    "responses",
    "input_ids",
    "attention_mask",
    "position_ids",
    "response_mask",
    "old_log_probs",
    "ref_log_prob",
    "rollout_log_probs",
    "values",
    "pg_losses",
)
PROMPT_WIDTH = 5
TOOL_TAIL_ROW = 2


def verl_grpo_step(estimator: str = "grpo") -> tuple[Any, dict[str, Any], dict[str, float]]:
    """(DataProto, config, metrics) of one step; row 2 ends in a tool observation."""
    from verl import DataProto
    from verl.trainer.config import AlgoConfig
    from verl.trainer.ppo import core_algos

    trainer = import_verl_module("verl.trainer.ppo.ray_trainer")
    reward_base = import_verl_module("verl.experimental.reward_loop.reward_manager.base")
    step = grpo_step()
    response_mask = step["response_mask"].clone()
    length = int(step["attention_mask"][TOOL_TAIL_ROW, PROMPT_WIDTH:].sum())
    response_mask[TOOL_TAIL_ROW, length - 1] = 0
    tensors = {k: step[k] for k in INPUTS}
    tensors["response_mask"] = response_mask
    tensors["pg_losses"] = tensors["pg_losses"] * response_mask
    data = DataProto.from_dict(
        tensors=tensors,
        non_tensors={
            "uid": np.array(step["uid"], dtype=object),
            "sample_id": np.array(step["sample_id"], dtype=object),
        },
    )
    scores = [1.0, 0.5, 1.0, 1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0, 0.0]
    data.batch["token_level_scores"] = reward_base.RewardManagerBase.assemble_rm_scores(
        data, scores
    )
    data, kl_metrics = trainer.apply_kl_penalty(
        data, core_algos.FixedKLController(KL_COEF), kl_penalty="kl"
    )
    config = AlgoConfig(adv_estimator=estimator, gamma=0.9, lam=0.95)
    data = trainer.compute_advantage(
        data, estimator, gamma=0.9, lam=0.95, norm_adv_by_std_in_grpo=True, config=config
    )
    pg_loss = core_algos.agg_loss(
        loss_mat=data.batch["pg_losses"],
        loss_mask=data.batch["response_mask"],
        loss_agg_mode="token-mean",
    )
    audit_config = {
        "algorithm": {
            "adv_estimator": estimator,
            "gamma": 0.9,
            "lam": 0.95,
            "norm_adv_by_std_in_grpo": True,
            "use_kl_in_reward": True,
            "kl_penalty": "kl",
            "kl_ctrl": {"type": "fixed", "kl_coef": KL_COEF},
        },
        "actor": {"loss_agg_mode": "token-mean"},
    }
    metrics = {k: float(v) for k, v in kl_metrics.items()}
    metrics["pg_loss"] = float(pg_loss)
    assert isinstance(pg_loss, torch.Tensor)
    return data, audit_config, metrics


V1_FIELDS = (
    "response_mask",
    "token_level_scores",
    "token_level_rewards",
    "old_log_probs",
    "ref_log_prob",
    "rollout_log_probs",
    "values",
    "advantages",
    "returns",
    "pg_losses",
)


def v1_view(data: Any) -> Any:
    """What verl's v1 trainer holds at ``_compute_advantage``: no prompts or attention mask
    (fields fetched from TransferQueue, padded from nested tensors); the response lengths
    are those of the nested ``response_mask`` (``offsets().diff()``), here from the
    attention span they were padded from."""
    from verl import DataProto

    tensors = {k: data.batch[k] for k in V1_FIELDS}
    tensors["response_length"] = data.batch["attention_mask"][:, PROMPT_WIDTH:].sum(dim=1)
    return DataProto.from_dict(tensors=tensors, non_tensors=dict(data.non_tensor_batch))

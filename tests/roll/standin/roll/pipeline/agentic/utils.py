"""Stand-in for ``roll.pipeline.agentic.utils``: the agentic pipeline's reward normalisation
(grouped by a non-tensor key, so groups may differ in size) and advantage entry point (the
multi-turn ``response_mask`` read from the batch), over the stand-in functionals."""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from rlconform.adapters.roll.manifest import PROFILE
from rlconform.adapters.torchref import TorchRef
from roll.utils import functionals

_REF = TorchRef()
_REF.profile = PROFILE


@dataclasses.dataclass
class RewardNormalizationConfig:
    grouping: str = "batch"
    method: str = "identity"
    norm_mean_type: str | None = None
    norm_std_type: str | None = None


def compute_segment_masked_mean(tensor, mask):
    raise NotImplementedError("stand-in: segment ratios are not used by the adapter")


def compute_response_level_rewards(batch, pipeline_config):
    norm = pipeline_config.reward_normalization
    scores = batch.batch["scores"].sum(dim=-1)
    labels = np.asarray(batch.non_tensor_batch[norm.grouping], dtype=object)
    if norm.norm_mean_type != "group":
        raise NotImplementedError(f"stand-in: norm_mean_type {norm.norm_mean_type!r}")
    out, _ = _REF.advantage_grpo(
        scores.unsqueeze(-1),
        torch.ones((scores.shape[0], 1), dtype=torch.int64),
        labels,
        epsilon=PROFILE.grpo_eps,
        norm_by_std=norm.norm_std_type == "group",
    )
    batch.batch["response_level_rewards"] = out[:, 0]
    return batch, {}


def agentic_compute_advantage(
    data,
    gamma,
    lambd,
    adv_estimator,
    advantage_clip=None,
    whiten_advantages=False,
    whiten_rewards=False,
    response_mask=None,
    pipeline_config=None,
):
    if response_mask is None:
        response_mask = data.batch["response_mask"][:, 1:]
    return functionals.compute_advantage(
        data,
        gamma,
        lambd,
        adv_estimator,
        advantage_clip=advantage_clip,
        whiten_advantages=whiten_advantages,
        whiten_rewards=whiten_rewards,
        response_mask=response_mask,
        pipeline_config=pipeline_config,
    )

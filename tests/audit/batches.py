"""Recorded batches for the audit tests, their derived fields computed by torchref.

``grpo_step`` is one GRPO step as verl records it (B samples in groups, left-padded
prompts, right-padded responses with tool-observation holes, the score at L_i - 1, KL in
the reward, advantages, per-token losses and their token-mean aggregate). Its derived
fields come from torchref (the contract's torch implementation), so the batch is clean;
tests break one field to make a violation.
"""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest
import torch

from rlconform.adapters.torchref import TorchRef

KL_COEF = 0.05

# safetensors is optional (verl brings it); without it those containers' tests skip.
SAFETENSORS = importlib.util.find_spec("safetensors") is not None
needs_safetensors = pytest.mark.skipif(
    not SAFETENSORS, reason="safetensors is not installed (pip install safetensors)"
)
SUFFIXES = [pytest.param(".safetensors", marks=needs_safetensors), ".npz", ".pt"]


def grpo_step(
    groups: int = 3,
    per_group: int = 4,
    prompt_width: int = 5,
    width: int = 12,
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
) -> dict[str, Any]:
    """A clean GRPO step: tensors, non-tensors, config and metrics in one dict."""
    gen = torch.Generator().manual_seed(seed)
    size = groups * per_group
    ref = TorchRef()
    prompt_lengths = torch.randint(1, prompt_width + 1, (size,), generator=gen)
    lengths = torch.randint(2, width + 1, (size,), generator=gen)
    lengths[0] = width
    columns = torch.arange(width).unsqueeze(0)
    response = columns < lengths.unsqueeze(1)
    holes = (torch.rand(size, width, generator=gen) < 0.15) & response
    holes[:, 0] = False
    # tool observations inside the responses, none at the end (the score sits on an action)
    holes[torch.arange(size), lengths - 1] = False
    response_mask = (response & ~holes).to(torch.int64)
    prompt_columns = torch.arange(prompt_width).unsqueeze(0)
    prompt_mask = prompt_columns >= (prompt_width - prompt_lengths).unsqueeze(1)
    attention_mask = torch.cat([prompt_mask, response], dim=1).to(torch.int64)
    prompts = torch.randint(3, 100, (size, prompt_width), generator=gen) * prompt_mask
    responses = torch.randint(3, 100, (size, width), generator=gen) * response
    old = (-torch.rand(size, width, generator=gen) * 3).to(dtype)
    refl = (old - 0.3 * torch.randn(size, width, generator=gen)).to(dtype)
    rollout = (old + 0.05 * torch.randn(size, width, generator=gen)).to(dtype)
    scores = torch.randint(0, 2, (size,), generator=gen).to(dtype)
    scores[1] = 0.5
    uid = [f"prompt-{i // per_group}" for i in range(size)]
    sample_id = [f"p{i // per_group}-s{i % per_group}" for i in range(size)]
    # verl places the score at L_i - 1 (tool tokens counted): the attention span.
    token_level_scores = ref.place_reward_last(scores, response.to(torch.int64), response_mask)
    pg_losses = (torch.randn(size, width, generator=gen) * response_mask).to(dtype)
    step = {
        "prompts": prompts,
        "responses": responses,
        "input_ids": torch.cat([prompts, responses], dim=1),
        "attention_mask": attention_mask,
        "position_ids": (attention_mask.cumsum(dim=1) - 1).clamp(min=0),
        "response_mask": response_mask,
        "token_level_scores": token_level_scores,
        "old_log_probs": old,
        "ref_log_prob": refl,
        "rollout_log_probs": rollout,
        "values": torch.randn(size, width, generator=gen).to(dtype),
        "pg_losses": pg_losses,
        "uid": uid,
        "sample_id": sample_id,
        "config": {
            "adv_estimator": "grpo",
            "norm_adv_by_std_in_grpo": True,
            "use_kl_in_reward": True,
            "kl_penalty": "kl",
            "kl_coef": KL_COEF,
            "loss_agg_mode": "token-mean",
        },
    }
    return derive(step)


def derive(step: dict[str, Any]) -> dict[str, Any]:
    """The fields derived from ``token_level_scores`` on, recomputed by torchref (a copy)."""
    ref = TorchRef()
    step = dict(step)
    mask = step["response_mask"]
    rewards, kl_metric = ref.apply_kl_in_reward(
        step["token_level_scores"], step["old_log_probs"], step["ref_log_prob"], mask, KL_COEF, "kl"
    )
    advantages, returns = ref.advantage_grpo(rewards, mask, step["uid"])
    gap = ref.logprob_gap(step["old_log_probs"], step["rollout_log_probs"], mask)
    step.update(
        {
            "token_level_rewards": rewards,
            "advantages": advantages,
            "returns": returns,
            "pg_loss": ref.agg_loss(step["pg_losses"], mask, "token-mean"),
            "metrics": {
                "actor/reward_kl_penalty": float(kl_metric),
                "train_rollout_logprob_abs_diff": float(gap),
            },
        }
    )
    return step

"""Stand-in for openrlhf.utils.loss_utils."""

from __future__ import annotations

import torch


def get_loss_batch_info(
    strategy,
    loss_mask,
    *,
    replay_buffer=None,
    step=None,
    dynamic_batch=False,
    batch_num_tokens=None,
    global_batch_size=None,
):
    mask = loss_mask.bool()
    return {
        "dp_size": 1,
        "batch_num_tokens": mask.sum().to(torch.float32),
        "global_batch_size": mask.any(dim=-1).sum().to(torch.float32),
    }

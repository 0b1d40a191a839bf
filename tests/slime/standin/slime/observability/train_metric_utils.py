"""Stand-in ``slime.observability.train_metric_utils``: the metrics the adapter reads."""

import math

import torch.distributed as dist

from slime.observability import logging_utils


def reduce_train_step_metrics(
    losses_reduced, *, calculate_per_token_loss, step_global_batch_size, cp_size, dp_with_cp_group
):
    keys = losses_reduced[0]["keys"]
    values = sum(item["values"] for item in losses_reduced)
    dist.all_reduce(values, group=dp_with_cp_group)
    values = values.tolist()
    divisor = values[0] if calculate_per_token_loss else step_global_batch_size
    return {key: value / max(divisor, 1) for key, value in zip(keys, values[1:])}


def log_rollout_data(rollout_id, args, rollout_data):
    """``rollout/kl``: the contract's metric, the KL's mean over action tokens."""
    pairs = [
        (float(k), int(m))
        for kl, mask in zip(rollout_data["kl"], rollout_data["loss_masks"])
        for k, m in zip(kl.tolist(), mask.tolist())
    ]
    count = sum(m for _, m in pairs)
    kl = math.fsum(k for k, m in pairs if m) / count if count else 0.0
    logging_utils.log(args, {"rollout/kl": kl, "rollout/step": rollout_id}, step_key="rollout/step")

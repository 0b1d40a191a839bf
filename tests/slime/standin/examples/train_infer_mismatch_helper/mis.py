"""Stand-in ``compute_mis_weights_with_cp``: the contract's IS-correction weights."""

import torch

from rlconform.oracle import offpolicy as oracle


def compute_mis_weights_with_cp(
    args,
    *,
    pg_loss,
    train_log_probs,
    rollout_log_probs,
    loss_masks,
    total_lengths,
    response_lengths,
    **kwargs,
):
    level = "token" if args.tis_level == "token" else "sequence"
    action = "mask" if args.tis_mode == "mask" else "truncate"
    low = None if args.tis_mode == "truncate" else args.tis_lower_bound
    weights, masks = [], []
    for old, rollout, mask in zip(train_log_probs, rollout_log_probs, loss_masks):
        row = oracle.is_correction_weights(
            old.tolist(),
            rollout.tolist(),
            mask.tolist(),
            mode=f"{level}_{action}",
            clip_min=low,
            clip_max=args.tis_upper_bound,
            sequence_log_ratio="mean" if args.tis_level == "geometric" else "sum",
        )
        weights.append(torch.tensor(row, dtype=old.dtype))
        masks.append(mask.float())
    flat = torch.cat(weights) if weights else pg_loss.new_zeros(0)
    return pg_loss * flat, masks, {}

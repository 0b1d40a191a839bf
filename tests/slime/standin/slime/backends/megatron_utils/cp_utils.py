"""Stand-in ``slime.backends.megatron_utils.cp_utils.get_sum_of_sample_mean``."""

import torch


def get_sum_of_sample_mean(
    total_lengths, response_lengths, loss_masks, sample_denoms=None, calculate_per_token_loss=False
):
    """Sum over samples of the masked per-sample mean (or of the masked sum); values at
    mask-0 positions are never read."""
    if sample_denoms is None:
        sample_denoms = [m.sum() for m in loss_masks]

    def reduce(x):
        total = x.new_zeros(())
        for x_i, m_i, denom in zip(x.split(list(response_lengths)), loss_masks, sample_denoms):
            part = torch.where(m_i.bool(), x_i, torch.zeros_like(x_i)).sum()
            total = total + (part if calculate_per_token_loss else part / max(float(denom), 1.0))
        return total

    return reduce

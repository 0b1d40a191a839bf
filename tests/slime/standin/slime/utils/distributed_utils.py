"""Stand-in ``slime.utils.distributed_utils.distributed_masked_whiten`` (one rank)."""

import torch

from rlconform.oracle import advantage as oracle


def distributed_masked_whiten(values, mask, process_group=None, shift_mean=True, epsilon=1e-8):
    """Contract whitening (two-pass, unbiased, zeros off the mask) via the oracle."""
    rows = [values.detach().double().tolist()]
    whitened = oracle.whiten(rows, [mask.tolist()], degenerate="zeros", clause="standin")
    return torch.tensor(whitened[0], dtype=values.dtype, device=values.device)

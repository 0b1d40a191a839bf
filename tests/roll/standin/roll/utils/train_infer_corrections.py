"""Stand-in train/infer importance weights and ratio filters (ROLL's signature).

Token ratio exp(old - infer) or sequence ratio exp(sum over the mask), computed on action
tokens only (0 elsewhere); the weight is clamped to [0, upper_bound]; each enabled filter
keeps the tokens whose ratio lies in [ratio_low, ratio_high], and filtered tokens carry
weight 0, so the adapter's weight x filter product never meets an overflowed ratio.
"""

from __future__ import annotations

import torch


def _ratio(kind, old_log_probs, infer_log_probs, mask):
    log_ratio = torch.where(mask, old_log_probs - infer_log_probs, torch.zeros_like(old_log_probs))
    if kind == "token":
        ratio = log_ratio.exp()
    elif kind == "sequence":
        ratio = log_ratio.sum(-1, keepdim=True).exp().expand_as(log_ratio)
    else:
        raise NotImplementedError(f"stand-in: weight type {kind!r}")
    return torch.where(mask, ratio, torch.zeros_like(ratio))


def compute_train_infer_correction(
    cfg,
    response_mask,
    old_log_probs,
    infer_log_probs,
    global_valid_samples=None,
    global_valid_tokens=None,
):
    mask = response_mask.bool()
    keep = mask.clone()
    for f in cfg.filters:
        if f.enabled and f.ratio_enabled:
            r = _ratio(f.agg_type, old_log_probs, infer_log_probs, mask)
            keep = keep & (r >= f.ratio_low) & (r <= f.ratio_high)
    if cfg.is_weight.enabled:
        weight = _ratio(cfg.is_weight.weight_type, old_log_probs, infer_log_probs, mask)
        if cfg.is_weight.upper_bound is not None:
            weight = weight.clamp(min=0.0, max=cfg.is_weight.upper_bound)
        weight = torch.where(keep, weight, torch.zeros_like(weight))
    else:
        weight = torch.ones_like(old_log_probs)
    return weight, keep.to(torch.int64), {}

"""Stand-in for openrlhf.models.utils: torchref math behind OpenRLHF's signatures."""

from __future__ import annotations

import torch

from rlconform.adapters.torchref import TorchRef

_REF = TorchRef()
_NAMES = {"k1": "k1", "k2": "k2", "k3": "k3"}


def compute_approx_kl(
    log_probs, log_probs_base, log_probs_old=None, kl_estimator="k1", unbiased_gradient=False
):
    if kl_estimator not in _NAMES:
        raise ValueError(f"Unknown kl_estimator: {kl_estimator}")
    if not unbiased_gradient:
        return _REF.kl_penalty(log_probs, log_probs_base, kl_estimator)
    if log_probs_old is None:
        return _REF.kl_penalty(log_probs, log_probs_base, kl_estimator + "+")
    return _REF.importance_weighted_kl(log_probs, log_probs_base, log_probs_old, kl_estimator)


def compute_reward(r, kl_coef, kl, action_mask=None, reward_clip_range=None):
    kl_coef = max(kl_coef, 0.0)
    if reward_clip_range:
        r = r.clamp(min=reward_clip_range[0], max=reward_clip_range[1])
    placed = _REF.place_reward_last(r.to(kl.dtype), action_mask.long(), action_mask.long())
    return placed - kl_coef * kl


def masked_mean(tensor, mask, dim=None):
    if mask is None:
        return tensor.mean(dim=dim)
    keep = mask.bool()
    total = torch.where(keep, tensor, torch.zeros_like(tensor)).sum(dim=dim)
    count = keep.sum(dim=dim)
    return torch.where(count > 0, total / count.clamp(min=1), torch.zeros_like(total))


def compute_entropy(logits):
    return _REF.entropy_from_logits(logits)

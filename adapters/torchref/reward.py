"""torchref operations for the CONTRACT area `reward` (vectorized torch, any device)."""

from __future__ import annotations

import torch


class RewardOps:
    """Vectorized `reward` operations in the canonical padded layout."""

    def place_reward_last(
        self, scores: torch.Tensor, response_mask: torch.Tensor, loss_mask: torch.Tensor
    ) -> torch.Tensor:
        """reward.place_last: (B,) scores onto (B, T) at L_i - 1 (or the last action token)."""
        if self.profile.reward_nonaction_tail == "last_action":
            carrier = loss_mask * response_mask
        else:
            carrier = response_mask
        width = carrier.shape[-1]
        if width == 0:
            return torch.zeros_like(carrier, dtype=scores.dtype)
        columns = torch.arange(width, device=carrier.device).expand_as(carrier)
        last = torch.where(carrier.bool(), columns, torch.full_like(columns, -1)).amax(dim=-1)
        placed = (columns == last.unsqueeze(-1)) & (last.unsqueeze(-1) >= 0)
        return torch.where(placed, scores.to(torch.float64).unsqueeze(-1), 0.0).to(scores.dtype)

    def place_reward_uniform(
        self, scores: torch.Tensor, response_mask: torch.Tensor, loss_mask: torch.Tensor
    ) -> torch.Tensor:
        """reward.place_uniform: r / n_i on each of the n_i action tokens of (B, T); 0 elsewhere."""
        actions = (loss_mask * response_mask).bool()
        count = actions.sum(dim=-1, keepdim=True).clamp(min=1)
        share = scores.unsqueeze(-1) / count.to(scores.dtype)
        return torch.where(actions, share, 0.0)

    def place_reward_discounted(
        self,
        scores: torch.Tensor,
        response_mask: torch.Tensor,
        loss_mask: torch.Tensor,
        gamma: float,
    ) -> torch.Tensor:
        """reward.place_discounted: the k-th of n_i action tokens gets
        r g^(n_i-1-k) / sum_j g^(n_i-1-j); 0 elsewhere; sum = r."""
        actions = (loss_mask * response_mask).bool()
        # actions after this one: the exponent of g on an action token
        later = actions.sum(dim=-1, keepdim=True) - torch.cumsum(actions.to(torch.int64), dim=-1)
        base = torch.full_like(scores, gamma).unsqueeze(-1)
        weights = torch.where(actions, base.pow(later.to(scores.dtype)), 0.0)
        total = weights.sum(dim=-1, keepdim=True)
        placed = scores.unsqueeze(-1) * weights / torch.where(total > 0, total, 1.0)
        return torch.where(actions, placed, 0.0)

    def normalize_rewards(self, scores: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        """reward.normalize_batch: (B,) (r - mean) / (std + eps) over kept rows; dropped -> 0.

        Two passes (mean, then the mean squared deviation), never E[x^2] - mean^2, which
        cancels catastrophically on nearly equal rewards. Profile keys
        ``reward_norm_std_ddof`` (contract 0) and ``reward_norm_eps`` (contract 1e-8).
        """
        ddof = self.profile.get("reward_norm_std_ddof", 0)
        eps = self.profile.get("reward_norm_eps", 1e-8)
        kept = keep.bool()
        if kept.numel() == 0:
            return torch.zeros_like(scores)
        count = kept.sum()
        values = torch.where(kept, scores, 0.0)
        mean = values.sum() / count.clamp(min=1)
        deviation = torch.where(kept, scores - mean, 0.0)
        std = ((deviation**2).sum() / (count - ddof).clamp(min=1)).sqrt()
        highest = torch.where(kept, scores, float("-inf")).amax()
        lowest = torch.where(kept, scores, float("inf")).amin()
        # All-equal kept rewards: exactly 0, not a rounding residue divided by ~0.
        spread = kept & (highest != lowest)
        return torch.where(spread, deviation / (std + eps), 0.0)

    def td_targets(
        self,
        scores: torch.Tensor,
        bootstrap_value: torch.Tensor,
        truncated: torch.Tensor,
        gamma: float,
    ) -> torch.Tensor:
        """reward.td_target: (B,) r, plus gamma * V_boot when truncated (V_boot ignored,
        whatever it holds, when terminated)."""
        boot = bootstrap_value.to(device=scores.device, dtype=scores.dtype)
        cut = truncated.to(scores.device).bool()
        return torch.where(cut, scores + gamma * torch.where(cut, boot, 0.0), scores)

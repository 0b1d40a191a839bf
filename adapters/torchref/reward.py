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

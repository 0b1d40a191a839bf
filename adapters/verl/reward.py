"""verl bindings for the CONTRACT area `reward`: the reward loop's ``assemble_rm_scores``."""

from __future__ import annotations

import torch

from rlconform.adapters.verl.imports import import_verl_module


class RewardOps:
    """`reward` operations through verl's reward-placement path."""

    def place_reward_last(
        self, scores: torch.Tensor, response_mask: torch.Tensor, loss_mask: torch.Tensor
    ) -> torch.Tensor:
        """reward.place_last: ``RewardManagerBase.assemble_rm_scores`` on a one-token-prompt batch.

        verl reads the response length from the attention mask (tool tokens included), so the
        response mask becomes the response half of the attention mask; ``loss_mask`` has no
        role in verl's placement.
        """
        from verl import DataProto

        base = import_verl_module("verl.experimental.reward_loop.reward_manager.base")
        rows, width = response_mask.shape
        prompt = torch.ones((rows, 1), dtype=torch.int64, device=response_mask.device)
        data = DataProto.from_dict(
            tensors={
                "prompts": prompt,
                "responses": torch.zeros_like(response_mask, dtype=torch.int64),
                "attention_mask": torch.cat([prompt, response_mask.to(torch.int64)], dim=-1),
            }
        )
        placed = base.RewardManagerBase.assemble_rm_scores(data, scores.tolist())
        return placed.to(scores.dtype)

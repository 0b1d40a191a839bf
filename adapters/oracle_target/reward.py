"""Oracle-target operations for `reward`: padded tensors -> ragged lists -> oracle -> padded."""

from __future__ import annotations

import torch

from rlconform.adapters.oracle_target._convert import row_lengths
from rlconform.conformance.harness import pad_right, to_float_list
from rlconform.oracle import reward as oracle_reward


def _loss_masks(loss_mask: torch.Tensor, lengths: list[int]) -> list[list[int]]:
    return [[int(m) for m in row[:n]] for row, n in zip(loss_mask.tolist(), lengths, strict=True)]


class RewardOps:
    """`reward` operations that delegate to `rlconform.oracle.reward`."""

    def place_reward_last(
        self, scores: torch.Tensor, response_mask: torch.Tensor, loss_mask: torch.Tensor
    ) -> torch.Tensor:
        masks = _loss_masks(loss_mask, row_lengths(response_mask))
        rows = [
            oracle_reward.place_reward_last(
                s, m, nonaction_tail=self.profile.reward_nonaction_tail
            )[0]
            for s, m in zip(to_float_list(scores), masks, strict=True)
        ]
        return pad_right(
            rows, width=response_mask.shape[-1], dtype=scores.dtype, device=scores.device
        )

    def place_reward_uniform(
        self, scores: torch.Tensor, response_mask: torch.Tensor, loss_mask: torch.Tensor
    ) -> torch.Tensor:
        masks = _loss_masks(loss_mask, row_lengths(response_mask))
        rows = [
            oracle_reward.place_reward_uniform(s, m)
            for s, m in zip(to_float_list(scores), masks, strict=True)
        ]
        return pad_right(
            rows, width=response_mask.shape[-1], dtype=scores.dtype, device=scores.device
        )

    def place_reward_discounted(
        self,
        scores: torch.Tensor,
        response_mask: torch.Tensor,
        loss_mask: torch.Tensor,
        gamma: float,
    ) -> torch.Tensor:
        masks = _loss_masks(loss_mask, row_lengths(response_mask))
        rows = [
            oracle_reward.place_reward_discounted(s, m, gamma)
            for s, m in zip(to_float_list(scores), masks, strict=True)
        ]
        return pad_right(
            rows, width=response_mask.shape[-1], dtype=scores.dtype, device=scores.device
        )

    def normalize_rewards(self, scores: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        normalized = oracle_reward.normalize_rewards(
            to_float_list(scores),
            [bool(k) for k in keep.tolist()],
            ddof=self.profile.get("reward_norm_std_ddof", 0),
            eps=self.profile.get("reward_norm_eps", 1e-8),
        )
        values = [0.0 if x is None else x for x in normalized]
        return torch.tensor(values, dtype=scores.dtype, device=scores.device)

    def td_targets(
        self,
        scores: torch.Tensor,
        bootstrap_value: torch.Tensor,
        truncated: torch.Tensor,
        gamma: float,
    ) -> torch.Tensor:
        targets = [
            oracle_reward.td_target(r, boot, bool(cut), gamma)
            for r, boot, cut in zip(
                to_float_list(scores),
                to_float_list(bootstrap_value),
                truncated.tolist(),
                strict=True,
            )
        ]
        return torch.tensor(targets, dtype=scores.dtype, device=scores.device)

"""Oracle-target operations for `reward`: padded tensors -> ragged lists -> oracle -> padded."""

from __future__ import annotations

import torch

from rlconform.conformance.harness import pad_right, to_float_list
from rlconform.oracle import reward as oracle_reward


class RewardOps:
    """`reward` operations that delegate to `rlconform.oracle.reward`."""

    def place_reward_last(
        self, scores: torch.Tensor, response_mask: torch.Tensor, loss_mask: torch.Tensor
    ) -> torch.Tensor:
        lengths = [int(n) for n in response_mask.sum(-1).tolist()]
        masks = [[int(m) for m in row[:n]] for row, n in zip(loss_mask.tolist(), lengths)]
        rows = [
            oracle_reward.place_reward_last(
                s, m, nonaction_tail=self.profile.reward_nonaction_tail
            )[0]
            for s, m in zip(to_float_list(scores), masks)
        ]
        return pad_right(
            rows, width=response_mask.shape[-1], dtype=scores.dtype, device=scores.device
        )

"""ROLL bindings for the CONTRACT area `reward` (``roll.utils.functionals``)."""

from __future__ import annotations

import torch

from rlconform.adapters.roll.common import RollCommon


class RewardBindings(RollCommon):
    """`reward` operations, each one ROLL function call in ROLL's layout."""

    def place_reward_last(
        self, scores: torch.Tensor, response_mask: torch.Tensor, loss_mask: torch.Tensor
    ) -> torch.Tensor:
        """reward.place_last -> ``expand_to_token_level``: the response-level reward goes on
        the last attended token (argmax of position_ids * attention_mask), read back from
        ROLL's (B, L - 1) grid."""
        layout = self._layout(response_mask)
        data = self._proto(
            {"response_level_rewards": scores, **self._sequence_fields(layout, loss_mask)}
        )
        return layout.tokens_from_roll(self.F.expand_to_token_level(data))

    def normalize_rewards(self, scores: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        """reward.normalize_batch -> ``reward_postprocess`` with norm_mean_type and
        norm_std_type "batch" (no reward_clip). ROLL has no keep input: the whole batch it
        is given is normalised, and samples dropped by ``get_sample_level_mask`` are masked
        only later, so ``keep`` is not passed (ROLL's behaviour is what is certified)."""
        del keep
        config = self._config(
            adv_estimator="reinforce",
            norm_mean_type="batch",
            norm_std_type="batch",
            reward_clip=None,
            num_return_sequences=1,
        )
        data = self._proto({"response_level_rewards": scores})
        data, _ = self.F.reward_postprocess(data, config, {})
        return data.batch["response_level_rewards"]

"""Oracle-target operations for `offpolicy`: padded tensors -> ragged lists -> oracle -> padded.

The action-token mask marks both mask holes and padding, and every oracle result is 0
where it is 0, so whole padded rows can go to the oracle.
"""

from __future__ import annotations

import torch

from rlconform.adapters.oracle_target._convert import int_rows, pad_like
from rlconform.conformance.harness import to_float_list
from rlconform.oracle import offpolicy as oracle_offpolicy


class OffpolicyOps:
    """`offpolicy` operations that delegate to `rlconform.oracle.offpolicy`."""

    def _clamp(self) -> float | None:
        """Profile ``is_log_ratio_clamp``: clamp of a log-ratio before exp (default none)."""
        return self.profile.get("is_log_ratio_clamp")

    def tis_weights(
        self,
        old_logprob: torch.Tensor,
        rollout_logprob: torch.Tensor,
        response_mask: torch.Tensor,
        clip_low: float | None = 0.0,
        clip_high: float | None = 2.0,
    ) -> torch.Tensor:
        rows = [
            oracle_offpolicy.tis_weights(
                od, ro, m, low=clip_low, high=clip_high, log_ratio_clamp=self._clamp()
            )
            for od, ro, m in zip(
                to_float_list(old_logprob),
                to_float_list(rollout_logprob),
                int_rows(response_mask),
                strict=True,
            )
        ]
        return pad_like(rows, old_logprob)

    def icepop_weights(
        self,
        old_logprob: torch.Tensor,
        rollout_logprob: torch.Tensor,
        response_mask: torch.Tensor,
        clip_low: float | None = 0.5,
        clip_high: float | None = 2.0,
    ) -> torch.Tensor:
        rows = [
            oracle_offpolicy.icepop_weights(
                od, ro, m, low=clip_low, high=clip_high, log_ratio_clamp=self._clamp()
            )
            for od, ro, m in zip(
                to_float_list(old_logprob),
                to_float_list(rollout_logprob),
                int_rows(response_mask),
                strict=True,
            )
        ]
        return pad_like(rows, old_logprob)

    def opsm_mask(
        self,
        logprob: torch.Tensor,
        old_logprob: torch.Tensor,
        advantages: torch.Tensor,
        response_mask: torch.Tensor,
        delta: float = 1e-4,
    ) -> torch.Tensor:
        masks = int_rows(response_mask)
        rows = []
        for lp, od, adv, m in zip(
            to_float_list(logprob),
            to_float_list(old_logprob),
            to_float_list(advantages),
            masks,
            strict=True,
        ):
            # The sequence advantage: any action token carries it (constant along the row).
            advantage = next((a for a, keep in zip(adv, m, strict=True) if keep), 0.0)
            rows.append(oracle_offpolicy.opsm_keep(lp, od, m, advantage, delta=delta))
        return pad_like(rows, logprob)

    def is_correction_weights(
        self,
        old_logprob: torch.Tensor,
        rollout_logprob: torch.Tensor,
        response_mask: torch.Tensor,
        mode: str = "sequence_mask",
        clip_min: float | None = None,
        clip_max: float | None = 3.0,
    ) -> torch.Tensor:
        sequence_log_ratio = self.profile.get("is_sequence_log_ratio", "sum")
        rows = [
            oracle_offpolicy.is_correction_weights(
                od,
                ro,
                m,
                mode=mode,
                clip_min=clip_min,
                clip_max=clip_max,
                sequence_log_ratio=sequence_log_ratio,
                log_ratio_clamp=self._clamp(),
            )
            for od, ro, m in zip(
                to_float_list(old_logprob),
                to_float_list(rollout_logprob),
                int_rows(response_mask),
                strict=True,
            )
        ]
        return pad_like(rows, old_logprob)

    def logprob_gap(
        self,
        old_logprob: torch.Tensor,
        rollout_logprob: torch.Tensor,
        response_mask: torch.Tensor,
    ) -> float:
        return oracle_offpolicy.logprob_gap(
            to_float_list(old_logprob),
            to_float_list(rollout_logprob),
            int_rows(response_mask),
            reduction=self.profile.get("logprob_gap_reduction", "token_mean"),
        )

"""ROLL bindings for the CONTRACT area `offpolicy`
(``roll.utils.train_infer_corrections.compute_train_infer_correction``).

ROLL returns an importance weight (``is_weight``, clamped to [0, upper_bound] when a bound
is set) and a 0/1 ``filter_mask`` from ratio-band filters; its actor multiplies the loss by
the weight and the loss mask by the filter. A contract weight "ratio inside the band,
else 0" is that pair's product.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from rlconform.adapters.base import Unsupported
from rlconform.adapters.is_correction_mode import split_mode
from rlconform.adapters.roll.common import RollCommon


class OffpolicyBindings(RollCommon):
    """TIS, ICEPOP and the token/sequence IS corrections; ROLL has no OPSM and no
    |old - rollout| log-prob metric (its train/infer metrics are probability differences)."""

    def _corrections(self) -> Any:
        module = self.runtime.corrections
        if module is None:
            raise RuntimeError(
                f"roll.utils.train_infer_corrections is unavailable: {self.runtime.corrections_error}"
            )
        return module

    def _correct(
        self,
        old_logprob: torch.Tensor,
        rollout_logprob: torch.Tensor,
        response_mask: torch.Tensor,
        *,
        weight_type: str,
        upper_bound: float | None,
        band: tuple[float | None, float | None] | None = None,
    ) -> torch.Tensor:
        config_module = self.config_module
        filters = []
        if band is not None:
            low, high = band
            filters.append(
                config_module.TrainInferFilterConfig(
                    enabled=True,
                    agg_type=weight_type,
                    ratio_enabled=True,
                    ratio_low=-math.inf if low is None else low,
                    ratio_high=math.inf if high is None else high,
                    diff_enabled=False,
                )
            )
        config = config_module.TrainInferCorrectionConfig(
            is_weight=config_module.TrainInferISWeightConfig(
                enabled=True, weight_type=weight_type, upper_bound=upper_bound, detach=True
            ),
            filters=filters,
        )
        layout = self._layout(response_mask)
        weight, keep, _ = self._corrections().compute_train_infer_correction(
            cfg=config,
            response_mask=layout.tokens_to_roll(response_mask, fill=0),
            old_log_probs=layout.tokens_to_roll(old_logprob, fill=0.0),
            infer_log_probs=layout.tokens_to_roll(rollout_logprob, fill=0.0),
        )
        if band is not None:
            weight = weight * keep  # the actor's loss * is_weight under mask * filter_mask
        return layout.tokens_from_roll(weight)

    @staticmethod
    def _lower_bound_zero(low: float | None) -> None:
        if low not in (None, 0, 0.0):
            raise Unsupported(f"ROLL clamps the IS weight to [0, upper_bound], not from {low}")

    def tis_weights(
        self,
        old_logprob: torch.Tensor,
        rollout_logprob: torch.Tensor,
        response_mask: torch.Tensor,
        clip_low: float | None = 0.0,
        clip_high: float | None = 2.0,
    ) -> torch.Tensor:
        """offpolicy.tis -> is_weight, weight_type "token", upper_bound ``clip_high``."""
        self._lower_bound_zero(clip_low)
        return self._correct(
            old_logprob, rollout_logprob, response_mask, weight_type="token", upper_bound=clip_high
        )

    def icepop_weights(
        self,
        old_logprob: torch.Tensor,
        rollout_logprob: torch.Tensor,
        response_mask: torch.Tensor,
        clip_low: float | None = 0.5,
        clip_high: float | None = 2.0,
    ) -> torch.Tensor:
        """offpolicy.icepop -> token is_weight (no bound) x token ratio filter [low, high]."""
        return self._correct(
            old_logprob,
            rollout_logprob,
            response_mask,
            weight_type="token",
            upper_bound=None,
            band=(clip_low, clip_high),
        )

    def is_correction_weights(
        self,
        old_logprob: torch.Tensor,
        rollout_logprob: torch.Tensor,
        response_mask: torch.Tensor,
        mode: str = "sequence_mask",
        clip_min: float | None = None,
        clip_max: float | None = 3.0,
    ) -> torch.Tensor:
        """offpolicy.is_correction -> weight_type "token" / "sequence" (exp of the summed
        log-ratio); truncate: upper_bound ``clip_max``; mask: a ratio filter band."""
        level, action = split_mode(mode)
        if action == "truncate":
            self._lower_bound_zero(clip_min)
            return self._correct(
                old_logprob, rollout_logprob, response_mask, weight_type=level, upper_bound=clip_max
            )
        return self._correct(
            old_logprob,
            rollout_logprob,
            response_mask,
            weight_type=level,
            upper_bound=None,
            band=(clip_min, clip_max),
        )

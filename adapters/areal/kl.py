"""AReaL binding of `kl.estimators`: ``KLEstimator`` as ``PPOActor`` builds it
(``KLEstimator(config.kl_estimator)``, ``apply_clamp=True``) and ``_compute_advantages``
calls it, on the old and reference log-probs (the KL reward ``-kl_ctl * KL``). AReaL has
no KL loss term: the estimator is only used in the reward.
"""

from __future__ import annotations

from typing import Any

import torch

from rlconform.adapters.base import Unsupported

# contract estimator names -> AReaL's kl_estimator choices
ESTIMATORS = {"kl": "k1", "k1": "k1", "mse": "k2", "k2": "k2", "low_var_kl": "k3", "k3": "k3"}


class KLBindings:
    runtime: Any

    def kl_penalty(
        self, logprob: torch.Tensor, ref_logprob: torch.Tensor, mode: str
    ) -> torch.Tensor:
        """kl.estimators: ``KLEstimator(kl_estimator)(logprob, ref_logprob)``."""
        if mode not in ESTIMATORS:
            raise Unsupported(f"AReaL's KLEstimator has no {mode!r} estimator (k1, k2, k3)")
        return self.runtime.data.KLEstimator(ESTIMATORS[mode])(logprob, ref_logprob)

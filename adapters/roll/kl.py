"""ROLL bindings for the CONTRACT area `kl` (``compute_approx_kl``, ``compute_token_reward``,
``roll.utils.kl_controller``)."""

from __future__ import annotations

import torch

from rlconform.adapters.base import Inexpressible, Unsupported
from rlconform.adapters.roll.common import RollCommon
from rlconform.adapters.roll.layout import RollLayout, response_lengths

#: Contract estimator names -> ROLL's ``kl_penalty`` names ("full" needs vocab log-probs).
KL_PENALTY = {
    "kl": "kl",
    "k1": "kl",
    "abs": "abs",
    "mse": "mse",
    "k2": "mse",
    "k3": "k3",
    "low_var_kl": "k3",
}


def roll_kl_penalty(mode: str) -> str:
    if mode.endswith("+"):
        raise Unsupported(f"ROLL has no straight-through KL mode ({mode!r})")
    if mode not in KL_PENALTY:
        raise Unsupported(f"ROLL has no KL estimator {mode!r}")
    return KL_PENALTY[mode]


class KLBindings(RollCommon):
    """`kl` operations ROLL has a function for (no importance-weighted KL)."""

    def kl_penalty(
        self, logprob: torch.Tensor, ref_logprob: torch.Tensor, mode: str
    ) -> torch.Tensor:
        """kl.estimators -> ``compute_approx_kl(log_probs, log_probs_base, kl_penalty=...)``."""
        return self.F.compute_approx_kl(
            log_probs=logprob,
            log_probs_base=ref_logprob,
            action_mask=None,
            kl_penalty=roll_kl_penalty(mode),
        )

    def apply_kl_in_reward(
        self,
        token_scores: torch.Tensor,
        old_logprob: torch.Tensor,
        ref_logprob: torch.Tensor,
        response_mask: torch.Tensor,
        beta: float,
        mode: str,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """kl.in_reward -> ``compute_token_reward`` with ``add_token_level_kl`` and a fixed
        KL controller of value beta. ROLL builds the token scores itself from one
        response-level reward on the last response token, so only such token scores can
        be expressed (others are Inexpressible); the metric is ROLL's
        ``critic/kl`` (per-sample masked mean, then the mean over samples)."""
        # The response runs at least to its last action token and to its scored token
        # (a response may end in non-action tokens that carry the reward).
        scored = torch.nan_to_num(token_scores, nan=1.0) != 0
        lengths = torch.maximum(response_lengths(response_mask), response_lengths(scored))
        width = self._layout(response_mask).width
        layout = RollLayout.build(lengths, token_scores.shape[-1], None, width)
        j = torch.arange(token_scores.shape[-1], device=token_scores.device)
        last = (j == (layout.lengths - 1).unsqueeze(-1)).to(token_scores.device)
        finite_scores = torch.where(last, token_scores, torch.zeros_like(token_scores))
        if bool((scored & ~last).any()):
            raise Inexpressible(
                "ROLL's compute_token_reward places one response-level reward on the last "
                "response token; these token scores are not of that form"
            )
        scores = finite_scores.sum(-1)  # the one non-zero per row: the response-level reward
        config = self._config(
            kl_penalty=roll_kl_penalty(mode), add_token_level_kl=True, reward_clip=None
        )
        controller = self.kl_controller_module.FixedKLController(kl_coef=beta)
        data = self._proto(
            {
                "response_level_rewards": scores,
                "old_log_probs": layout.tokens_to_roll(old_logprob, fill=0.0),
                "ref_log_probs": layout.tokens_to_roll(ref_logprob, fill=0.0),
                **self._sequence_fields(layout, response_mask),
            }
        )
        data, metrics = self.F.compute_token_reward(data, config, controller)
        rewards = layout.tokens_from_roll(data.batch["token_level_rewards"])
        return rewards, torch.as_tensor(metrics["critic/kl"], dtype=rewards.dtype)

    def kl_controller_update(
        self,
        kind: str,
        value: float,
        current_kl: float,
        n_steps: int,
        target_kl: float,
        horizon: float,
    ) -> float:
        """kl.adaptive_controller -> ``get_kl_controller(...)`` then one ``update``."""
        if kind not in ("fixed", "adaptive"):
            raise ValueError(f"unknown controller kind {kind!r}")
        controller = self.kl_controller_module.get_kl_controller(
            init_kl_coef=value,
            target_kl=target_kl if kind == "adaptive" else None,
            kl_horizon=horizon,
        )
        controller.update(current=current_kl, n_steps=n_steps)
        return float(controller.value)

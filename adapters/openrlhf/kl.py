"""OpenRLHF bindings for the CONTRACT areas `kl` and `reward`: ``compute_approx_kl``,
``compute_reward`` and the KL controllers (``openrlhf.models.utils``,
``openrlhf.trainer.ppo_utils.kl_controller``)."""

from __future__ import annotations

import torch

from rlconform.adapters.base import Inexpressible, Unsupported
from rlconform.adapters.openrlhf.common import REWARD_CLIP_RANGE, OpenRLHFCommon, action_mask

# Contract estimator names -> OpenRLHF's ``kl_estimator`` (--algo.kl.estimator).
ESTIMATORS = {"kl": "k1", "k1": "k1", "mse": "k2", "k2": "k2", "low_var_kl": "k3", "k3": "k3"}


def _estimator(mode: str) -> tuple[str, bool]:
    straight = mode.endswith("+")
    name = mode[:-1] if straight else mode
    if name not in ESTIMATORS:
        raise Unsupported(f"OpenRLHF's compute_approx_kl has no {name!r} estimator (k1, k2, k3)")
    return ESTIMATORS[name], straight


def _outcome_rewards(token_scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The (B,) outcome reward ``compute_reward`` takes, read off canonical token scores.

    OpenRLHF's reward is one scalar per sample that ``compute_reward`` itself places on the
    last action token; rows whose scores are anything else (dense scores, a score on a
    mask-0 token) cannot be written in that signature."""
    width = token_scores.shape[-1]
    if width == 0 or token_scores.shape[0] == 0:
        return token_scores.sum(-1)
    columns = torch.arange(width, device=token_scores.device).expand_as(token_scores)
    last = torch.where(mask, columns, torch.full_like(columns, -1)).amax(-1, keepdim=True)
    on_last = columns == last
    elsewhere = torch.where(on_last, torch.zeros_like(token_scores), token_scores)
    if bool((elsewhere != 0).any()):
        rows = torch.nonzero((elsewhere != 0).any(-1)).flatten().tolist()
        raise Inexpressible(
            f"rows {rows} score tokens other than their last action token: OpenRLHF's reward "
            "is one scalar per sample, placed by compute_reward on the last action token"
        )
    return torch.where(on_last, token_scores, torch.zeros_like(token_scores)).sum(-1)


class KLBindings(OpenRLHFCommon):
    """`kl.*` and `reward.place_last` through OpenRLHF's own functions."""

    def kl_penalty(
        self, logprob: torch.Tensor, ref_logprob: torch.Tensor, mode: str
    ) -> torch.Tensor:
        """kl.estimators: ``compute_approx_kl(logp, ref, kl_estimator=...)`` as
        ``make_experience`` calls it; kl.straight_through (``k3+`` ...): the KL-loss call of
        ``PPOActor.training_step`` with ``unbiased_gradient=True`` and no old log-probs
        (importance weight 1: the on-policy step), from 0.11.1."""
        estimator, straight = _estimator(mode)
        compute_approx_kl = self.runtime.utils.compute_approx_kl
        if not straight:
            return compute_approx_kl(logprob, ref_logprob, kl_estimator=estimator)
        if not self.runtime.release.kl_straight_through:
            raise Unsupported(
                f"OpenRLHF {self.version}: compute_approx_kl has no unbiased_gradient "
                "(straight-through) mode before 0.11.1"
            )
        return compute_approx_kl(
            logprob, ref_logprob, log_probs_old=None, kl_estimator=estimator, unbiased_gradient=True
        )

    def importance_weighted_kl(
        self,
        logprob: torch.Tensor,
        ref_logprob: torch.Tensor,
        old_logprob: torch.Tensor,
        mode: str,
    ) -> torch.Tensor:
        """kl.importance_weighted: the KL-loss call of ``PPOActor.training_step`` with
        ``--algo.kl.unbiased_gradient``: ``compute_approx_kl(logp, ref, log_probs_old=old,
        kl_estimator, unbiased_gradient=True)`` (0.11.1 on)."""
        estimator, straight = _estimator(mode)
        if straight:
            raise Unsupported(f"straight-through mode {mode!r} is not importance weighted")
        if not self.runtime.release.kl_straight_through:
            raise Unsupported(
                f"OpenRLHF {self.version}: compute_approx_kl has no importance-weighted "
                "(unbiased_gradient) mode before 0.11.1"
            )
        return self.runtime.utils.compute_approx_kl(
            logprob,
            ref_logprob,
            log_probs_old=old_logprob,
            kl_estimator=estimator,
            unbiased_gradient=True,
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
        """kl.in_reward: ``make_experience``'s ``compute_approx_kl(actor, ref, estimator)``,
        then ``compute_reward(r, kl_ctl.value, kl, action_mask, reward.clip_range)`` of
        ``compute_advantages_and_returns``. The metric is ``make_experience``'s per-sample
        ``info["kl"] = masked_mean(kl, action_mask, dim=-1)``, averaged over the samples as
        the trainer's status reduction does (``masked_mean(info, None)``)."""
        estimator, straight = _estimator(mode)
        if straight:
            raise Unsupported(f"straight-through mode {mode!r} is a loss mode, not a reward KL")
        utils = self.runtime.utils
        mask = action_mask(response_mask)
        rewards = _outcome_rewards(token_scores, mask)
        kl = utils.compute_approx_kl(old_logprob, ref_logprob, kl_estimator=estimator)
        shaped = utils.compute_reward(
            rewards, beta, kl, action_mask=mask, reward_clip_range=REWARD_CLIP_RANGE
        )
        per_sample = utils.masked_mean(kl, mask, dim=-1)
        return shaped, utils.masked_mean(per_sample, None)

    def place_reward_last(
        self, scores: torch.Tensor, response_mask: torch.Tensor, loss_mask: torch.Tensor
    ) -> torch.Tensor:
        """reward.place_last: ``compute_reward(r, kl_coef=0, kl=0, action_mask,
        reward.clip_range)``: OpenRLHF places r on the last action token (profile
        ``reward_nonaction_tail="last_action"``); the KL term is 0 here."""
        mask = action_mask(loss_mask * response_mask)
        zeros = torch.zeros(mask.shape, dtype=scores.dtype, device=scores.device)
        return self.runtime.utils.compute_reward(
            scores, 0.0, zeros, action_mask=mask, reward_clip_range=REWARD_CLIP_RANGE
        )

    def kl_controller_update(
        self,
        kind: str,
        value: float,
        current_kl: float,
        n_steps: int,
        target_kl: float,
        horizon: float,
    ) -> float:
        """kl.adaptive_controller: ``AdaptiveKLController(init_coef, target, horizon)`` (with
        --algo.kl.target) or ``FixedKLController(init_coef)``, then one ``update``."""
        controllers = self.runtime.kl_controller
        if kind == "fixed":
            controller = controllers.FixedKLController(value)
        elif kind == "adaptive":
            controller = controllers.AdaptiveKLController(value, target_kl, horizon)
        else:
            raise ValueError(f"unknown controller kind {kind!r}")
        controller.update(current_kl, n_steps)
        return float(controller.value)

"""Targets built for the CLI tests (loaded through ``module:attribute``)."""

from __future__ import annotations

from rlconform.adapters.base import with_overrides
from rlconform.adapters.torchref import TorchRef


def _last_column(self, scores, response_mask, loss_mask):
    out = scores.new_zeros(response_mask.shape)
    if out.shape[-1]:
        out[:, -1] = scores
    return out


def broken_reward_target():
    """torchref with the reward written into the last padded column."""
    return with_overrides(TorchRef(), name="broken-reward", place_reward_last=_last_column)


NOT_A_TARGET = 42


# ---- targets graded by severity (CONTRACT §0a), one per domain ----------------------------


def _grpo_population_std(
    self, token_level_rewards, response_mask, index, epsilon=1e-6, norm_by_std=True
):
    """GRPO with the population std (ddof 0) where the profile says ddof 1: every ordinary
    group of two or more gets the wrong scale (nominal)."""
    import dataclasses

    patched = dataclasses.replace(self.profile, grpo_std_ddof=0)
    original = self.profile
    object.__setattr__(self, "profile", patched)
    try:
        return type(self).advantage_grpo(
            self, token_level_rewards, response_mask, index, epsilon, norm_by_std
        )
    finally:
        object.__setattr__(self, "profile", original)


def _last_column_when_empty(self, scores, response_mask, loss_mask):
    """Correct placement, except that L_i = 0 writes the score into the last padded column
    (verl's column -1): breaks only on empty responses (edge)."""
    out = type(self).place_reward_last(self, scores, response_mask, loss_mask)
    if out.shape[-1]:
        empty = response_mask.sum(-1) == 0
        out[empty, -1] = scores[empty]
    return out


def _token_mean_by_multiplication(self, loss_mat, loss_mask, mode, **kwargs):
    """token-mean masking by multiplication: sum(l * m) / N, so NaN * 0 = NaN at padding leaks
    (hardening: a correct upstream never puts NaN there)."""
    if mode != "token-mean":
        return type(self).agg_loss(self, loss_mat, loss_mask, mode, **kwargs)
    count = kwargs.get("batch_num_tokens") or int(loss_mask.sum())
    total = (loss_mat * loss_mask).sum() / max(count, 1)
    return total * kwargs.get("dp_size", 1)


def nominal_grpo_target():
    return with_overrides(
        TorchRef(), name="grpo-population-std", advantage_grpo=_grpo_population_std
    )


def edge_reward_target():
    return with_overrides(
        TorchRef(), name="reward-column-minus-1", place_reward_last=_last_column_when_empty
    )


def hardening_token_mean_target():
    return with_overrides(
        TorchRef(), name="token-mean-multiply", agg_loss=_token_mean_by_multiplication
    )


def agg_without_token_sum(self, loss_mat, loss_mask, mode, **kwargs):
    """agg_loss of a framework without a token-sum mode (importable: gloo workers unpickle it)."""
    from rlconform.adapters.base import Unsupported

    if mode == "token-sum":
        raise Unsupported("no token-sum mode")
    return type(self).agg_loss(self, loss_mat, loss_mask, mode, **kwargs)


def without_gspo_target():
    """torchref without its GSPO loss (loss.gspo is skipped)."""
    return with_overrides(TorchRef(), "no-gspo", gspo_loss=None)


# ---- a featureless break and a second bug in the same check (baseline fingerprints) ------


def _grpo_scaled(factor):
    def advantage_grpo(self, token_level_rewards, response_mask, index, *args, **kwargs):
        adv, ret = type(self).advantage_grpo(
            self, token_level_rewards, response_mask, index, *args, **kwargs
        )
        return adv * factor, ret

    return advantage_grpo


def grpo_scaled_target():
    """GRPO advantages 1.5 times the contract's on every case: a break no feature and no
    profile value explains (a featureless entry, pinned by its fingerprint)."""
    return with_overrides(TorchRef(), name="grpo-scaled", advantage_grpo=_grpo_scaled(1.5))


def grpo_scaled_more_target():
    """The same target after a second bug in the same code: 2 times, not 1.5."""
    return with_overrides(TorchRef(), name="grpo-scaled", advantage_grpo=_grpo_scaled(2.0))

"""verl's legitimate parameters (the profile) per release line and trainer settings.

Where verl breaks the contract is data, not Python: each release's shipped baseline
(``baselines/verl-<version>.toml``, format ``rlconform.conformance.baseline``) declares every
break observed on it, scoped by check and feature.
"""

from __future__ import annotations

import dataclasses

from rlconform.adapters.base import Profile
from rlconform.adapters.verl.releases import DEFAULTS, RELEASES, Release, Settings

_PROFILE = Profile(
    name="verl",
    dtype="float32",
    grpo_std_ddof=1,
    grpo_eps=1e-6,
    grpo_singleton="mean0_std1",
    rloo_singleton="score",
    kl_ref_clamp=20.0,
    k3_value_clamp=10.0,
    reward_nonaction_tail="last_token",
    extra={
        # mask.loss: verl_F.masked_mean of an empty mask is 0 / (0 + 1e-8) = 0.
        "masked_mean_empty": 0.0,
        # batch.union / batch.row_ops: DataProto.union and DataProto.reorder work in place.
        "batch_union_in_place": True,
        "batch_reorder_in_place": True,
        # batch.row_ops: DataProto.chunk refuses uneven chunks unless auto-padding is on.
        "batch_chunk_uneven": "error",
        # kl.in_reward: actor/reward_kl_penalty is the mean over rows of each row's masked
        # mean (rows without action tokens count as 0).
        "kl_metric_reduction": "sample_mean",
        # adv.*: masked_var raises when the batch has <= 1 action token; a singleton group's
        # baseline is 0 (RF++ baseline, OPO, GPG); GPG's alpha = B / #(nonzero scores).
        "whiten_degenerate": "raise",
        "singleton_baseline": "zero",
        "gpg_alpha": "nonzero_score",
        # loss.*: the actor's loss_agg_mode default (ppo_trainer.yaml).
        "loss_agg_mode": "token-mean",
        # loss.gmpo: geo_mean clamps no log-ratio (its +-20 clamp is commented out).
        "gmpo_log_ratio_clamp": None,
        # adv.gae: compute_gae_advantage_return has no bootstrap value (0 after the last
        # token of every sample).
        "truncated_bootstrap": False,
        # metrics.validation_at_n: 1000 bootstrap draws, first-seen majority ties.
        "validation_n_bootstrap": 1000,
        "validation_maj_tie": "first_seen",
    },
)


def profile_for(release: Release, settings: Settings) -> Profile:
    """The profile of ``release`` under ``settings``.

    ``rloo_vectorized`` gives a group of one an advantage of 0 (``(c > 1)`` factor), where
    the loop ``rloo`` gives the raw score: a legitimate choice the contract leaves open.
    """
    extra = dict(_PROFILE.extra)
    fields = {}
    if settings.vectorized_estimators:
        fields["rloo_singleton"] = "zero"
    name = (
        release.profile_name
        if not settings.changed_ops(release)
        else (release.profile_name + "-alternates")
    )
    return dataclasses.replace(_PROFILE, name=name, extra=extra, **fields)


#: The newest line's default-trainer profile: what ``rlconform audit --profile verl`` applies
#: (read without importing verl).
PROFILE = profile_for(RELEASES[-1], DEFAULTS)

"""ROLL's profile (the legitimate choices it makes) and its observed deviation manifest.

Every entry of ``DEVIATIONS`` was observed in a certification run against the real source
(see docs/certification/roll-*.md). Genuine contract violations are NOT listed here: they
are findings, published with their counterexamples in the report.
"""

from __future__ import annotations

from rlconform.adapters.base import Profile

#: Width ROLL pads every batch to in these runs (``sequence_length``); seq-mean-token-sum-norm
#: divides by the per-token grid width ``sequence_length - 1``.
SEQUENCE_LENGTH = 64

PROFILE = Profile(
    name="roll",
    dtype="float32",  # compute_advantage and entropy_from_logits compute in float32
    grpo_std_ddof=1,  # reward_norm: torch.std (Bessel-corrected)
    grpo_eps=1e-6,  # reward_norm: (r - mean) / (std + 1e-6)
    kl_ref_clamp=None,  # compute_approx_kl: no clamp of (ref - logp)
    k3_value_clamp=10.0,  # compute_approx_kl "k3": value clamped to [-10, 10]
    reward_nonaction_tail="last_token",  # expand_to_token_level: last attended token
    extra={
        "reward_norm_std_ddof": 1,  # reward_norm "batch": Tensor.std() is unbiased
        "reward_norm_eps": 1e-6,
        "kl_metric_reduction": "sample_mean",  # critic/kl: mean over samples of masked means
        "agg_norm_length": SEQUENCE_LENGTH - 1,
        "roll_sequence_length": SEQUENCE_LENGTH,
        "roll_whiten_advantages": True,  # the config switch the contract's adv.gae needs
        "whiten_degenerate": "zeros",
        "singleton_baseline": "self",
        "batch_union_in_place": True,  # DataProto.union merges into self and returns it
        "batch_reorder_in_place": True,  # DataProto.reorder works in place
        # DataProto.chunk splits like np.array_split (always k pieces, sizes differing by
        # at most one): the contract's nearest policy is "ceil" (same on 5 rows / 2, not on
        # 4 rows / 3, where ROLL gives 2, 1, 1); see the certification report.
        "batch_chunk_uneven": "ceil",  # reward_norm group mean of a group of one is its own score
    },
)

DEVIATIONS: dict[str, str] = {
    "mask.response_from_eos": (
        "get_eos_mask takes one EOS token id; a set of EOS ids cannot be passed (every "
        "single-id case passes; ROLL's generated masks come from the pad token instead)"
    ),
    "metrics.reduce": (
        "reduce_metrics picks the reducer from an explicit '@tag' or '_tag' ending of the "
        "key (mean/max/min/p50/p99/std/sum), not from a substring anywhere in it: "
        "'response_length/max' is averaged by design of ROLL's metric naming"
    ),
}

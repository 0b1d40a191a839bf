"""ROLL's profile (the legitimate choices it makes) and its declared breaks.

The breaks observed on a ROLL release live in a baseline file per release
(``baselines/roll-<commit>.toml``, format ``conformance/baseline.py``), every entry scoped by
check and CONTRACT §0a feature; ``shipped_deviations`` loads the one of the supported release
into ``RollTarget.deviations``. Each entry is reproduced by hand on a minimal case in
``tests/roll/test_real.py`` (or, for the NaN-at-padding family, by its observed message).
"""

from __future__ import annotations

from pathlib import Path

from rlconform.adapters.base import Deviation, Profile

#: Width ROLL pads every batch to in these runs (``sequence_length``); seq-mean-token-sum-norm
#: divides by the per-token grid width ``sequence_length - 1``.
SEQUENCE_LENGTH = 64

PROFILE = Profile(
    name="roll",
    dtype="float32",  # compute_advantage and entropy_from_logits compute in float32
    grpo_std_ddof=1,  # reward_norm: torch.std (Bessel-corrected)
    grpo_eps=1e-6,  # reward_norm: (r - mean) / (std + 1e-6)
    # agentic_reward_norm: a group of one (or of std <= 1e-6) gets 0 (the rlvr pipeline's
    # reward_norm gives NaN there: a declared break, not a profile choice).
    grpo_singleton="zero",
    kl_ref_clamp=None,  # compute_approx_kl: no clamp of (ref - logp)
    k3_value_clamp=10.0,  # compute_approx_kl "k3": value clamped to [-10, 10]
    reward_nonaction_tail="last_token",  # expand_to_token_level: last attended token
    extra={
        "reward_norm_std_ddof": 1,  # reward_norm "batch": Tensor.std() is unbiased
        "reward_norm_eps": 1e-6,
        "kl_metric_reduction": "sample_mean",  # critic/kl: mean over samples of masked means
        "agg_norm_length": SEQUENCE_LENGTH - 1,
        "loss_agg_mode": "seq-mean-token-mean",  # PPOConfig.loss_agg_mode default
        "roll_sequence_length": SEQUENCE_LENGTH,
        "roll_whiten_advantages": True,  # the config switch the contract's adv.gae needs
        "whiten_degenerate": "zeros",
        # compute_gae_advantage_return / compute_reinforce_return: the value after the grid's
        # last column is 0, a length-truncated response is treated as terminated.
        "truncated_bootstrap": False,
        # The reward-to-go loops step over every grid column, mask-0 columns included.
        "discount_at_holes": True,
        "singleton_baseline": "self",
        "batch_union_in_place": True,  # DataProto.union merges into self and returns it
        "batch_reorder_in_place": True,  # DataProto.reorder works in place
        # DataProto.chunk splits like np.array_split (always k pieces, sizes differing by
        # at most one): the contract's nearest policy is "ceil" (same on 5 rows / 2, not on
        # 4 rows / 3, where ROLL gives 2, 1, 1: a declared break, batch.row_ops/chunk_uneven).
        "batch_chunk_uneven": "ceil",  # reward_norm group mean of a group of one is its own score
    },
)

BASELINE_DIR = Path(__file__).parent / "baselines"
#: The release the shipped baseline was observed on (alibaba/ROLL commit).
BASELINE_COMMIT = "8eb27cc2"


def shipped_deviations() -> dict[str, list[Deviation]]:
    """The declared breaks of the shipped baseline (none when the file is absent)."""
    from rlconform.conformance import baseline

    path = BASELINE_DIR / f"roll-{BASELINE_COMMIT}.toml"
    return baseline.load(path) if path.is_file() else {}

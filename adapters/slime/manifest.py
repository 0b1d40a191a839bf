"""slime's profile (legitimate parameters) and deviation manifest (clause -> rationale).

Profile values are slime's own choices at the pinned commit (see the research notes and
``docs/certification/slime-*.md``):

- ``dtype`` float32: slime's train-side tensors and ``compute_approx_kl``'s ``.float()``.
- GRPO (``_post_process_rewards``): ``torch.std`` (ddof 1), eps 1e-6; with
  ``n_samples_per_prompt == 1`` slime_validate_args turns std normalisation off, so a
  group of one gets score - mean = 0 (``grpo_singleton="zero"``).
- Reward normalisation has no batch-level function in slime; its group normaliser on a
  single group is ddof 1, eps 1e-6 (``reward_norm_std_ddof``, ``reward_norm_eps``).
- KL: no clamp of the log-ratio (``kl_ref_clamp=None``), ``low_var_kl`` clamped to +-10
  (``k3_value_clamp``), the unbiased-KL ratio is not clamped (``kl_is_log_ratio_clamp``).
- REINFORCE++ puts the reward on the last action token (``reward_nonaction_tail``).
- REINFORCE++-baseline: a group of one is its own mean (``singleton_baseline="self"``).
- Whitening of one action token gives 0 (``whiten_degenerate="zeros"``).
- Value loss: ``max((v_clip - R)^2, (v - R)^2)`` with no 0.5 factor (``value_loss_scale``).
- GSPO: the sequence log-ratio is not clamped (``gspo_log_ratio_max=None``).
- ``calculate_per_token_loss`` True (adapter key): metrics (entropy, pg_clipfrac,
  value_clipfrac) are reduced as with ``--calculate-per-token-loss``, i.e. token means,
  the contract's reduction. slime's default reducer instead averages per-sample means
  over the step's samples (the seq-mean-token-mean of ``agg.seq_mean_token_mean``); the
  published report records what that changes. The loss aggregation clauses (agg.*) name
  their mode explicitly and do not read this key.
"""

from __future__ import annotations

from pathlib import Path

from rlconform.adapters.base import Deviation, Profile

SLIME_PROFILE = Profile(
    name="slime",
    dtype="float32",
    grpo_std_ddof=1,
    grpo_eps=1e-6,
    grpo_singleton="zero",
    kl_ref_clamp=None,
    k3_value_clamp=10.0,
    reward_nonaction_tail="last_action",
    extra={
        "reward_norm_std_ddof": 1,
        "reward_norm_eps": 1e-6,
        "kl_is_log_ratio_clamp": None,
        "singleton_baseline": "self",
        "whiten_degenerate": "zeros",
        "value_loss_scale": 1.0,
        "gspo_log_ratio_max": None,
        "calculate_per_token_loss": True,
        "truncated_bootstrap": False,
        "discount_at_holes": True,
        "logprob_gap_reduction": "sample_mean",
        "is_sequence_log_ratio": "sum",
        "seqlen_workload": "calculate_fwd_flops(Qwen3-4B)",
    },
)

# The shipped baseline of the certified commit (conformance/baseline.py format): every
# break observed on it, scoped by check and feature, each reproduced by hand.
BASELINE = Path(__file__).parent / "baselines" / "slime-624b824.toml"


def deviations() -> dict[str, list[Deviation]]:
    """The baseline's entries per clause (validated; a bad entry is a SetupError)."""
    from rlconform.conformance.baseline import load

    return load(BASELINE)

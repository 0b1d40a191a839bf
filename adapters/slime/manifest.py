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
    },
)

# clause id -> one-line rationale; every entry was observed against the real source
# (a stale entry fails the clause, so this list cannot silently outlive a fix).
SLIME_DEVIATIONS: dict[str, str | Deviation] = {
    "adv.invariants": Deviation(
        (
            "slime writes advantages/returns on every response token, tool tokens included, "
            "and applies the loss mask once, in the reducer (x * loss_mask); values at mask-0 "
            "tokens are therefore nonzero by design"
        ),
        scope=("mask_holes",),
    ),
    "agg.seq_mean_token_mean": Deviation(
        (
            "slime's per-rollout mean divides by the step's rollout count (global_batch_size, "
            "fixed by configuration), so a sample with no action token (remove_sample, fully "
            "masked) still counts in the denominator: a deliberate constant denominator"
        ),
        scope=("no_action_sample",),
    ),
    "loss.gspo": (
        "slime implements sequence-level GSPO: ppo_kl is the sequence mean broadcast with "
        "its own gradient, so d/dlogp_t is shared across the sequence; it equals the "
        "contract's per-token (stop-gradient) gradient whenever advantages are constant "
        "within a sequence, which slime's gspo estimator produces (get_grpo_returns), and "
        "differs only with token-level advantages (e.g. --use-opd)"
    ),
    "loss.value_clip": (
        "value_clipfrac counts tokens whose value moved more than value_clip "
        "(|v - v_old| > c), not tokens where the clipped squared error is the larger; the "
        "per-token loss max((v_clip - R)^2, (v - R)^2) matches (profile value_loss_scale 1)"
    ),
    "offpolicy.tis": Deviation(
        (
            "vanilla_tis_function returns a weight for every response token, tool tokens "
            "included (the loss mask is applied once, by the reducer); on action tokens the "
            "weights clamp(exp(old - rollout), low, high) match"
        ),
        scope=("mask_holes",),
    ),
    "offpolicy.icepop": Deviation(
        (
            "icepop_function weights every response token, tool tokens included (the reducer "
            "applies the loss mask); on action tokens the weights match"
        ),
        scope=("mask_holes",),
    ),
    "offpolicy.opsm": Deviation(
        (
            "compute_opsm_mask returns 1 at tool tokens of kept sequences (the reducer applies "
            "the loss mask); on action tokens the sequence masking matches"
        ),
        scope=("mask_holes",),
    ),
}

# The purity clauses call every bound operation on one drawn batch; place_reward_last
# (REINFORCE++) raises on a sample without action tokens (the reward.place_last finding),
# which is not a purity question: outside such batches the purity clauses must pass.
_PURITY_SCOPE = Deviation(
    "get_reinforce_plus_plus_returns raises AssertionError on a sample without an action "
    "token (reported under reward.place_last); purity is certified on every other batch",
    scope=("no_action_sample",),
)
for _clause in ("purity.no_mutation", "purity.deterministic", "purity.order"):
    SLIME_DEVIATIONS[_clause] = _PURITY_SCOPE

# Genuine contract violations observed at the certified commit: clause -> what and a
# counterexample. They stay failures in the report (never declared as deviations).
SLIME_FINDINGS: dict[str, str] = {
    "mask.loss": (
        "the reducer multiplies by the mask (x * loss_mask), so a NaN/inf at a mask-0 "
        "token poisons the loss: masked mean of [2, 2, NaN, 2, 2] with mask [1,1,0,1,1] is NaN"
    ),
    "reward.place_last": (
        "get_reinforce_plus_plus_returns asserts every sample has an action token: L_i = 0 "
        "or a fully masked (remove_sample) response raises AssertionError instead of an "
        "all-zero row"
    ),
    "adv.reinforce_pp": (
        "(1) the discount is applied at every response position, tool tokens included "
        "(mask [1,0,1], gamma 0.5: G_0 = r_0 + 0.25 G_2, contract r_0 + 0.5 G_2); "
        "(2) distributed_masked_whiten computes var = E[x^2] - mean^2 in float32, which "
        "goes negative on near-equal values: five returns of 0.7 whiten to NaN; "
        "(3) a sample without action tokens raises AssertionError"
    ),
    "adv.grpo": (
        "_post_process_rewards normalises the whole batch as one group whenever the sample "
        "count is not n_samples_per_prompt x rollout_batch_size (partial or unequal "
        "groups): groups [2, 1] give the singleton 1.1547 instead of 0"
    ),
    "adv.reinforce_pp_baseline": (
        "same grouping fallback as adv.grpo: unequal group sizes subtract the batch mean, "
        "not the group mean"
    ),
    "adv.gae": (
        "get_advantages_and_returns_batch ignores the loss mask (tool tokens' rewards and "
        "values enter the recursion and are not skipped) and has no bootstrap for "
        "truncated samples (the value after the last token is always 0)"
    ),
    "loss.ppo_clip": (
        "compute_policy_loss has no clamp of the log-ratio: old -100, logp -0.5, A -2 gives "
        "ratio exp(99.5) = inf in float32 and a loss of inf (contract: clamp at 20, finite); "
        "the reported clipfrac also counts a phantom token per fully masked sample"
    ),
    "loss.dual_clip": (
        "same unclamped ratio: the dual-clip branch returns a finite loss but the gradient "
        "through exp(99.5) is NaN (old -100, logp -0.5, A -2, c 3)"
    ),
    "loss.cispo": (
        "per-token loss and gradient match; the clipfrac metric's per-token normaliser "
        "counts a fully masked sample as one token (see agg.token_mean)"
    ),
    "entropy.from_logits": (
        "per-token entropies match; the entropy metric's per-token normaliser counts a "
        "sample with no valid token as one token (see agg.token_mean), and slime's default "
        "reducer averages per-sample means over all samples instead"
    ),
    "kl.estimators": (
        "low_var_kl (the contract's k3) is exp(-r) - 1 + r in float32 then clamped to "
        "+-10: for ref - logp > 88 exp overflows to inf and the gradient through the clamp "
        "is 0 * inf = NaN (logp -100, ref -0.5: d/dlogp NaN, contract 0)"
    ),
    "kl.importance_weighted": (
        "--use-unbiased-kl multiplies exp(logp - old) by the float32 KL: logp -100, ref -1, "
        "old -0.5 gives exp(-99.5) * inf = inf, clamped to 10, where the product is "
        "exp(-0.5) = 0.607 (the overflow is in the KL factor; no log-ratio clamp)"
    ),
    "adv.invariants": (
        "outside the declared mask-hole deviation, GRPO is not group-local: adding a group "
        "of another size switches _post_process_rewards to one batch-wide group (Dr. GRPO, "
        "groups g0 = [masks [], [], [1] with reward 1] plus gx = two empty samples: 0.8, "
        "not 0.667)"
    ),
    "agg.seq_mean_token_mean": (
        "outside the declared denominator deviation, the reducer's x * loss_mask lets a "
        "NaN at a mask-0 token through: mask [1, 0, 1], losses [0, NaN, 0] give NaN, not 0"
    ),
    "agg.token_mean": (
        "--calculate-per-token-loss normalises by sum_i max(mask_i.sum(), 1): a fully "
        "masked sample adds a phantom token (losses [1,2,3 | 5,6 | masked]: 17/6, not 17/5)"
    ),
}

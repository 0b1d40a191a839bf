"""verl 0.9.1: its legitimate parameters (profile) and where it breaks the contract
(deviations, clause id -> one-line rationale and the case features it is limited to).

Every deviation must be observed in a run. A scoped one (``Deviation(..., scope=...)``, names
from ``rlconform.conformance.scopes``) must also pass on every case outside its scope; a plain
string covers the whole clause and is used only where no scope describes the cases that
break (said beside each).
"""

from __future__ import annotations

from rlconform.adapters.base import Deviation, Profile

PROFILE = Profile(
    name="verl-0.9.1",
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
        # metrics.validation_at_n: 1000 bootstrap draws, first-seen majority ties.
        "validation_n_bootstrap": 1000,
        "validation_maj_tie": "first_seen",
    },
)

_OUTCOME_SUM = (
    "scores are token_level_rewards.sum(-1) over every column, not over action tokens: NaN or "
    "garbage at padding and rewards sitting at mask holes enter the group statistics"
)
_OUTCOME_SCOPE = ("padding_garbage", "mask_holes")
_EMPTY_WIDTH_CRASH = (
    "the purity probes reach assemble_rm_scores, which indexes column L-1 = -1 of each row: "
    "when every response is empty and the response width is 0 it raises IndexError"
)

DEVIATIONS: dict[str, str | Deviation] = {
    "reward.place_last": Deviation(
        "assemble_rm_scores puts the score at index L-1 even when L = 0, i.e. at column -1 "
        "(the last padded column, response_mask 0), where outcome sums still read it",
        scope=("empty_response",),
    ),
    "mask.response_from_attention": Deviation(
        "compute_response_mask slices attention_mask[:, -R:] without checking the layout: a "
        "right-padded prompt or holed response is read as a response mask, and R = 0 returns "
        "the whole attention mask",
        scope=("layout_violation", "zero_width_response"),
    ),
    "layout.pack": Deviation(
        "remove-padding (attention_utils.unpad_input, used by left_right_2_no_padding) takes "
        "seqlens.max() over the batch, so packing a batch of no samples raises RuntimeError",
        scope=("empty_batch",),
    ),
    "layout.roundtrip": Deviation(
        "remove-padding (attention_utils.unpad_input) and build_attention_mask_from_nested take "
        "seqlens.max() over the batch, so unpadding or unpacking a batch of no samples raises "
        "RuntimeError",
        scope=("empty_batch",),
    ),
    "logprob.sampling_distribution": Deviation(
        "post_process_logits applies only the temperature (its top-k / top-p warpers are "
        "commented out), so the actor's log-probs are over the full vocabulary, not the "
        "truncated support the rollout sampled from; on a batch without a response token "
        "logprobs_from_logits (its torch fallback, logprobs_from_logits_v2) stacks an empty "
        "list and raises RuntimeError",
        scope=("sampling_truncation", "no_tokens"),
    ),
    "kl.in_reward": Deviation(
        "apply_kl_penalty masks the KL by multiplying (NaN * 0 = NaN), so NaN log-probs at "
        "padding give NaN token rewards, and an empty batch gives a NaN KL metric",
        scope=("padding_garbage", "empty_batch"),
    ),
    "adv.grpo": Deviation(_OUTCOME_SUM, scope=_OUTCOME_SCOPE),
    "adv.rloo": Deviation(_OUTCOME_SUM, scope=_OUTCOME_SCOPE),
    "adv.opo": Deviation(_OUTCOME_SUM, scope=_OUTCOME_SCOPE),
    "adv.gpg": Deviation(_OUTCOME_SUM, scope=_OUTCOME_SCOPE),
    "adv.grpo_passk": Deviation(_OUTCOME_SUM, scope=_OUTCOME_SCOPE),
    "adv.reinforce_pp_baseline": Deviation(_OUTCOME_SUM, scope=_OUTCOME_SCOPE),
    "adv.remax": Deviation(
        "returns are a reverse cumsum of rewards * mask, so NaN/inf at padding leaks "
        "(NaN * 0 = NaN) into every earlier action token",
        scope=("padding_garbage",),
    ),
    "adv.reinforce_pp": Deviation(
        "the discounted return multiplies by the mask instead of selecting, so NaN/inf at "
        "padding leaks into earlier action tokens",
        scope=("padding_garbage",),
    ),
    "adv.optimal_token_baseline": Deviation(
        "returns sum rewards * mask over every column and the per-position baselines mix "
        "rows by column, so NaN/inf at padding and rewards at mask holes reach the action "
        "tokens",
        scope=("padding_garbage", "mask_holes"),
    ),
    "adv.gae": Deviation(
        "the recursion multiplies by the mask, so NaN/inf rewards or values at padding poison "
        "the advantages; there is no bootstrap input, so a truncated sample's value after its "
        "last token is taken as 0",
        scope=("padding_garbage", "truncated_sample"),
    ),
    # Whole clause: GAE whitens without re-masking, so any padding or hole holds a nonzero
    # advantage whatever the padded inputs are; no case feature separates the cases that pass.
    "adv.invariants": (
        "outputs at mask-0 positions are not exactly 0: GAE whitens without re-masking and its "
        "returns equal the values at padding, and masked NaN inputs reach every estimator"
    ),
    "agg.token_mean": Deviation(
        "agg_loss divides by the batch's token count without a guard, so a mini-batch with no "
        "action token (all filtered) gives a NaN loss and NaN gradients instead of 0",
        scope=("empty_batch",),
    ),
    "agg.seq_mean_token_sum": Deviation(
        "the seq-mean modes multiply loss_mat * loss_mask instead of selecting, so NaN/inf at "
        "masked or padded positions leaks into the loss; no action token gives 0/0 = NaN",
        scope=("padding_garbage", "empty_batch"),
    ),
    "agg.seq_mean_token_mean": Deviation(
        "the seq-mean modes multiply loss_mat * loss_mask instead of selecting, so NaN/inf at "
        "masked or padded positions leaks into the loss; no action token gives 0/0 = NaN",
        scope=("padding_garbage", "empty_batch"),
    ),
    # Whole clause: every case also runs the local form (no loss_scale_factor), where verl's
    # "constant length" is the padded width, so no case lies outside the break.
    "agg.seq_mean_token_sum_norm": (
        "NaN/inf at masked positions leaks (loss_mat * loss_mask), and without "
        "loss_scale_factor the 'constant length' is the padded width, so extra right padding "
        "changes the loss"
    ),
    "agg.shard_invariance": Deviation(
        "the local seq-mean denominator counts sequences with an action token but the engine's "
        "global_batch_size (ppo_mini_batch_size * n) counts every sequence, so a fully masked "
        "row changes the loss once the batch is sharded; an empty shard or NaN padding gives "
        "a NaN shard loss",
        scope=("actionless_sample", "padding_garbage", "empty_shard"),
    ),
    "entropy.from_logits": Deviation(
        "compute_entropy_loss aggregates with agg_loss token-mean: no valid position gives "
        "0/0 = NaN instead of 0",
        scope=("empty_batch",),
    ),
    "loss.gspo": Deviation(
        "the sequence log-ratio sums (logp - old) * mask, so NaN/inf at padding reaches the "
        "loss of every action token of the row",
        scope=("padding_garbage",),
    ),
    "loss.cispo": Deviation(
        "NaN/inf log-probs at padding give NaN gradients there: the loss is computed on every "
        "column and only the aggregate selects (0 * NaN in the backward pass)",
        scope=("padding_garbage",),
    ),
    "loss.dppo_tv": Deviation(
        "NaN/inf log-probs at padding give NaN gradients there: the loss is computed on every "
        "column and only the aggregate selects (0 * NaN in the backward pass)",
        scope=("padding_garbage",),
    ),
    "loss.value_clip": Deviation(
        "NaN/inf values at padding give NaN gradients there: the clipped loss is computed on "
        "every column and only the aggregate selects (0 * NaN in the backward pass)",
        scope=("padding_garbage",),
    ),
    # Whole clause: the metric counts differently on every case with a log-ratio outside the
    # band on the unclipped side; that is a property of values, not of a case feature.
    "loss.gmpo": (
        "geo_mean's pg_clipfrac / pg_clipfrac_lower count a token as clipped whenever its "
        "log-ratio leaves [-low, high], also on the side where the sign-aware min keeps the "
        "unclipped value, so clipfrac overstates the share of clipped tokens"
    ),
    "offpolicy.tis": Deviation(
        "token IS weights are exp(log_ratio) * response_mask (NaN * 0 = NaN at padding); the "
        "trainer's entry point raises on a batch without action tokens; TIS has no lower "
        "truncation bound",
        scope=("padding_garbage", "empty_batch", "lower_ratio_bound"),
    ),
    # Whole clause (icepop, is_correction): the crash depends on the drawn ratios (every
    # action token rejected), not on a case feature.
    "offpolicy.icepop": (
        "compute_is_metrics divides by the mean squared kept weight, so a batch where IcePop "
        "rejects every action token raises ZeroDivisionError; a batch without action tokens "
        "raises ValueError"
    ),
    "offpolicy.is_correction": (
        "mask modes raise ZeroDivisionError when every action token is rejected (IS metrics), "
        "truncate modes leak NaN padding (exp(log_ratio) * mask) and have no lower bound, and "
        "a batch without action tokens raises ValueError"
    ),
    # Whole clause: a different quantity on every case.
    "offpolicy.logprob_gap": (
        "verl's rollout-vs-actor gap metric training/rollout_probs_diff_mean averages "
        "|exp(old) - exp(rollout)|, a probability gap, not |old - rollout|; with no action "
        "token it is NaN"
    ),
    "purity.no_mutation": Deviation(_EMPTY_WIDTH_CRASH, scope=("empty_response",)),
    "purity.deterministic": Deviation(_EMPTY_WIDTH_CRASH, scope=("empty_response",)),
    "purity.order": Deviation(_EMPTY_WIDTH_CRASH, scope=("empty_response",)),
    # Whole clause (batch.*): the batch cases carry no samples or masks for a scope to read;
    # the breaks are properties of the values (NaN in a shared key, a zero-width tensor, the
    # lengths KK is given).
    "batch.union": (
        "DataProto.union compares shared tensors with torch.equal (a NaN-holding key never "
        "equals itself) and adds the new tensor keys before checking non-tensor and meta "
        "conflicts, so a failed union leaves a half-merged first batch"
    ),
    "batch.row_ops": (
        "DataProto.repeat(interleave=False) crashes on a zero-width per-sample tensor "
        "(reshape(-1, 0) is ambiguous) instead of tiling its rows"
    ),
    "batch.seqlen_balance": (
        "get_seqlen_balanced_partitions (Karmarkar-Karp) can return parts with a larger "
        "maximum workload than the input order's contiguous parts (e.g. lengths [2,2,2,3,3] "
        "into 2 unequal parts), where the contract asks for no worse than the input order"
    ),
}

"""verl 0.9.1: its legitimate parameters (profile) and where it breaks the contract
(deviations, clause id -> one-line rationale). Every deviation must be observed in a run."""

from __future__ import annotations

from rlconform.adapters.base import Profile

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

DEVIATIONS: dict[str, str] = {
    "reward.place_last": (
        "assemble_rm_scores puts the score at index L-1 even when L = 0, i.e. at column -1 "
        "(the last padded column, response_mask 0), where outcome sums still read it"
    ),
    "mask.response_from_attention": (
        "compute_response_mask slices attention_mask[:, -R:] without checking the layout: a "
        "right-padded prompt or holed response is read as a response mask, and R = 0 returns "
        "the whole attention mask"
    ),
    "kl.in_reward": (
        "apply_kl_penalty masks the KL by multiplying (NaN * 0 = NaN), so NaN log-probs at "
        "padding give NaN token rewards, and an empty batch gives a NaN KL metric"
    ),
    "adv.grpo": (
        "scores are token_level_rewards.sum(-1) over every column, not over action tokens: "
        "NaN or garbage at padding and mask holes (and the column -1 reward of an L = 0 "
        "response) enters the group statistics"
    ),
    "adv.rloo": (
        "scores are token_level_rewards.sum(-1) over every column, not over action tokens: "
        "NaN or garbage at padding and mask holes (and the column -1 reward of an L = 0 "
        "response) enters the group statistics"
    ),
    "adv.opo": (
        "scores are token_level_rewards.sum(-1) over every column, not over action tokens: "
        "NaN or garbage at padding and mask holes (and the column -1 reward of an L = 0 "
        "response) enters the group statistics"
    ),
    "adv.gpg": (
        "scores are token_level_rewards.sum(-1) over every column, not over action tokens: "
        "NaN or garbage at padding and mask holes (and the column -1 reward of an L = 0 "
        "response) enters the group statistics"
    ),
    "adv.grpo_passk": (
        "scores are token_level_rewards.sum(-1) over every column, not over action tokens: "
        "NaN or garbage at padding and mask holes (and the column -1 reward of an L = 0 "
        "response) enters the group statistics"
    ),
    "adv.reinforce_pp_baseline": (
        "scores are token_level_rewards.sum(-1) over every column, not over action tokens: "
        "NaN or garbage at padding and mask holes (and the column -1 reward of an L = 0 "
        "response) enters the group statistics"
    ),
    "adv.remax": (
        "returns are a reverse cumsum of rewards * mask, so NaN/inf at padding or mask holes "
        "leaks (NaN * 0 = NaN) into every earlier action token"
    ),
    "adv.reinforce_pp": (
        "the discounted return multiplies by the mask instead of selecting, so NaN/inf at a "
        "mask hole or padding leaks into earlier action tokens"
    ),
    "adv.optimal_token_baseline": (
        "returns and baselines multiply by the mask instead of selecting, so NaN/inf at a "
        "mask hole or padding leaks into the action tokens"
    ),
    "adv.gae": (
        "the recursion multiplies by the mask, so NaN/inf rewards or values at holes and "
        "padding poison the advantages; an empty batch crashes; there is no bootstrap input "
        "for truncated samples"
    ),
    "adv.invariants": (
        "outputs at mask-0 positions are not exactly 0: GAE whitens without re-masking and its "
        "returns equal the values at padding, and masked NaN inputs reach every estimator"
    ),
    "agg.token_mean": (
        "agg_loss divides by the batch's token count without a guard, so a mini-batch with no "
        "action token (all filtered) gives a NaN loss and NaN gradients instead of 0"
    ),
    "agg.seq_mean_token_sum": (
        "the seq-mean modes multiply loss_mat * loss_mask instead of selecting, so NaN/inf at "
        "masked or padded positions leaks into the loss"
    ),
    "agg.seq_mean_token_mean": (
        "the seq-mean modes multiply loss_mat * loss_mask instead of selecting, so NaN/inf at "
        "masked or padded positions leaks into the loss"
    ),
    "agg.seq_mean_token_sum_norm": (
        "NaN/inf at masked positions leaks (loss_mat * loss_mask), and without "
        "loss_scale_factor the 'constant length' is the padded width, so extra right padding "
        "changes the loss"
    ),
    "agg.shard_invariance": (
        "the local seq-mean denominator counts sequences with an action token but the engine's "
        "global_batch_size (ppo_mini_batch_size * n) counts every sequence, so a fully masked "
        "row changes the loss once the batch is sharded"
    ),
    "entropy.from_logits": (
        "compute_entropy_loss aggregates with agg_loss token-mean: no valid position gives "
        "0/0 = NaN instead of 0"
    ),
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

"""What each operation of the ROLL adapter calls, and on which trainer path (for reports).

Paths: "rlvr pipeline" (``roll/pipeline/rlvr/rlvr_pipeline.py``, the driver's
postprocess), "agentic pipeline" (``roll/pipeline/agentic/agentic_pipeline.py``; the adapter
routes a case there when it has responses with mask holes or groups of different sizes),
"rlvr actor" / "agentic actor" / "critic" (the workers' ``loss_func`` inside
``strategy.train_step``), "fsdp2 strategy" (``FSDP2InferStrategy``, the default
``strategy_name``), "both pipelines" (a function both drivers call).
"""

from __future__ import annotations

from rlconform.adapters.roll.source import QUALNAMES

F = "roll.utils.functionals."
AGENTIC = "roll.pipeline.agentic.utils."
PROTO = "roll.distributed.scheduler.protocol.DataProto."
STRATEGY_COUNTS = [QUALNAMES["batch_num_tokens"], QUALNAMES["global_valid_samples"]]


def _b(path: str, *functions: str) -> dict[str, object]:
    return {"functions": list(functions), "path": path}


BINDINGS: dict[str, dict[str, object]] = {
    "response_mask_from_eos": _b("rollout postprocess", F + "get_eos_mask"),
    "valid_token_mask": _b("rlvr pipeline", F + "get_sample_level_mask"),
    "masked_mean": _b("both pipelines (metrics, seq-mean-token-mean rows)", F + "masked_mean"),
    "response_logprobs": _b(
        "fsdp2 strategy (actor and reference forward, cp_size 1)", QUALNAMES["fsdp2_log_probs"]
    ),
    "entropy_from_logits": _b("fsdp2 strategy (op_compute_entropy)", F + "entropy_from_logits"),
    "entropy_mean": _b(
        "rlvr / agentic pipeline metric critic/entropy/mean",
        QUALNAMES["fsdp2_entropy"],
        F + "agg_loss",
    ),
    "place_reward_last": _b("both pipelines (compute_token_reward)", F + "expand_to_token_level"),
    "normalize_rewards": _b("rlvr pipeline", F + "reward_postprocess", F + "reward_norm"),
    "kl_penalty": _b("rlvr actor (KL loss) and both pipelines", F + "compute_approx_kl"),
    "apply_kl_in_reward": _b(
        "both pipelines (add_token_level_kl)", F + "compute_token_reward", F + "compute_approx_kl"
    ),
    "kl_controller_update": _b("both pipelines", "roll.utils.kl_controller.get_kl_controller"),
    "advantage_gae": _b(
        "rlvr pipeline; agentic pipeline for responses with mask holes",
        F + "compute_advantage",
        AGENTIC + "agentic_compute_advantage",
        F + "compute_gae_advantage_return",
        F + "masked_whiten",
    ),
    "advantage_reinforce_pp": _b(
        "rlvr pipeline; agentic pipeline for responses with mask holes",
        F + "compute_advantage",
        AGENTIC + "agentic_compute_advantage",
        F + "compute_reinforce_return",
        F + "masked_whiten",
    ),
    "advantage_grpo": _b(
        "rlvr pipeline; agentic pipeline for mask holes or unequal groups",
        F + "reward_postprocess",
        F + "compute_token_reward",
        F + "compute_advantage",
        AGENTIC + "compute_response_level_rewards",
        AGENTIC + "agentic_reward_norm",
        AGENTIC + "agentic_compute_advantage",
    ),
    "advantage_reinforce_pp_baseline": _b(
        "rlvr pipeline; agentic pipeline for mask holes or unequal groups",
        F + "reward_postprocess",
        F + "compute_token_reward",
        F + "compute_advantage",
        AGENTIC + "compute_response_level_rewards",
        AGENTIC + "agentic_reward_norm",
        AGENTIC + "agentic_compute_advantage",
    ),
    "ppo_clip_loss": _b(
        "rlvr actor; agentic actor for responses with mask holes",
        QUALNAMES["rlvr_actor_loss"],
        QUALNAMES["agentic_actor_loss"],
    ),
    "policy_loss_reduced": _b(
        "rlvr actor; agentic actor for responses with mask holes (train_step counts)",
        QUALNAMES["rlvr_actor_loss"],
        QUALNAMES["agentic_actor_loss"],
        *STRATEGY_COUNTS,
    ),
    "value_loss": _b("critic", QUALNAMES["critic_loss"], QUALNAMES["critic_values"]),
    "tis_weights": _b(
        "rlvr / agentic actor", "roll.utils.train_infer_corrections.compute_train_infer_correction"
    ),
    "icepop_weights": _b(
        "rlvr / agentic actor", "roll.utils.train_infer_corrections.compute_train_infer_correction"
    ),
    "is_correction_weights": _b(
        "rlvr / agentic actor", "roll.utils.train_infer_corrections.compute_train_infer_correction"
    ),
    "agg_loss": _b("rlvr actor (train_step counts)", F + "agg_loss", *STRATEGY_COUNTS),
    "agg_batch_info": _b("rlvr actor (train_step counts)", *STRATEGY_COUNTS),
    "batch_make": _b("both pipelines", PROTO + "from_dict"),
    "batch_read": _b("both pipelines", PROTO + "batch"),
    "batch_union": _b("both pipelines", PROTO + "union"),
    "batch_chunk": _b("both pipelines", PROTO + "chunk"),
    "batch_split": _b("both pipelines", PROTO + "slice"),
    "batch_select": _b("both pipelines", PROTO + "select_idxs"),
    "batch_reorder": _b("both pipelines", PROTO + "reorder"),
    "batch_repeat": _b("both pipelines", PROTO + "repeat"),
    "batch_concat": _b("both pipelines", PROTO + "concat"),
    "batch_pad_to_divisor": _b(
        "both pipelines", "roll.distributed.scheduler.protocol.pad_dataproto_to_divisor"
    ),
    "batch_unpad": _b("both pipelines", "roll.distributed.scheduler.protocol.unpad_dataproto"),
    "seqlen_workload": _b("both pipelines (batch_balance)", QUALNAMES["balance_workload"]),
    "seqlen_partitions": _b("both pipelines (batch_balance)", F + "get_seqlen_balanced_partitions"),
    "reduce_metrics": _b("both pipelines", F + "reduce_metrics"),
    "train_step": _b(
        "rlvr pipeline (RLVRPipeline.run: get_sample_level_mask, reward_postprocess, "
        "compute_token_reward, compute_advantage, then the critic's and the actor's "
        "train_step; the fsdp2 strategy's micro-batch loop with loss_scale transcribed)",
        F + "get_sample_level_mask",
        F + "reward_postprocess",
        F + "compute_token_reward",
        F + "compute_advantage",
        "roll.utils.train_infer_corrections.apply_train_infer_correction_to_batch",
        "roll.utils.kl_controller.get_kl_controller",
        *STRATEGY_COUNTS,
        QUALNAMES["rlvr_actor_loss"],
        QUALNAMES["old_log_probs"],
        QUALNAMES["critic_loss"],
    ),
}

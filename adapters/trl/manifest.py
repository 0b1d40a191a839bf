"""TRL's profile (the legitimate choices GRPOTrainer makes), the function behind each
operation (for the report), and the shipped baselines (one TOML file per release,
``baselines/trl-<release>.toml``, format ``conformance/baseline.py``)."""

from __future__ import annotations

from pathlib import Path

from rlconform.adapters.base import Deviation, Profile

BASELINES = Path(__file__).parent / "baselines"

PROFILE = Profile(
    name="trl",
    dtype="float32",  # rewards_per_func, advantages and the IS ratio are float32 tensors
    grpo_std_ddof=1,  # trl.trainer.utils.nanstd is Bessel-corrected
    grpo_eps=1e-4,  # (r - mean) / (std + 1e-4), a constant of _generate_and_score_completions
    kl_ref_clamp=None,  # k3 = exp(ref - logp) - (ref - logp) - 1, no clamp of ref - logp
    k3_value_clamp=None,  # ... and none of the value
    extra={
        "kl_is_log_ratio_clamp": None,  # use_bias_correction_kl: k3 * exp(logp - old), unclamped
        "gspo_log_ratio_max": None,  # importance_sampling_level="sequence": exp(mean), unclamped
        "is_sequence_log_ratio": "sum",  # sequence_* modes: exp of the summed log-ratios
        "logprob_gap_reduction": "token_mean",  # mean |old - sampling| over loss-mask tokens
        "loss_agg_mode": "token-mean",  # loss_type dapo (TRL's default): num_items_in_batch
        "agg_norm_length": 512,  # dr_grpo divides by max_completion_length (default 512)
        "whiten_degenerate": "zeros",  # normalize_then_sum: one completion -> std 0 -> 0
    },
)

_SCORE = "trl.trainer.grpo_trainer.GRPOTrainer._generate_and_score_completions"
_LOSS = "trl.trainer.grpo_trainer.GRPOTrainer._compute_loss"
_SCORE_PATH = "GRPOTrainer._prepare_inputs -> _generate_and_score_completions"
_LOSS_PATH = "GRPOTrainer.compute_loss -> _compute_loss"

#: operation -> the TRL function(s) it runs and the trainer path that runs them
BINDINGS: dict[str, dict[str, object]] = {
    "advantage_grpo": {
        "functions": [_SCORE, "trl.trainer.utils.nanstd"],
        "path": f"{_SCORE_PATH} (multi_objective_aggregation='sum_then_normalize', "
        "scale_rewards='group' | 'none')",
    },
    "advantage_gdpo": {
        "functions": [_SCORE, "trl.trainer.utils.nanstd"],
        "path": f"{_SCORE_PATH} (multi_objective_aggregation='normalize_then_sum', reward_weights)",
    },
    "ppo_clip_loss": {
        "functions": [_LOSS],
        "path": f"{_LOSS_PATH} (loss_type='dapo', epsilon / epsilon_high, delta = dual clip; "
        "local per_token_loss, metric clip_ratio/region_mean)",
    },
    "gspo_loss": {
        "functions": [_LOSS],
        "path": f"{_LOSS_PATH} (importance_sampling_level='sequence', loss_type='dapo')",
    },
    "cispo_loss": {
        "functions": [_LOSS],
        "path": f"{_LOSS_PATH} (loss_type='cispo', epsilon_high = 1 + eps_high; metric cispo_clip_ratio)",
    },
    "sapo_loss": {
        "functions": [_LOSS],
        "path": f"{_LOSS_PATH} (loss_type='sapo', sapo_temperature_pos / sapo_temperature_neg; "
        "local per_token_loss)",
    },
    "policy_loss_reduced": {
        "functions": [_LOSS],
        "path": f"{_LOSS_PATH} (the returned scalar; loss_type dapo, num_items_in_batch, "
        "num_processes)",
    },
    "kl_penalty": {
        "functions": [_LOSS],
        "path": f"{_LOSS_PATH} (beta != 0, use_bias_correction_kl=False; local per_token_kl)",
    },
    "importance_weighted_kl": {
        "functions": [_LOSS],
        "path": f"{_LOSS_PATH} (beta != 0, use_bias_correction_kl=True; local per_token_kl)",
    },
    "agg_loss": {
        "functions": [_LOSS],
        "path": f"{_LOSS_PATH} (loss_type dapo | grpo | luspo | dr_grpo for token-mean | "
        "seq-mean-token-mean | seq-mean-token-sum | seq-mean-token-sum-norm)",
    },
    "agg_batch_info": {
        "functions": [_SCORE],
        "path": f"{_SCORE_PATH} (num_items_in_batch; per_device_train_batch_size)",
    },
    "is_correction_weights": {
        "functions": [_SCORE],
        "path": f"{_SCORE_PATH} (use_vllm, vllm_importance_sampling_correction, "
        "vllm_importance_sampling_mode)",
    },
    "tis_weights": {
        "functions": [_SCORE],
        "path": f"{_SCORE_PATH} (vllm_importance_sampling_mode='token_truncate')",
    },
    "icepop_weights": {
        "functions": [_SCORE],
        "path": f"{_SCORE_PATH} (vllm_importance_sampling_mode='token_mask')",
    },
    "logprob_gap": {
        "functions": [_SCORE],
        "path": f"{_SCORE_PATH} (metric sampling/sampling_logp_difference/mean)",
    },
    "opsm_mask": {
        "functions": ["trl.trainer.grpo_trainer.GRPOTrainer.get_off_policy_mask"],
        "path": f"{_LOSS_PATH} (off_policy_mask_threshold)",
    },
}


def baseline_path(release: str) -> Path:
    return BASELINES / f"trl-{release}.toml"


def deviations_for(release: str) -> dict[str, list[Deviation]]:
    """The shipped baseline of ``release`` ({} when none is shipped)."""
    from rlconform.conformance import baseline

    path = baseline_path(release)
    return baseline.load(path) if path.exists() else {}

"""Unsloth's profile, the function behind each operation (for the report) and the shipped
baselines (one TOML file per unsloth-zoo release, ``baselines/unsloth-zoo-<release>.toml``,
format ``conformance/baseline.py``)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from rlconform.adapters.base import Deviation
from rlconform.adapters.trl.manifest import PROFILE as TRL_PROFILE

BASELINES = Path(__file__).parent / "baselines"

# TRL's choices (the scoring path and the loss types are TRL's), but Unsloth's KL term:
# k3 of clamp(ref - logp, +-20), the value clamped to +-10 (grpo_compute_loss; TRL clamps
# neither); with use_bias_correction_kl the weight exp(logp - old) is unclamped.
PROFILE = dataclasses.replace(
    TRL_PROFILE,
    name="unsloth",
    kl_ref_clamp=20.0,
    k3_value_clamp=10.0,
    extra={**TRL_PROFILE.extra, "kl_is_log_ratio_clamp": None},
)

_ACC = "unsloth_zoo.rl_replacements.grpo_accumulated_loss"
_EFF = "unsloth_zoo.rl_replacements.UnslothEfficientGRPO"
_MATH = "unsloth_zoo.rl_replacements.grpo_compute_loss"
_SCORE = "trl.trainer.grpo_trainer.GRPOTrainer._generate_and_score_completions"
_PATH = "UnslothGRPOTrainer.compute_loss -> grpo_accumulated_loss"
_AGAIN = (
    "; grpo_compute_loss called again on the inputs grpo_accumulated_loss hands "
    "UnslothEfficientGRPO, its locals read back"
)

#: operation -> the functions it runs and the trainer path that runs them
BINDINGS: dict[str, dict[str, object]] = {
    "ppo_clip_loss": {
        "functions": [_ACC, _MATH],
        "path": f"{_PATH} (loss_type='dapo', epsilon / epsilon_high, delta = dual clip"
        f"{_AGAIN}: loss_i; clipfrac not computed by the loss)",
    },
    "gspo_loss": {
        "functions": [_ACC, _MATH],
        "path": f"{_PATH} (importance_sampling_level='sequence', loss_type='dapo'{_AGAIN})",
    },
    "cispo_loss": {
        "functions": [_ACC, _MATH],
        "path": f"{_PATH} (loss_type='cispo', epsilon_high = 1 + eps_high{_AGAIN})",
    },
    "sapo_loss": {
        "functions": [_ACC, _MATH],
        "path": f"{_PATH} (loss_type='sapo', sapo_temperature_pos / sapo_temperature_neg{_AGAIN})",
    },
    "policy_loss_reduced": {
        "functions": [_ACC, _EFF, _MATH],
        "path": f"{_PATH} -> UnslothEfficientGRPO (log-probs from hidden states in Unsloth's "
        "chunked log-softmax; the returned scalar and its precomputed gradient; loss_type of "
        "the profile's loss_agg_mode, num_items_in_batch)",
    },
    "kl_penalty": {
        "functions": [_ACC, _MATH],
        "path": f"{_PATH} (beta != 0, use_bias_correction_kl=False{_AGAIN}: kl_i)",
    },
    "importance_weighted_kl": {
        "functions": [_ACC, _MATH],
        "path": f"{_PATH} (beta != 0, use_bias_correction_kl=True{_AGAIN}: kl_i)",
    },
    **{
        op: {
            "functions": [_ACC, _EFF, _MATH],
            "path": f"{_PATH} (use_vllm, vllm_importance_sampling_correction, "
            f"vllm_importance_sampling_mode={mode}, clip_min / clip_max from trainer.args; "
            "sampling_per_token_logps; the flat_is_ratio it returns: the weight "
            "grpo_compute_loss multiplies loss_i by)",
        }
        for op, mode in (
            ("is_correction_weights", "the case's"),
            ("tis_weights", "'token_truncate'"),
            ("icepop_weights", "'token_mask'"),
        )
    },
    "opsm_mask": {
        "functions": [_ACC, _MATH, "trl.trainer.grpo_trainer.GRPOTrainer.get_off_policy_mask"],
        "path": f"{_PATH} (off_policy_mask_threshold; the old log-probs as the mismatch "
        f"log-probs{_AGAIN}: off_policy_mask)",
    },
    "agg_loss": {
        "functions": [_ACC, _MATH],
        "path": f"{_PATH} (loss_type dapo | grpo | bnpo | luspo | dr_grpo: its keywords); "
        "grpo_compute_loss at ratio 1 with advantages -loss_mat (per token)",
    },
    "train_step": {
        "functions": [
            "unsloth.models.rl_replacements.grpo_trainer_compute_loss (its compute_loss, "
            "built from source)",
            _ACC,
            _SCORE,
            "trl.trainer.utils.split_tensor_dict",
        ],
        "path": "GRPOTrainer._prepare_inputs (TRL's scoring, shuffle, split into "
        "steps_per_generation micro-batches) -> per micro-batch UnslothGRPOTrainer.compute_loss "
        "-> grpo_accumulated_loss, backward; configs as UnslothGRPOConfig resolves them",
    },
    "agg_batch_info": {
        "functions": [_SCORE],
        "path": "GRPOTrainer._prepare_inputs -> _generate_and_score_completions "
        "(num_items_in_batch; TRL's scoring path, which Unsloth's trainer keeps)",
    },
}


def baseline_path(release: str) -> Path:
    return BASELINES / f"unsloth-zoo-{release}.toml"


def deviations_for(release: str) -> dict[str, list[Deviation]]:
    """The shipped baseline of ``release`` ({} when none is shipped)."""
    from rlconform.conformance import baseline

    path = baseline_path(release)
    return baseline.load(path) if path.exists() else {}

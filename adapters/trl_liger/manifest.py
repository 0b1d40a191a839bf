"""The Liger branch's profile, the function behind each operation (for the report) and
the shipped baselines (one TOML file per TRL release, ``baselines/trl-liger-<release>.toml``,
format ``conformance/baseline.py``)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from rlconform.adapters.base import Deviation
from rlconform.adapters.trl.manifest import PROFILE as TRL_PROFILE

BASELINES = Path(__file__).parent / "baselines"

# The choices are TRL's (the scoring path and the loss types are the same); the fused
# loss computes its log-probs in float32 whatever the hidden states' dtype.
PROFILE = dataclasses.replace(TRL_PROFILE, name="trl-liger")

_BRANCH = "trl.trainer.grpo_trainer.GRPOTrainer.compute_liger_loss"
_FUSED = "liger_kernel.chunked_loss.LigerFusedLinearGRPOLoss"
_CHUNK = (
    "liger_kernel.chunked_loss.fused_linear_ppo.LigerFusedLinearPPOBase._compute_loss_from_logps"
)
_PPO = "liger_kernel.chunked_loss.grpo_loss.LigerFusedLinearGRPOFunction.ppo_loss_fn"
_SCORE = "trl.trainer.grpo_trainer.GRPOTrainer._generate_and_score_completions"
_PATH = "GRPOTrainer.compute_loss (use_liger_kernel=True) -> compute_liger_loss -> liger_loss"
_ONE_CHUNK = "; the per-chunk math on the micro-batch as one chunk, locals of ppo_loss_fn read back"

#: operation -> the functions it runs and the trainer path that runs them
BINDINGS: dict[str, dict[str, object]] = {
    "ppo_clip_loss": {
        "functions": [_BRANCH, _CHUNK, _PPO],
        "path": f"{_PATH} (loss_type='dapo', epsilon / epsilon_high, delta = dual clip"
        f"{_ONE_CHUNK}: per_token_loss; metric clip_ratio)",
    },
    "gspo_loss": {
        "functions": [_BRANCH, _CHUNK, _PPO],
        "path": f"{_PATH} (importance_sampling_level='sequence', loss_type='dapo'{_ONE_CHUNK})",
    },
    "cispo_loss": {
        "functions": [_BRANCH, _CHUNK, _PPO],
        "path": f"{_PATH} (loss_type='cispo', epsilon_high = 1 + eps_high{_ONE_CHUNK})",
    },
    "sapo_loss": {
        "functions": [_BRANCH, _CHUNK, _PPO],
        "path": f"{_PATH} (loss_type='sapo', sapo_temperature_pos / sapo_temperature_neg{_ONE_CHUNK})",
    },
    "policy_loss_reduced": {
        "functions": [_BRANCH, _FUSED],
        "path": f"{_PATH} (the fused loss on hidden states, compiled=False; the returned "
        "scalar; loss_type of the profile's loss_agg_mode, num_items_in_batch)",
    },
    "kl_penalty": {
        "functions": [_BRANCH, _CHUNK, _PPO],
        "path": f"{_PATH} (beta != 0, use_bias_correction_kl=False{_ONE_CHUNK}: kl_div)",
    },
    "importance_weighted_kl": {
        "functions": [_BRANCH, _CHUNK, _PPO],
        "path": f"{_PATH} (beta != 0, use_bias_correction_kl=True{_ONE_CHUNK}: kl_div)",
    },
    "agg_loss": {
        "functions": [_BRANCH, _CHUNK, _PPO],
        "path": f"{_PATH} (loss_type dapo | grpo | luspo | dr_grpo; the loss matrix as the "
        f"vLLM IS ratio{_ONE_CHUNK})",
    },
    "agg_batch_info": {
        "functions": [_SCORE],
        "path": "GRPOTrainer._prepare_inputs -> _generate_and_score_completions "
        "(num_items_in_batch; per_device_train_batch_size)",
    },
    "train_step": {
        "functions": [_SCORE, _BRANCH, _FUSED],
        "path": "GRPOTrainer._prepare_inputs -> split_tensor_dict -> Trainer.training_step "
        f"per micro-batch: {_PATH} (the fused loss, compiled=False), backward",
    },
}


def baseline_path(release: str) -> Path:
    return BASELINES / f"trl-liger-{release}.toml"


def deviations_for(release: str) -> dict[str, list[Deviation]]:
    """The shipped baseline of ``release`` ({} when none is shipped)."""
    from rlconform.conformance import baseline

    path = baseline_path(release)
    return baseline.load(path) if path.exists() else {}

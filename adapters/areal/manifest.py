"""AReaL's legitimate parameters (profile), what each operation calls on which trainer path
(bindings), and the declared breaks of each release (``baselines/*.toml``)."""

from __future__ import annotations

from pathlib import Path

from rlconform.adapters.base import Deviation, Profile

BASELINES = Path(__file__).parent / "baselines"

PROFILE = Profile(
    name="areal",
    dtype="float32",
    # Normalization(std_level="group", std_unbiased=True): torch-style unbiased std.
    grpo_std_ddof=1,
    grpo_eps=1e-5,  # NormConfig.eps's default (the clause passes its epsilon through)
    # a group of one: its mean is its own reward (no leave-one-out) and its std 1, so the
    # advantage is 0
    grpo_singleton="zero",
    # KLEstimator: no log-ratio clamp; the estimator's value is clamped to [-10, 10]
    kl_ref_clamp=None,
    k3_value_clamp=10.0,
    extra={
        # adv.gae (adv_norm = NormConfig()): Normalization divides by std + eps (eps 1e-5)
        "whiten_std_eps": 1e-5,
        # adv.gae: the GAE loop bootstraps from values[:, W - 1] (truncated_bootstrap True)
        # loss.value_clip: _mse_loss is 0.5 * (v - R)^2
        "value_loss_scale": 0.5,
        # loss.gspo: the sequence log-ratio is not clamped
        "gspo_log_ratio_max": None,
        # offpolicy.is_correction: RejectionSamplingConfig's sequence level with the ratio
        # metric aggregates in log space with agg "mean" (its default): the geometric mean
        "is_sequence_log_ratio": "mean",
    },
)

_ACTOR = "areal.trainer.ppo.actor"
_UPDATE = "PPOActor._ppo_update -> engine.train_batch(loss_fn=grpo_loss_fn)"

BINDINGS: dict[str, dict[str, object]] = {
    "kl_penalty": {
        "functions": ["areal.utils.data.KLEstimator"],
        "path": "PPOActor._compute_advantages: rewards = -kl_ctl * KLEstimator(old, ref)",
    },
    "advantage_grpo": {
        "functions": [
            f"{_ACTOR}.PPOActor._compute_advantages",
            "areal.utils.data.Normalization",
        ],
        "path": "PPOActor.compute_advantages (reward_norm group mean/std; GAE with "
        "discount = gae_lambda = 1, no critic)",
    },
    "advantage_gae": {
        "functions": [
            f"{_ACTOR}.PPOActor._compute_advantages",
            "areal.utils.data.Normalization",
        ],
        "path": "PPOActor.compute_advantages with the critic's values (PPOCritic."
        "compute_values), discount, gae_lambda, adv_norm NormConfig() (batch whitening)",
    },
    "ppo_clip_loss": {
        "functions": [
            f"{_ACTOR}.grpo_loss_fn",
            "areal.utils.functional.functional.ppo_actor_loss_fn",
        ],
        "path": f"{_UPDATE}, importance_sampling_level token (c_clip: dual clip)",
    },
    "gspo_loss": {
        "functions": [
            f"{_ACTOR}.grpo_loss_fn",
            "areal.utils.functional.functional.ppo_actor_loss_fn",
        ],
        "path": f"{_UPDATE}, importance_sampling_level sequence",
    },
    "sapo_loss": {
        "functions": [
            f"{_ACTOR}.grpo_loss_fn",
            "areal.utils.functional.functional.sapo_loss_fn",
        ],
        "path": f"{_UPDATE}, use_sapo_loss=True, importance_sampling_level token",
    },
    **{
        op: {
            "functions": [
                f"{_ACTOR}.grpo_loss_fn",
                "areal.utils.functional.functional.ppo_actor_loss_fn",
                "areal.utils.functional.functional.apply_rejection_sampling",
            ],
            "path": f"{_UPDATE}, use_decoupled_loss=True, rejection_sampling="
            f"RejectionSamplingConfig({config}) (the loss's behave_imp_weight)",
        }
        for op, config in (
            ("tis_weights", "level='token', action='clamp'"),
            ("icepop_weights", "level='token', action='mask'"),
            ("is_correction_weights", "level=token|sequence, action=clamp|mask, agg='mean'"),
        )
    },
    "value_loss": {
        "functions": [
            "areal.trainer.ppo.critic.ppo_loss_fn",
            "areal.utils.functional.functional.ppo_critic_loss_fn",
        ],
        "path": "PPOCritic.ppo_update -> engine.train_batch(loss_fn=ppo_loss_fn)",
    },
    "train_step": {
        "functions": [
            "areal.trainer.ppo.actor.PPOActor.compute_advantages",
            "areal.trainer.ppo.actor.PPOActor.ppo_update",
            "areal.engine.fsdp_engine.FSDPEngine.train_batch",
            "areal.trainer.ppo.critic.PPOCritic.compute_values",
            "areal.trainer.ppo.critic.PPOCritic.ppo_update",
        ],
        "path": "PPOTrainer.train (rl_trainer.py): critic.compute_values (a config with a "
        "critic) -> actor.compute_advantages -> actor.ppo_update (engine.train_batch, "
        "grpo_loss_fn) -> critic.ppo_update (engine.train_batch, ppo_loss_fn); "
        "ppo_n_minibatches 1, mb_spec n_mbs the step's micro-batches",
    },
}


def baseline_path(version: str) -> Path:
    return BASELINES / f"areal-{version}.toml"


def load_deviations(version: str) -> dict[str, list[Deviation]]:
    """The shipped baseline of ``version`` (no file: nothing declared)."""
    from rlconform.conformance.baseline import load

    path = baseline_path(version)
    return load(path) if path.is_file() else {}

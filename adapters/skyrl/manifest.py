"""SkyRL's legitimate parameters (profile), what each operation calls on which trainer path
(bindings), and the declared breaks of each release (``baselines/*.toml``)."""

from __future__ import annotations

from pathlib import Path

from rlconform.adapters.base import Deviation, Profile

BASELINES = Path(__file__).parent / "baselines"

PROFILE = Profile(
    name="skyrl",
    dtype="float32",
    # compute_grpo_outcome_advantage: torch.std (unbiased), eps 1e-6 (the trainer passes
    # none: the function's default); a group of one gets mean 0 and std 1.
    grpo_std_ddof=1,
    grpo_eps=1e-6,
    grpo_singleton="mean0_std1",
    # compute_rloo_outcome_advantage: a group of one gets advantage 0.
    rloo_singleton="zero",
    # compute_approx_kl: k3's log-ratio clamped to +-20, its value to +-10.
    kl_ref_clamp=20.0,
    k3_value_clamp=10.0,
    extra={
        # kl.in_reward: avg_kl is the mean over samples of each sample's masked mean
        # (a sample without loss tokens counts 0: masked_mean clamps its count at 1).
        "kl_metric_reduction": "sample_mean",
        # loss.value_clip: ppo_critic_loss halves the reduced loss (0.5 * its mean), not the
        # per-token term the clause compares.
        "value_loss_scale": 1.0,
        # loss.gspo: log s_i,t = logp - sg(logp) + sg(sequence mean log-ratio) is clamped
        # above at 10, i.e. the sequence log-ratio's value (its gradient 0 where it binds).
        "gspo_log_ratio_max": 10.0,
        # adv.gae / adv.reinforce_pp: the loops step over every response column; a tool
        # token (response_mask 1, loss_mask 0) is a discount step like any other.
        "discount_at_holes": True,
        # adv.gae: the next value after a response's last token is 0 (no bootstrap).
        "truncated_bootstrap": False,
        # adv.*: masked_whiten raises on a batch with at most one response token.
        "whiten_degenerate": "raise",
    },
)

_TRAINER = "skyrl.train.trainer.RayPPOTrainer"
_UTILS = "skyrl.backends.skyrl_train.utils.ppo_utils"
_ADV_PATH = "RayPPOTrainer.train step 6: compute_advantages_and_returns"
_POLICY_PATH = "PolicyWorkerBase._forward_backward_micro: PolicyLossRegistry.get(policy_loss_type)"


def _estimator(name: str, function: str) -> dict[str, object]:
    return {
        "functions": [
            f"{_TRAINER}.compute_advantages_and_returns",
            f"{_UTILS}.compute_advantages_and_returns",
            f"{_UTILS}.{function}",
        ],
        "path": f"{_ADV_PATH} (advantage_estimator={name})",
    }


def _policy(name: str, function: str) -> dict[str, object]:
    return {
        "functions": [f"{_UTILS}.{function}", f"{_UTILS}.reduce_loss"],
        "path": f"{_POLICY_PATH} (policy_loss_type={name})",
    }


BINDINGS: dict[str, dict[str, object]] = {
    "kl_penalty": {
        "functions": [f"{_UTILS}.compute_approx_kl"],
        "path": "PolicyWorkerBase._forward_backward_micro (use_kl_loss); "
        "RayPPOTrainer.apply_reward_kl_penalty (use_kl_in_reward)",
    },
    "apply_kl_in_reward": {
        "functions": [f"{_TRAINER}.apply_reward_kl_penalty", f"{_UTILS}.compute_approx_kl"],
        "path": "RayPPOTrainer.train step 5 (use_kl_in_reward, fixed controller)",
    },
    "kl_controller_update": {
        "functions": [
            f"{_UTILS}.get_kl_controller",
            f"{_UTILS}.AdaptiveKLController",
            f"{_UTILS}.FixedKLController",
        ],
        "path": "RayPPOTrainer.apply_reward_kl_penalty: reward_kl_controller.update",
    },
    "advantage_grpo": _estimator("grpo", "compute_grpo_outcome_advantage"),
    "advantage_rloo": _estimator("rloo", "compute_rloo_outcome_advantage"),
    "advantage_reinforce_pp": _estimator(
        "reinforce++", "compute_reinforce_plus_plus_outcome_advantage"
    ),
    "advantage_gae": _estimator("gae", "compute_gae_advantage_return"),
    "ppo_clip_loss": _policy("regular / dual_clip", "ppo_policy_loss"),
    "gspo_loss": _policy("gspo", "gspo_policy_loss"),
    "cispo_loss": _policy("cispo", "compute_policy_loss_cispo"),
    "sapo_loss": _policy("sapo", "sapo_policy_loss"),
    "agg_loss": {
        "functions": [
            f"{_TRAINER}._normalize_advantages",
            f"{_UTILS}.apply_loss_reduction_to_advantages_minibatch",
            f"{_UTILS}.ppo_policy_loss",
            f"{_UTILS}.reduce_loss",
        ],
        "path": "RayPPOTrainer.train_critic_and_policy: _normalize_advantages per mini-batch; "
        f"{_POLICY_PATH}: policy_loss * dp_size",
    },
    "train_step": {
        "functions": [
            f"{_TRAINER}.postprocess_generator_output",
            f"{_TRAINER}.convert_to_training_input",
            f"{_TRAINER}.fwd_logprobs_values_reward",
            f"{_TRAINER}.apply_reward_kl_penalty",
            f"{_TRAINER}.compute_advantages_and_returns",
            f"{_TRAINER}.train_critic_and_policy",
            "skyrl.backends.skyrl_train.distributed.dispatch.MeshDispatch.stage_chunks",
            "skyrl.backends.skyrl_train.workers.worker.PolicyWorkerBase.forward_backward",
            "skyrl.backends.skyrl_train.workers.worker.CriticWorkerBase.forward_backward",
            "skyrl.backends.skyrl_train.workers.worker.CriticWorkerBase.optim_step",
        ],
        "path": "RayPPOTrainer.train steps 1.2-7 on one rollout batch (one mini-batch, dp "
        "size 1); the worker's micro-batches, policy loss, KL and entropy terms and backward; "
        "with a critic (ppo_critic) the critic worker's micro-batches, ppo_critic_loss, "
        "backward and optim_step's 1 / micro-batches first; the model forward, Ray and the "
        "optimizer stood in",
    },
    "value_loss": {
        "functions": [f"{_UTILS}.ppo_critic_loss"],
        "path": "CriticWorkerBase._forward_backward_micro: ppo_critic_loss",
    },
}


def baseline_path(version: str) -> Path:
    return BASELINES / f"skyrl-{version}.toml"


def load_deviations(version: str) -> dict[str, list[Deviation]]:
    """The shipped baseline of ``version`` (no file: nothing declared)."""
    from rlconform.conformance.baseline import load

    path = baseline_path(version)
    return load(path) if path.is_file() else {}

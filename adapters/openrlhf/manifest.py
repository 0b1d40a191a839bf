"""OpenRLHF's legitimate parameters (profile), what each operation calls on which trainer
path (bindings), and the declared breaks of each release (``baselines/*.toml``)."""

from __future__ import annotations

from pathlib import Path

from rlconform.adapters.base import Deviation, Profile

BASELINES = Path(__file__).parent / "baselines"

PROFILE = Profile(
    name="openrlhf",
    dtype="float32",
    # group_norm: (r - mean) / (rewards.std() + 1e-9), torch's unbiased std.
    grpo_std_ddof=1,
    grpo_eps=1e-9,
    # compute_approx_kl: k3 uses the log-ratio clamped at -10 (0.11.2) and every estimator's
    # value is clamped to [-10, 10]; a ref - logp clamp of 20 and none give the same k3 once
    # its value is clamped at 10.
    kl_ref_clamp=20.0,
    k3_value_clamp=10.0,
    # compute_reward: the reward goes on the last token whose action_mask is 1.
    reward_nonaction_tail="last_action",
    extra={
        # kl.in_reward: info["kl"] is a per-sample masked mean, averaged over samples.
        "kl_metric_reduction": "sample_mean",
        # kl.importance_weighted: the weight exp(logp - old) is clamped above at 10
        # (KL_IS_WEIGHT_CLIP), not its log-ratio; no log-ratio clamp.
        "kl_is_log_ratio_clamp": None,
        # loss.gspo: the sequence log-ratio is not clamped.
        "gspo_log_ratio_max": None,
        # loss.value_clip: 0.5 * max((v_clip - R)^2, (v - R)^2).
        "value_loss_scale": 0.5,
        # offpolicy.is_correction: the sequence statistic is the mean log-ratio (geometric).
        "is_sequence_log_ratio": "mean",
        # adv.*: a batch with at most one action token whitens to 0 (var clamped at 1e-8).
        "whiten_degenerate": "zeros",
        # adv.gae / adv.reinforce_pp: the backward loops step over every position (rewards
        # and values masked to 0 at mask-0 tokens), so a hole is a discount step.
        "discount_at_holes": True,
        # adv.gae: get_advantages_and_returns ends every sample with next value 0: a
        # length-truncated response is treated as terminated.
        "truncated_bootstrap": False,
    },
)

_MAKER = "openrlhf.trainer.ppo_utils.experience_maker.RemoteExperienceMaker"
_ADV_PATH = "PPOTrainer step: RemoteExperienceMaker.compute_advantages_and_returns"
_POLICY_PATH = "PPOActor.training_step: actor_loss_fn (PolicyLoss.forward)"

BINDINGS: dict[str, dict[str, object]] = {
    "kl_penalty": {
        "functions": ["openrlhf.models.utils.compute_approx_kl"],
        "path": "make_experience (reward KL); PPOActor.training_step (KL loss, unbiased_gradient)",
    },
    "importance_weighted_kl": {
        "functions": ["openrlhf.models.utils.compute_approx_kl"],
        "path": "PPOActor.training_step: KL loss with --algo.kl.unbiased_gradient",
    },
    "apply_kl_in_reward": {
        "functions": [
            "openrlhf.models.utils.compute_approx_kl",
            "openrlhf.models.utils.compute_reward",
            "openrlhf.models.utils.masked_mean",
        ],
        "path": "make_experience (kl, info['kl']) -> compute_advantages_and_returns",
    },
    "place_reward_last": {
        "functions": ["openrlhf.models.utils.compute_reward"],
        "path": _ADV_PATH,
    },
    "kl_controller_update": {
        "functions": [
            "openrlhf.trainer.ppo_utils.kl_controller.AdaptiveKLController",
            "openrlhf.trainer.ppo_utils.kl_controller.FixedKLController",
        ],
        "path": "PPOTrainer: kl_ctl.update after each step",
    },
    "advantage_gae": {
        "functions": [
            f"{_MAKER}.compute_advantages_and_returns",
            f"{_MAKER}.get_advantages_and_returns",
        ],
        "path": f"{_ADV_PATH} (estimator gae)",
    },
    "advantage_reinforce_pp": {
        "functions": [
            f"{_MAKER}.compute_advantages_and_returns",
            f"{_MAKER}.get_cumulative_returns",
        ],
        "path": f"{_ADV_PATH} (estimator reinforce)",
    },
    "advantage_reinforce_pp_baseline": {
        "functions": [
            f"{_MAKER}.compute_advantages_and_returns",
            f"{_MAKER}.get_cumulative_returns",
        ],
        "path": f"{_ADV_PATH} (estimator reinforce_baseline)",
    },
    "advantage_grpo": {
        "functions": [
            f"{_MAKER}.compute_advantages_and_returns",
            f"{_MAKER}.get_cumulative_returns",
        ],
        "path": f"{_ADV_PATH} (estimator group_norm; dr_grpo without std)",
    },
    "advantage_rloo": {
        "functions": [
            f"{_MAKER}.compute_advantages_and_returns",
            f"{_MAKER}.get_cumulative_returns",
        ],
        "path": f"{_ADV_PATH} (estimator rloo)",
    },
    "ppo_clip_loss": {
        "functions": ["openrlhf.models.loss.PolicyLoss"],
        "path": f"{_POLICY_PATH}, policy_loss_type ppo (dual_clip)",
    },
    "gspo_loss": {
        "functions": ["openrlhf.models.loss.PolicyLoss"],
        "path": f"{_POLICY_PATH}, policy_loss_type gspo",
    },
    "value_loss": {
        "functions": ["openrlhf.models.loss.ValueLoss"],
        "path": "PPOCritic.training_step: critic_loss_fn (ValueLoss.forward)",
    },
    "tis_weights": {
        "functions": ["openrlhf.models.loss.PolicyLoss"],
        "path": f"{_POLICY_PATH}, IS correction token clip (tis)",
    },
    "entropy_from_logits": {
        "functions": ["openrlhf.models.utils.compute_entropy"],
        "path": "Actor.forward(return_entropy=True) in PPOActor.training_step (--actor.entropy_coef)",
    },
    "entropy_mean": {
        "functions": [
            "openrlhf.models.utils.compute_entropy",
            "openrlhf.models.loss.aggregate_loss",
            "openrlhf.utils.loss_utils.get_loss_batch_info",
        ],
        "path": "PPOActor.training_step: entropy_loss (logged, and subtracted times entropy_coef)",
    },
    "icepop_weights": {
        "functions": ["openrlhf.models.loss.PolicyLoss"],
        "path": f"{_POLICY_PATH}, IS correction token mask (icepop)",
    },
    "is_correction_weights": {
        "functions": ["openrlhf.models.loss.PolicyLoss"],
        "path": f"{_POLICY_PATH}, IS correction token clip / token mask / seq mask",
    },
    "agg_loss": {
        "functions": [
            "openrlhf.models.loss.aggregate_loss",
            "openrlhf.utils.loss_utils.get_loss_batch_info",
        ],
        "path": "PPOActor.training_step / PolicyLoss.forward (--actor.loss_agg_mode)",
    },
    "agg_batch_info": {
        "functions": ["openrlhf.utils.loss_utils.get_loss_batch_info"],
        "path": "PPOActor.training_step: loss_batch_info",
    },
}


def load_deviations(version: str) -> dict[str, list[Deviation]]:
    """The shipped baseline of ``version`` (no file: nothing declared)."""
    from rlconform.conformance.baseline import load

    path = BASELINES / f"openrlhf-{version}.toml"
    return load(path) if path.is_file() else {}

"""slime (THUDM/slime) as a certification target: layout conversion + slime's own functions.

``rlconform certify slime --framework-path /path/to/slime`` (or an installed slime).
Every operation converts the canonical padded tensors into slime's per-sample
response-only lists (``adapters/slime/layout.py``), calls slime's own function and
converts back; the adapter contains no RL math. Operations slime has no function for are
absent (their clauses are skipped as "not implemented by target").

``torch.compile``: ``compute_approx_kl``, ``compute_policy_loss`` and
``compute_cispo_loss`` are decorated ``@torch.compile(dynamic=True)``. The adapter calls
the undecorated Python function (``__wrapped__``): compiled, each new Python scalar
(every ``eps_clip`` a generated case draws, every ``kl_loss_type``) triggers a
recompilation of seconds, and after 8 of them dynamo silently falls back to eager, so a
certification would spend minutes compiling and still end up certifying eager code. The
compiled and eager results were bit-identical on every input tried (research notes);
set ``RLCONFORM_SLIME_COMPILED=1`` to call the compiled functions instead.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from rlconform.adapters.base import Target
from rlconform.adapters.dependencies import check_import_error
from rlconform.adapters.slime import loader, manifest
from rlconform.adapters.slime.manifest import SLIME_PROFILE
from rlconform.adapters.slime.ops import (
    SlimeAdvantageOps,
    SlimeAggregateOps,
    SlimeKLOps,
    SlimeLogprobOps,
    SlimeLossOps,
    SlimeMaskOps,
    SlimeOffpolicyOps,
    SlimeRewardOps,
)
from rlconform.adapters.slime.pipeline import SlimeBatchOps, SlimeFilterOps, SlimeMetricsOps
from rlconform.adapters.slime.step import SlimeStepOps

# slime function -> (module, attribute). Compiled ones are unwrapped (module docstring).
FUNCTIONS: dict[str, tuple[str, str]] = {
    "compute_approx_kl": ("slime.utils.ppo_utils", "compute_approx_kl"),
    "compute_policy_loss": ("slime.utils.ppo_utils", "compute_policy_loss"),
    "compute_cispo_loss": ("slime.utils.ppo_utils", "compute_cispo_loss"),
    "compute_opsm_mask": ("slime.utils.ppo_utils", "compute_opsm_mask"),
    "compute_gspo_kl": ("slime.utils.ppo_utils", "compute_gspo_kl"),
    "get_grpo_returns": ("slime.utils.ppo_utils", "get_grpo_returns"),
    "get_reinforce_plus_plus_returns": ("slime.utils.ppo_utils", "get_reinforce_plus_plus_returns"),
    "get_reinforce_plus_plus_baseline_advantages": (
        "slime.utils.ppo_utils",
        "get_reinforce_plus_plus_baseline_advantages",
    ),
    "get_advantages_and_returns_batch": (
        "slime.utils.ppo_utils",
        "get_advantages_and_returns_batch",
    ),
    "calculate_log_probs_and_entropy": ("slime.utils.ppo_utils", "calculate_log_probs_and_entropy"),
    "distributed_masked_whiten": ("slime.utils.distributed_utils", "distributed_masked_whiten"),
    "get_sum_of_sample_mean": ("slime.backends.megatron_utils.cp_utils", "get_sum_of_sample_mean"),
    "get_log_probs_and_entropy": (
        "slime.backends.megatron_utils.loss",
        "get_log_probs_and_entropy",
    ),
    "vanilla_tis_function": ("slime.backends.megatron_utils.loss", "vanilla_tis_function"),
    "icepop_function": ("slime.backends.megatron_utils.loss", "icepop_function"),
    "loss_function": ("slime.backends.megatron_utils.loss", "loss_function"),
    "value_loss_function": ("slime.backends.megatron_utils.loss", "value_loss_function"),
    "Sample": ("slime.utils.types", "Sample"),
    "compute_advantages_and_returns": (
        "slime.backends.megatron_utils.loss",
        "compute_advantages_and_returns",
    ),
    "policy_loss_function": ("slime.backends.megatron_utils.loss", "policy_loss_function"),
    "log_rollout_data": ("slime.observability.train_metric_utils", "log_rollout_data"),
    "reduce_train_step_metrics": (
        "slime.observability.train_metric_utils",
        "reduce_train_step_metrics",
    ),
    "compute_metrics_from_samples": (
        "slime.observability.rollout_metrics",
        "compute_metrics_from_samples",
    ),
    "get_seqlen_balanced_partitions": (
        "slime.utils.seqlen_balancing",
        "get_seqlen_balanced_partitions",
    ),
    "calculate_workloads": ("slime.utils.dp_schedule", "_calculate_workloads"),
    "check_reward_nonzero_std": (
        "slime.rollout.filter_hub.dynamic_sampling_filters",
        "check_reward_nonzero_std",
    ),
    "call_dynamic_filter": ("slime.rollout.filter_hub.base_types", "call_dynamic_filter"),
    "should_drop_dynamic_filter_output": (
        "slime.rollout.filter_hub.base_types",
        "should_drop_dynamic_filter_output",
    ),
    "MetricGatherer": ("slime.rollout.filter_hub.base_types", "MetricGatherer"),
    # the TIS hook of examples/train_infer_mismatch_helper (a source checkout only)
    "compute_mis_weights_with_cp": (
        "examples.train_infer_mismatch_helper.mis",
        "compute_mis_weights_with_cp",
    ),
}

# slime's own top-level packages (and Megatron, which is shimmed when absent and whose
# operations are then skipped): any other missing module is a package to install (exit 2)
OWN_PACKAGES = ("slime", "examples", "megatron")

COMPILED = ("compute_approx_kl", "compute_policy_loss", "compute_cispo_loss")

# operation -> the slime functions it needs; an operation whose functions are missing is
# removed from the target (its clauses are skipped, not failed).
OP_NEEDS: dict[str, tuple[str, ...]] = {
    "response_logprobs": ("get_log_probs_and_entropy",),
    "logprobs_on_support": ("get_log_probs_and_entropy",),
    "entropy_from_logits": ("calculate_log_probs_and_entropy",),
    "entropy_mean": ("calculate_log_probs_and_entropy", "loss_function"),
    "valid_token_mask": ("convert_samples_to_train_data",),
    "masked_mean": ("get_sum_of_sample_mean",),
    "place_reward_last": ("get_reinforce_plus_plus_returns",),
    "normalize_rewards": ("post_process_rewards", "Sample"),
    "agg_loss": ("loss_function",),
    "agg_batch_info": ("loss_function",),
    "kl_penalty": ("compute_approx_kl",),
    "importance_weighted_kl": ("compute_approx_kl",),
    "tis_weights": ("vanilla_tis_function",),
    "icepop_weights": ("icepop_function",),
    "opsm_mask": ("compute_opsm_mask",),
    "advantage_gae": ("get_advantages_and_returns_batch", "distributed_masked_whiten"),
    "advantage_grpo": ("post_process_rewards", "get_grpo_returns", "Sample"),
    "advantage_reinforce_pp": ("get_reinforce_plus_plus_returns", "distributed_masked_whiten"),
    "advantage_reinforce_pp_baseline": (
        "post_process_rewards",
        "get_reinforce_plus_plus_baseline_advantages",
        "distributed_masked_whiten",
        "Sample",
    ),
    "ppo_clip_loss": ("compute_policy_loss", "get_sum_of_sample_mean"),
    "gspo_loss": ("compute_gspo_kl", "compute_policy_loss", "get_sum_of_sample_mean"),
    "cispo_loss": ("compute_cispo_loss", "get_sum_of_sample_mean"),
    "value_loss": ("value_loss_function", "get_sum_of_sample_mean"),
    "apply_kl_in_reward": ("compute_advantages_and_returns", "log_rollout_data"),
    "is_correction_weights": ("compute_mis_weights_with_cp",),
    "logprob_gap": ("loss_function", "policy_loss_function", "reduce_train_step_metrics"),
    "seqlen_workload": ("calculate_workloads",),
    "seqlen_partitions": ("calculate_workloads", "get_seqlen_balanced_partitions"),
    "filter_samples": (
        "check_reward_nonzero_std",
        "call_dynamic_filter",
        "should_drop_dynamic_filter_output",
        "MetricGatherer",
        "Sample",
    ),
    "response_length_metrics": ("compute_metrics_from_samples", "Sample"),
    "train_step": (
        "post_process_rewards",
        "Sample",
        "compute_advantages_and_returns",
        "loss_function",
        "policy_loss_function",
        "value_loss_function",
        "reduce_train_step_metrics",
    ),
}

_LOSS = "slime.backends.megatron_utils.loss"
_PPO = "slime.utils.ppo_utils"
_ROLLOUT = "slime.ray.rollout.RolloutManager"
_ACTOR = "megatron actor"

# operation -> the slime functions it calls and the trainer path that runs them (report).
BINDINGS: dict[str, dict[str, Any]] = {
    "response_logprobs": {
        "functions": [f"{_LOSS}.get_log_probs_and_entropy"],
        "path": f"{_ACTOR}: log-probs of policy_loss_function / compute_log_prob",
    },
    "logprobs_on_support": {
        "functions": [f"{_LOSS}.get_log_probs_and_entropy"],
        "path": f"{_ACTOR}: top-p replay (--rollout-top-p < 1)",
    },
    "entropy_from_logits": {
        "functions": [f"{_PPO}.calculate_log_probs_and_entropy"],
        "path": f"{_ACTOR}: entropy in policy_loss_function",
    },
    "entropy_mean": {
        "functions": [f"{_PPO}.calculate_log_probs_and_entropy", f"{_LOSS}.loss_function"],
        "path": f"{_ACTOR}: entropy_loss through loss_function's reducer",
    },
    "valid_token_mask": {
        "functions": [f"{_ROLLOUT}._convert_samples_to_train_data"],
        "path": "rollout -> train conversion",
    },
    "masked_mean": {
        "functions": ["slime.backends.megatron_utils.cp_utils.get_sum_of_sample_mean"],
        "path": f"{_ACTOR}: loss reducer (sum_of_sample_mean)",
    },
    "place_reward_last": {
        "functions": [f"{_PPO}.get_reinforce_plus_plus_returns"],
        "path": f"{_ACTOR}: compute_advantages_and_returns (reinforce_plus_plus)",
    },
    "normalize_rewards": {
        "functions": [f"{_ROLLOUT}._post_process_rewards"],
        "path": "rollout: reward post-processing",
    },
    "agg_loss": {
        "functions": [
            f"{_LOSS}.loss_function",
            "slime.backends.megatron_utils.cp_utils.get_sum_of_sample_mean",
        ],
        "path": f"{_ACTOR}: loss_function (reducer and Megatron scaling)",
    },
    "agg_batch_info": {
        "functions": [f"{_LOSS}.loss_function"],
        "path": f"{_ACTOR}: loss_function's normaliser",
    },
    "kl_penalty": {
        "functions": [f"{_PPO}.compute_approx_kl"],
        "path": f"{_ACTOR}: compute_advantages_and_returns (rollout KL) and "
        "policy_loss_function (--use-kl-loss)",
    },
    "importance_weighted_kl": {
        "functions": [f"{_PPO}.compute_approx_kl"],
        "path": f"{_ACTOR}: policy_loss_function (--use-kl-loss --use-unbiased-kl)",
    },
    "apply_kl_in_reward": {
        "functions": [
            f"{_LOSS}.compute_advantages_and_returns",
            f"{_PPO}.compute_approx_kl",
            f"{_PPO}.get_advantages_and_returns_batch",
            "slime.observability.train_metric_utils.log_rollout_data",
        ],
        "path": f"{_ACTOR}: compute_advantages_and_returns (ppo), rollout/kl metric",
    },
    "tis_weights": {
        "functions": [f"{_LOSS}.vanilla_tis_function"],
        "path": f"{_ACTOR}: policy_loss_function (--use-tis)",
    },
    "icepop_weights": {
        "functions": [f"{_LOSS}.icepop_function"],
        "path": f"{_ACTOR}: policy_loss_function (--use-tis, "
        "--custom-tis-function-path ...loss:icepop_function)",
    },
    "opsm_mask": {
        "functions": [f"{_PPO}.compute_opsm_mask"],
        "path": f"{_ACTOR}: policy_loss_function (--use-opsm)",
    },
    "is_correction_weights": {
        "functions": [
            "examples.train_infer_mismatch_helper.mis.compute_mis_weights_with_cp",
            "examples.train_infer_mismatch_helper.mis.compute_mis_weights",
        ],
        "path": f"{_ACTOR}: policy_loss_function TIS hook (--use-tis --custom-tis-function-"
        "path examples.train_infer_mismatch_helper.mis.compute_mis_weights_with_cp)",
    },
    "logprob_gap": {
        "functions": [
            f"{_LOSS}.loss_function",
            f"{_LOSS}.policy_loss_function",
            "slime.observability.train_metric_utils.reduce_train_step_metrics",
        ],
        "path": f"{_ACTOR}: train step metric train_rollout_logprob_abs_diff",
    },
    "advantage_gae": {
        "functions": [
            f"{_PPO}.get_advantages_and_returns_batch",
            "slime.utils.distributed_utils.distributed_masked_whiten",
        ],
        "path": f"{_ACTOR}: compute_advantages_and_returns (ppo, --normalize-advantages)",
    },
    "advantage_grpo": {
        "functions": [f"{_ROLLOUT}._post_process_rewards", f"{_PPO}.get_grpo_returns"],
        "path": "rollout reward post-processing, then compute_advantages_and_returns (grpo)",
    },
    "advantage_reinforce_pp": {
        "functions": [
            f"{_PPO}.get_reinforce_plus_plus_returns",
            "slime.utils.distributed_utils.distributed_masked_whiten",
        ],
        "path": f"{_ACTOR}: compute_advantages_and_returns (reinforce_plus_plus)",
    },
    "advantage_reinforce_pp_baseline": {
        "functions": [
            f"{_ROLLOUT}._post_process_rewards",
            f"{_PPO}.get_reinforce_plus_plus_baseline_advantages",
            "slime.utils.distributed_utils.distributed_masked_whiten",
        ],
        "path": "rollout reward post-processing, then compute_advantages_and_returns "
        "(reinforce_plus_plus_baseline)",
    },
    "ppo_clip_loss": {
        "functions": [f"{_PPO}.compute_policy_loss"],
        "path": f"{_ACTOR}: policy_loss_function (ppo_kl = old - new)",
    },
    "gspo_loss": {
        "functions": [f"{_PPO}.compute_gspo_kl", f"{_PPO}.compute_policy_loss"],
        "path": f"{_ACTOR}: policy_loss_function (gspo)",
    },
    "cispo_loss": {
        "functions": [f"{_PPO}.compute_cispo_loss"],
        "path": f"{_ACTOR}: policy_loss_function (cispo)",
    },
    "value_loss": {
        "functions": [f"{_LOSS}.value_loss_function"],
        "path": "megatron critic: value_loss_function",
    },
    "seqlen_workload": {
        "functions": ["slime.utils.dp_schedule._calculate_workloads"],
        "path": "train data split: build_dp_schedule (--balance-by-flops, --balance-data)",
    },
    "seqlen_partitions": {
        "functions": ["slime.utils.seqlen_balancing.get_seqlen_balanced_partitions"],
        "path": "train data split: build_dp_schedule (--balance-by-flops, --balance-data)",
    },
    "filter_samples": {
        "functions": [
            "slime.rollout.filter_hub.dynamic_sampling_filters.check_reward_nonzero_std",
            "slime.rollout.filter_hub.base_types.call_dynamic_filter",
            "slime.rollout.filter_hub.base_types.should_drop_dynamic_filter_output",
        ],
        "path": "rollout: generate_rollout_async dynamic sampling "
        "(--dynamic-sampling-filter-path ...check_reward_nonzero_std)",
    },
    "response_length_metrics": {
        "functions": ["slime.observability.rollout_metrics.compute_metrics_from_samples"],
        "path": "rollout: log_rollout_data (rollout/ metrics)",
    },
    "train_step": {
        "functions": [
            f"{_ROLLOUT}._post_process_rewards",
            f"{_LOSS}.compute_advantages_and_returns",
            f"{_LOSS}.loss_function",
            f"{_LOSS}.policy_loss_function",
            f"{_LOSS}.value_loss_function",
            "slime.observability.train_metric_utils.reduce_train_step_metrics",
        ],
        "path": f"{_ACTOR}: train_actor / train_critic, then train_one_step per micro-batch "
        "(Megatron's loss scaling and finalize_model_grads reproduced, named in "
        "adapters/slime/step.py)",
    },
}


class SlimeTarget(
    SlimeMaskOps,
    SlimeLogprobOps,
    SlimeRewardOps,
    SlimeKLOps,
    SlimeAdvantageOps,
    SlimeLossOps,
    SlimeOffpolicyOps,
    SlimeAggregateOps,
    SlimeBatchOps,
    SlimeFilterOps,
    SlimeMetricsOps,
    SlimeStepOps,
    Target,
):
    """slime's own functions behind the canonical operation names."""

    name = "slime"
    # run under options no step config covers; each binding's path names the option
    step_unbound = (
        "filter_samples",
        "importance_weighted_kl",
        "advantage_reinforce_pp_baseline",
        "cispo_loss",
        "gspo_loss",
        "icepop_weights",
        "is_correction_weights",
        "opsm_mask",
        "tis_weights",
        "logprob_gap",
        "seqlen_partitions",
        "seqlen_workload",
    )

    def __init__(
        self,
        fw: SimpleNamespace,
        version: str,
        device: str = "cpu",
        shims=(),
        framework_path: str | None = None,
    ):
        self.fw = fw
        self.framework_path = framework_path
        self.version = version
        self.device = device
        self.profile = SLIME_PROFILE
        self.deviations = manifest.deviations()
        self.shims = list(shims)
        self.missing = sorted(
            {fn for fns in OP_NEEDS.values() for fn in fns if getattr(fw, fn, None) is None}
        )
        for op, needs in OP_NEEDS.items():
            if any(getattr(fw, fn, None) is None for fn in needs):
                setattr(self, op, None)
        self.bindings = {op: entry for op, entry in BINDINGS.items() if self.implements(op)}

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled as a recipe (for the gloo workers of agg.shard_invariance): the worker
        binds slime again from the same checkout, with this target's profile and manifest;
        the resolved functions themselves (``torch.compile`` wrappers among them) are not
        picklable."""
        state = (self.framework_path, self.device, self.profile, dict(self.deviations))
        return (_rebuild, state)

    def describe(self) -> dict[str, str]:
        info = super().describe()
        info["shims"] = ", ".join(self.shims) or "none"
        return info


def _rebuild(
    framework_path: str | None, device: str, profile: Any, deviations: dict[str, Any]
) -> SlimeTarget:
    target = load(device=device, framework_path=framework_path)
    target.profile, target.deviations = profile, deviations
    return target


def _resolve(compiled: bool) -> SimpleNamespace:
    fw = SimpleNamespace(import_errors={})
    modules: dict[str, Any] = {}
    for name, (module_name, attribute) in FUNCTIONS.items():
        if module_name not in modules:
            try:
                modules[module_name] = importlib.import_module(module_name)
            except Exception as exc:  # noqa: BLE001 - recorded, its operations are skipped
                check_import_error("slime", module_name, exc, OWN_PACKAGES, "slime")
                modules[module_name] = None
                fw.import_errors[module_name] = f"{type(exc).__name__}: {exc}"
        module = modules[module_name]
        fn = getattr(module, attribute, None) if module is not None else None
        if fn is not None and name in COMPILED and not compiled:
            fn = loader.uncompiled(fn)
        setattr(fw, name, fn)
    try:
        fw.post_process_rewards, fw.convert_samples_to_train_data = loader.rollout_conversion()
    except Exception as exc:  # noqa: BLE001 - recorded, those operations are skipped
        fw.post_process_rewards = fw.convert_samples_to_train_data = None
        fw.import_errors["slime.ray.rollout"] = f"{type(exc).__name__}: {exc}"
    return fw


def load(device: str = "cpu", framework_path: str | None = None) -> SlimeTarget:
    """Find slime (installed, or the checkout at ``framework_path``) and bind it.

    Raises SetupError (CLI exit 2) with what to do when slime cannot be imported.
    """
    root: Path | None = loader.locate(framework_path)
    shims = loader.install_shims()
    try:
        importlib.import_module("slime.utils.ppo_utils")
    except ImportError as exc:
        from rlconform.adapters.base import SetupError

        where = f" from {root}" if root is not None else ""
        raise SetupError(f"cannot import slime.utils.ppo_utils{where}: {exc}") from exc
    compiled = os.environ.get("RLCONFORM_SLIME_COMPILED") == "1"
    fw = _resolve(compiled)
    return SlimeTarget(
        fw,
        loader.version(root),
        device=device,
        shims=shims,
        framework_path=str(root) if root is not None else None,
    )

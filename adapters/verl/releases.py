"""The verl release lines the adapter supports, and where their APIs differ: the one place.

Each line (0.7.x, 0.8.x, 0.9.x) is a ``Release``: the trainer that runs by default, the
call path of each operation that differs between lines, the binding table the report
prints (operation -> verl functions -> trainer path), the baseline file of its declared
breaks and the profile keys that differ. Operations read ``target.release``; no module
compares version numbers.

Trainer paths, read from each release's ``main_ppo.py`` and trainer:

- 0.9.x: ``trainer.use_v1: true`` by default: ``trainer/ppo/v1/trainer_base.py`` with the
  engine workers (``engine_workers.py``: ``losses.ppo_loss`` on ``FSDPEngineWithLMHead``),
  samples stored ragged (nested tensors) by the TransferQueue agent loop. The legacy
  ``RayPPOTrainer`` (``use_v1: false``) is the "v0 trainer".
- 0.8.x: ``RayPPOTrainer`` with the engine workers (the legacy workers are gone): padded
  batches, ``left_right_2_no_padding`` / ``no_padding_2_padding`` around the engine.
- 0.7.x: ``RayPPOTrainer`` with the legacy FSDP workers by default
  (``use_legacy_worker_impl: auto``): ``DataParallelPPOActor`` computes log-probs and
  composes the actor loss inline; the engine workers (``losses.ppo_loss``) are opt-in
  (``use_legacy_worker_impl: disable``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from rlconform.adapters.base import SetupError

V1 = "v1 trainer"
V0 = "v0 trainer (RayPPOTrainer)"
ENGINE = "engine workers"

_CORE = "verl.trainer.ppo.core_algos"
_TF = "verl.utils.torch_functional"
_RT = "verl.trainer.ppo.ray_trainer"
_RC = "verl.trainer.ppo.rollout_corr_helper"
_PAD = "verl.workers.utils.padding"
_ENG = "verl.workers.engine.fsdp.transformer_impl.FSDPEngineWithLMHead"
_LOSSES = "verl.workers.utils.losses"
_PROTO = "verl.protocol"
_METRIC = "verl.trainer.ppo.metric_utils"
_AGENT = "verl.experimental.agent_loop.agent_loop"


@dataclasses.dataclass(frozen=True)
class Release:
    """One supported verl release line and how the adapter reaches its trainer's code.

    ``advantage_entry``: the trainer's advantage call (``"multi_trajectories"``: v1's
    ``compute_advantage_for_multi_trajectories``; ``"compute_advantage"``: the
    ``RayPPOTrainer`` dispatcher). ``logprob_path``: how log-probs and entropies are made
    (``"nested_engine"``: ragged samples through the FSDP engine, ``response_from_nested``;
    ``"padded_engine"``: a padded batch through ``left_right_2_no_padding``, the engine and
    ``no_padding_2_padding``; ``"dp_actor"``: the legacy ``DataParallelPPOActor``).
    ``engine_outputs_takes_processor``: ``prepare_model_outputs`` has the
    ``logits_processor_func`` parameter. ``reward_path``: ``"agent_loop_output"`` (v1:
    ``AgentLoopOutput.as_dict``) or ``"agent_loop_postprocess"`` (``AgentLoopWorker
    ._postprocess``). ``colocated_reward``: the line has the colocated reward-model path
    (``assemble_rm_scores`` cut to each response) as an alternative trainer path.
    ``critic_model_config``: ``CriticConfig`` loads a model config unless given one.
    ``nested_micro_batches``: the engine's micro-batches hold prompts and responses as nested
    tensors (v1 TransferQueue samples), not padded with an attention mask.
    ``chunked_entropy``: the bound forward honours ``entropy_from_logits_with_chunking``
    (0.7's padded branch of ``_forward_micro_batch`` always calls ``entropy_from_logits``).
    ``agg_modes``: the ``loss_agg_mode`` values ``agg_loss`` knows (``token-sum`` is new in
    0.9).

    An operation missing from ``bindings`` is not implemented on that line (its clauses are
    skipped): the line has no function for it on any trainer path.
    """

    line: str
    certified: str
    trainer: str
    advantage_entry: str
    logprob_path: str
    engine_outputs_takes_processor: bool
    reward_path: str
    colocated_reward: bool
    critic_model_config: bool
    nested_micro_batches: bool
    chunked_entropy: bool
    agg_modes: tuple[str, ...]
    bindings: Mapping[str, Mapping[str, Any]]
    baseline: str
    profile_name: str

    def matches(self, version: str) -> bool:
        return version == self.line or version.startswith(self.line + ".")

    def describe(self) -> dict[str, str]:
        return {
            "release": self.line + ".x",
            "bindings": f"verl-{self.line}",
            "trainer": self.trainer,
        }


def _binding(functions: list[str], path: str) -> dict[str, Any]:
    return {"functions": functions, "path": path}


def _advantage_bindings(entry: list[str], path: str) -> dict[str, dict[str, Any]]:
    names = {
        "advantage_gae": f"{_CORE}.compute_gae_advantage_return",
        "advantage_grpo": f"{_CORE}.compute_grpo_outcome_advantage",
        "advantage_rloo": f"{_CORE}.compute_rloo_outcome_advantage",
        "advantage_reinforce_pp": f"{_CORE}.compute_reinforce_plus_plus_outcome_advantage",
        "advantage_reinforce_pp_baseline": (
            f"{_CORE}.compute_reinforce_plus_plus_baseline_outcome_advantage"
        ),
        "advantage_remax": f"{_CORE}.compute_remax_outcome_advantage",
        "advantage_opo": f"{_CORE}.compute_opo_outcome_advantage",
        "advantage_grpo_passk": f"{_CORE}.compute_grpo_passk_outcome_advantage",
        "advantage_gpg": f"{_CORE}.compute_gpg_outcome_advantage",
        "advantage_optimal_token_baseline": f"{_CORE}.compute_optimal_token_baseline_advantage",
        "advantage_gdpo": f"{_CORE}.compute_gdpo_outcome_advantage",
    }
    return {op: _binding([*entry, fn], path) for op, fn in names.items()}


def _shared_bindings(trainer: str, actor: str, cpu_unpad: bool) -> dict[str, dict[str, Any]]:
    """Bindings whose functions and paths are the same in every supported line.

    ``cpu_unpad``: ``attention_utils.unpad_input`` runs without flash_attn (0.9 added a torch
    fallback; before, it imports ``flash_attn.bert_padding``, which has no CPU build), so the
    remove-padding layout functions can be certified on CPU.
    """
    table = {
        "response_mask_from_attention": _binding(
            [f"{_RT}.compute_response_mask"], f"{V0} (response_mask fallback)"
        ),
        "masked_mean": _binding([f"{_TF}.masked_mean"], f"{actor} (loss metrics)"),
        "pad_batch": _binding(
            [
                f"{_AGENT}.AgentLoopWorker._pad_token_ids",
                "verl.utils.model.compute_position_id_with_mask",
            ],
            f"{V0} (agent loop: _agent_loop_postprocess)",
        ),
        "pack_batch": _binding(
            [f"{_PAD}.left_right_2_no_padding", "verl.utils.model.compute_position_id_with_mask"],
            f"{V0} (engine input)",
        ),
        "unpad_batch": _binding(
            ["verl.utils.attention_utils.unpad_input"], f"{V0} (left_right_2_no_padding)"
        ),
        "kl_penalty": _binding([f"{_CORE}.kl_penalty"], f"{actor} (KL loss); {trainer}"),
        "apply_kl_in_reward": _binding(
            [f"{_RT}.apply_kl_penalty"], f"{trainer} (use_kl_in_reward)"
        ),
        "kl_controller_update": _binding(
            [f"{_CORE}.get_kl_controller", f"{_CORE}.AdaptiveKLController.update"],
            f"{trainer} (use_kl_in_reward)",
        ),
        "agg_loss": _binding([f"{_CORE}.agg_loss"], f"{actor} (every policy loss)"),
        "agg_batch_info": _binding(
            ["verl.workers.engine.fsdp.transformer_impl.FSDPEngine.forward_backward_batch"],
            f"{ENGINE} (global batch_num_tokens / global_batch_size bookkeeping, transcribed)",
        ),
        "tis_weights": _binding(
            [
                f"{_RC}.compute_rollout_correction_and_add_to_batch",
                f"{_CORE}.compute_policy_loss_vanilla",
            ],
            f"{trainer} (rollout_correction: rollout_is=token) -> {actor} (rollout_is_weights)",
        ),
        "icepop_weights": _binding(
            [
                f"{_RC}.compute_rollout_correction_and_add_to_batch",
                f"{_CORE}.compute_policy_loss_vanilla",
            ],
            f"{trainer} (rollout_correction: token IcePop band) -> {actor} (rollout_is_weights)",
        ),
        "is_correction_weights": _binding(
            [
                f"{_RC}.compute_rollout_correction_and_add_to_batch",
                f"{_RC}.compute_rollout_correction_and_rejection_mask",
                f"{_RC}.compute_rollout_rejection_mask",
                f"{_CORE}.compute_policy_loss_vanilla",
            ],
            f"{trainer} (rollout_correction: TIS, rejection sampling) -> {actor}",
        ),
        "logprob_gap": _binding(
            ["verl.utils.debug.metrics.calculate_debug_metrics"], f"{trainer} (old_log_prob step)"
        ),
        "batch_make": _binding([f"{_PROTO}.DataProto.from_dict"], V0),
        "batch_read": _binding([f"{_PROTO}.DataProto"], V0),
        "batch_union": _binding([f"{_PROTO}.DataProto.union"], V0),
        "batch_chunk": _binding([f"{_PROTO}.DataProto.chunk"], V0),
        "batch_split": _binding([f"{_PROTO}.DataProto.split"], V0),
        "batch_select": _binding([f"{_PROTO}.DataProto.select_idxs"], f"{V0}; {trainer}"),
        "batch_reorder": _binding([f"{_PROTO}.DataProto.reorder"], V0),
        "batch_repeat": _binding([f"{_PROTO}.DataProto.repeat"], V0),
        "batch_concat": _binding([f"{_PROTO}.DataProto.concat"], V0),
        "batch_pad_to_divisor": _binding(
            [f"{_PROTO}.pad_dataproto_to_divisor"], f"{V0} (validation)"
        ),
        "batch_unpad": _binding([f"{_PROTO}.unpad_dataproto"], f"{V0} (validation)"),
        "batch_sample_mean": _binding([f"{_PROTO}.unpad_dataproto"], f"{V0} (validation)"),
        "seqlen_workload": _binding(
            ["verl.utils.seqlen_balancing.calculate_workload"], f"{trainer} (_balance_batch)"
        ),
        "seqlen_partitions": _binding(
            [
                "verl.utils.seqlen_balancing.calculate_workload",
                "verl.utils.seqlen_balancing.get_seqlen_balanced_partitions",
            ],
            f"{trainer} (_balance_batch)",
        ),
        "response_length_metrics": _binding(
            [f"{_METRIC}.compute_data_metrics"], f"{trainer} (step metrics)"
        ),
        "validation_metrics": _binding(
            [f"{_METRIC}.process_validation_metrics"], f"{trainer} (validation)"
        ),
        "reduce_metrics": _binding(
            ["verl.utils.metric.reduce_metrics"], f"{trainer} (step metrics)"
        ),
    }
    if not cpu_unpad:
        for op in ("pack_batch", "unpad_batch"):
            del table[op]
    return table


def _loss_bindings(actor: str) -> dict[str, dict[str, Any]]:
    via = [f"{_LOSSES}.ppo_loss", f"{_CORE}.get_policy_loss_fn"]
    return {
        "ppo_clip_loss": _binding([*via, f"{_CORE}.compute_policy_loss_vanilla"], actor),
        "gspo_loss": _binding([*via, f"{_CORE}.compute_policy_loss_gspo"], actor),
        "cispo_loss": _binding([*via, f"{_CORE}.compute_policy_loss_cispo"], actor),
        "dppo_tv_loss": _binding([*via, f"{_CORE}.compute_policy_loss_dppo_tv"], actor),
        "sapo_loss": _binding([*via, f"{_CORE}.compute_policy_loss_sapo"], actor),
        "gmpo_loss": _binding([*via, f"{_CORE}.compute_policy_loss_geo_mean"], actor),
        "policy_loss_reduced": _binding(
            [f"{_LOSSES}.ppo_loss", f"{_CORE}.get_policy_loss_fn", f"{_CORE}.agg_loss"],
            f"{actor} (the micro-batch scalar the engine back-propagates and sums)",
        ),
        "actor_loss": _binding(
            [f"{_LOSSES}.ppo_loss", f"{_CORE}.agg_loss", f"{_CORE}.kl_penalty"], actor
        ),
        "value_loss": _binding(
            [f"{_LOSSES}.value_loss", f"{_CORE}.compute_value_loss"],
            actor.replace("actor", "critic"),
        ),
    }


def _engine_logprob_bindings(entry: list[str], exit_: list[str], path: str, temperature: str):
    engine = [f"{_ENG}.prepare_model_inputs", f"{_ENG}.prepare_model_outputs"]
    return {
        "response_logprobs": _binding(
            [*entry, *engine, f"{_TF}.logprobs_from_logits", *exit_], f"{path} (label shift)"
        ),
        "sampling_logprobs": _binding(
            [*entry, *engine, f"{_TF}.logprobs_from_logits", *exit_],
            f"{path} ({temperature}; top-k / top-p are not passed to the actor)",
        ),
        "entropy_from_logits": _binding(
            [*entry, *engine, f"{_TF}.entropy_from_logits", *exit_], f"{path} (calculate_entropy)"
        ),
        "entropy_mean": _binding(
            [*entry, *engine, f"{_TF}.entropy_from_logits", *exit_, f"{_CORE}.agg_loss"],
            f"{path} (actor/entropy metric)",
        ),
    }


_V1_ACTOR = "v1 actor (engine workers, losses.ppo_loss)"
_V1_ADV = [
    "verl.trainer.ppo.v1.utils.compute_advantage_for_multi_trajectories",
    f"{_RT}.compute_advantage",
]

RELEASE_0_9 = Release(
    line="0.9",
    certified="0.9.1",
    trainer=f"{V1} (trainer.use_v1: true, the default)",
    advantage_entry="multi_trajectories",
    logprob_path="nested_engine",
    engine_outputs_takes_processor=True,
    reward_path="agent_loop_output",
    colocated_reward=True,
    critic_model_config=False,
    nested_micro_batches=True,
    chunked_entropy=True,
    agg_modes=(
        "token-mean",
        "token-sum",
        "seq-mean-token-sum",
        "seq-mean-token-mean",
        "seq-mean-token-sum-norm",
    ),
    bindings={
        **_shared_bindings(V1, _V1_ACTOR, cpu_unpad=True),
        **_advantage_bindings(_V1_ADV, f"{V1} (_compute_advantage)"),
        **_loss_bindings(_V1_ACTOR),
        **_engine_logprob_bindings(
            [],
            [f"{_PAD}.response_from_nested"],
            f"v1 engine ({V1} _compute_old_log_prob)",
            "_scale_logits_by_temperature",
        ),
        "unpack_batch": _binding(
            [f"{_PAD}.build_attention_mask_from_nested", "verl.utils.attention_utils.unpad_input"],
            "v1 engine (use_remove_padding=False)",
        ),
        "place_reward_last": _binding(
            [f"{_AGENT}.AgentLoopOutput.as_dict"],
            f"{V1} (TransferQueue agent loop, streaming reward)",
        ),
        "train_step": _binding(
            [
                f"{_AGENT}.AgentLoopOutput.as_dict",
                f"{_RT}.apply_kl_penalty",
                f"{_CORE}.get_kl_controller",
                "verl.trainer.ppo.v1.utils.compute_advantage_for_multi_trajectories",
                f"{_PAD}.response_to_nested",
                f"{_LOSSES}.value_loss",
                f"{_LOSSES}.ppo_loss",
                "verl.utils.metric.utils.Metric.aggregate_dp",
                "verl.utils.metric.reduce_metrics",
                f"{_METRIC}.compute_data_metrics",
            ],
            f"{V1} (_step_once: _compute_advantage, _update_critic, _update_actor; the "
            "engine's micro-batch loop and batch_num_tokens bookkeeping transcribed)",
        ),
    },
    baseline="verl-0.9.1.toml",
    profile_name="verl-0.9.1",
)

_V0_ACTOR = f"{V0} actor ({ENGINE}, losses.ppo_loss)"
_V0_ADV = [f"{_RT}.compute_advantage"]

RELEASE_0_8 = Release(
    line="0.8",
    certified="0.8.0",
    trainer=f"{V0} with the {ENGINE}",
    advantage_entry="compute_advantage",
    logprob_path="padded_engine",
    engine_outputs_takes_processor=True,
    reward_path="agent_loop_postprocess",
    colocated_reward=False,
    critic_model_config=False,
    nested_micro_batches=False,
    chunked_entropy=True,
    agg_modes=(
        "token-mean",
        "seq-mean-token-sum",
        "seq-mean-token-mean",
        "seq-mean-token-sum-norm",
    ),
    bindings={
        **_shared_bindings(V0, _V0_ACTOR, cpu_unpad=False),
        **_advantage_bindings(_V0_ADV, f"{V0} (fit: compute_advantage)"),
        **_loss_bindings(_V0_ACTOR),
        **_engine_logprob_bindings(
            [],
            [f"{_PAD}.no_padding_2_padding"],
            f"{V0} ({ENGINE} compute_log_prob; input packed as left_right_2_no_padding packs "
            "it, which needs flash_attn)",
            "logits.div_(temperature)",
        ),
        "place_reward_last": _binding(
            [f"{_AGENT}.AgentLoopWorker._postprocess"], f"{V0} (agent loop, streaming reward)"
        ),
        "train_step": _binding(
            [
                f"{_AGENT}.AgentLoopWorker._postprocess",
                f"{_RT}.apply_kl_penalty",
                f"{_CORE}.get_kl_controller",
                f"{_RT}.compute_advantage",
                "verl.workers.engine.utils.prepare_micro_batches",
                f"{_LOSSES}.value_loss",
                f"{_LOSSES}.ppo_loss",
                "verl.utils.metric.utils.Metric.aggregate_dp",
                "verl.utils.metric.reduce_metrics",
            ],
            f"{V0} with the {ENGINE} (fit: apply_kl_penalty, compute_advantage, "
            "_update_critic, _update_actor; left_right_2_no_padding's loss fields, the engine's "
            "micro-batch loop and batch_num_tokens bookkeeping transcribed)",
        ),
    },
    baseline="verl-0.8.0.toml",
    profile_name="verl-0.8.0",
)

_DP_ACTOR = "verl.workers.actor.dp_actor.DataParallelPPOActor"
_LEGACY = f"{V0} with the legacy FSDP workers (default)"
_PADDED = "use_remove_padding=false: remove-padding packs with flash_attn, CUDA only"
_OPT_IN_ACTOR = f"{V0} actor ({ENGINE}, use_legacy_worker_impl=disable: opt-in)"


def _legacy_logprob_bindings() -> dict[str, dict[str, Any]]:
    forward = [f"{_DP_ACTOR}._forward_micro_batch"]
    return {
        "response_logprobs": _binding(
            [*forward, f"{_TF}.logprobs_from_logits"],
            f"{_LEGACY} (compute_log_prob: label shift; {_PADDED})",
        ),
        "sampling_logprobs": _binding(
            [*forward, f"{_TF}.logprobs_from_logits"],
            f"{_LEGACY} (logits.div_(temperature); top-k / top-p are not passed to the actor; "
            f"{_PADDED})",
        ),
        "entropy_from_logits": _binding(
            [*forward, f"{_TF}.entropy_from_logits"],
            f"{_LEGACY} (calculate_entropy; {_PADDED})",
        ),
        "entropy_mean": _binding(
            [*forward, f"{_TF}.entropy_from_logits", f"{_CORE}.agg_loss"],
            f"{_LEGACY} (actor/entropy metric; {_PADDED})",
        ),
    }


RELEASE_0_7 = Release(
    line="0.7",
    certified="0.7.1",
    trainer=_LEGACY,
    advantage_entry="compute_advantage",
    logprob_path="dp_actor",
    engine_outputs_takes_processor=False,
    reward_path="agent_loop_postprocess",
    colocated_reward=False,
    critic_model_config=True,
    nested_micro_batches=False,
    chunked_entropy=False,
    agg_modes=(
        "token-mean",
        "seq-mean-token-sum",
        "seq-mean-token-mean",
        "seq-mean-token-sum-norm",
    ),
    bindings={
        # 0.7 pads inline in the async agent loop, and its rollout correction takes a single
        # IS threshold (no IcePop band)
        **{
            op: b
            for op, b in _shared_bindings(V0, _OPT_IN_ACTOR, cpu_unpad=False).items()
            if op not in ("pad_batch", "icepop_weights")
        },
        **_advantage_bindings(_V0_ADV, f"{V0} (fit: compute_advantage)"),
        **_loss_bindings(_OPT_IN_ACTOR),
        **_legacy_logprob_bindings(),
        "place_reward_last": _binding(
            [f"{_AGENT}.AgentLoopWorker._postprocess"], f"{V0} (agent loop, streaming reward)"
        ),
        "train_step": _binding(
            [
                f"{_AGENT}.AgentLoopWorker._postprocess",
                f"{_RT}.apply_kl_penalty",
                f"{_CORE}.get_kl_controller",
                f"{_RT}.compute_advantage",
                "verl.workers.critic.dp_critic.DataParallelPPOCritic.update_critic",
                f"{_DP_ACTOR}.update_policy",
                "verl.utils.metric.reduce_metrics",
            ],
            f"{_LEGACY} (fit: apply_kl_penalty, compute_advantage, update_critic, "
            "update_actor; the worker made without its constructor, the model's forward the "
            "batch's leaves)",
        ),
    },
    baseline="verl-0.7.1.toml",
    profile_name="verl-0.7.1",
)

RELEASES: tuple[Release, ...] = (RELEASE_0_7, RELEASE_0_8, RELEASE_0_9)


@dataclasses.dataclass(frozen=True)
class Settings:
    """Trainer settings that select a different verl function for the same operation.

    ``defaults``: what verl's shipped trainer config runs (the estimators named ``grpo`` /
    ``rloo``, ``entropy_from_logits_with_chunking: false``, the streaming reward).
    ``alternates``: the other real choice of each (``grpo_vectorized`` / ``rloo_vectorized``,
    chunked entropy, the colocated reward model where the line has it, GDPO on the v0 trainer
    where the default is v1); certified as its own
    target (``rlconform certify rlconform.adapters.verl:alternates``) with only the
    operations it changes.
    """

    name: str
    vectorized_estimators: bool = False
    entropy_chunking: bool = False
    colocated_reward: bool = False
    gdpo_v0: bool = False

    def changed_ops(self, release: Release) -> tuple[str, ...]:
        ops: list[str] = []
        if self.vectorized_estimators:
            ops += ["advantage_grpo", "advantage_rloo"]
        if self.entropy_chunking and release.chunked_entropy:
            ops += ["entropy_from_logits", "entropy_mean"]
        if self.colocated_reward and release.colocated_reward:
            ops += ["place_reward_last"]
        if self.gdpo_v0 and release.advantage_entry == "multi_trajectories":
            ops += ["advantage_gdpo"]
        return tuple(ops)

    def bindings(self, release: Release) -> dict[str, dict[str, Any]]:
        """The release's binding table with this setting's functions swapped in."""
        table = {op: dict(b) for op, b in release.bindings.items()}
        swaps = {}
        if self.vectorized_estimators:
            swaps[f"{_CORE}.compute_grpo_outcome_advantage"] = (
                f"{_CORE}.compute_grpo_vectorized_outcome_advantage"
            )
            swaps[f"{_CORE}.compute_rloo_outcome_advantage"] = (
                f"{_CORE}.compute_rloo_vectorized_outcome_advantage"
            )
        if self.entropy_chunking and release.chunked_entropy:
            swaps[f"{_TF}.entropy_from_logits"] = f"{_TF}.entropy_from_logits_with_chunking"
        for binding in table.values():
            binding["functions"] = [swaps.get(f, f) for f in binding["functions"]]
        if self.colocated_reward and release.colocated_reward:
            table["place_reward_last"] = _binding(
                [
                    "verl.experimental.reward_loop.reward_manager.base.RewardManagerBase"
                    ".assemble_rm_scores",
                    "verl.trainer.ppo.v1.trainer_base.PPOTrainer._compute_reward_colocate",
                ],
                f"{V1} (colocated reward model: scores cut to each response)",
            )
        if self.gdpo_v0 and release.advantage_entry == "multi_trajectories":
            table["advantage_gdpo"] = _binding(
                [f"{_RT}.compute_advantage", f"{_CORE}.compute_gdpo_outcome_advantage"],
                f"{V0} (use_v1: false; the v1 trainer does not hand GDPO its reward components)",
            )
        return table


DEFAULTS = Settings("trainer defaults")
ALTERNATES = Settings(
    "alternates (vectorized estimators, chunked entropy, colocated reward model, v0 GDPO)",
    vectorized_estimators=True,
    entropy_chunking=True,
    colocated_reward=True,
    gdpo_v0=True,
)
SUPPORTED_RANGE = "0.7.x, 0.8.x and 0.9.x"


def release_for(version: str) -> Release:
    """The release line of ``version``; SetupError naming the supported range otherwise."""
    for release in RELEASES:
        if release.matches(version):
            return release
    newest = RELEASES[-1].certified
    raise SetupError(
        f"verl {version} is not supported by this adapter (supported: {SUPPORTED_RANGE}; "
        f"certified: {', '.join(r.certified for r in RELEASES)}); pip install 'verl=={newest}'"
    )

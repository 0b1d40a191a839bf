"""ROLL binding of the CONTRACT area `step`: one step of the RLVR pipeline, end to end.

The path, read from ``roll/pipeline/rlvr/rlvr_pipeline.py`` (``RLVRPipeline.run``), the
workers (``roll/pipeline/base_worker.py``, ``roll/pipeline/rlvr/actor_worker.py``) and the
default strategy's ``train_step`` (``roll/distributed/strategy/fsdp2_strategy.py``):

1. the batch (ROLL's full-sequence layout, ``layout.py``) with the rollout's old
   log-probs when ``enable_old_logprobs_recompute`` holds (else zeros, as the pipeline
   writes them) and the reference log-probs when ``enable_reference`` holds (else a copy
   of the old ones), the critic's values for gae;
2. ``get_sample_level_mask``, ``reward_postprocess``, ``compute_token_reward`` with the
   pipeline's controller (``get_kl_controller(init_kl_coef, target_kl, kl_horizon)``, made
   once and carried across steps: it is updated inside ``compute_token_reward``), then
   ``compute_advantage`` with the pipeline's arguments, all called as they are;
3. the critic's and the actor's ``train_step``: one backward batch of
   ``per_device_train_batch_size * gradient_accumulation_steps`` rows (the step's batch),
   the strategy's counters (``_get_batch_num_tokens`` / ``_get_global_valid_samples``,
   compiled from ROLL) on it, then per micro-batch ``loss_func`` (compiled from ROLL) on the
   model output, the loss times ``loss_scale = mini_steps * dp_size`` (``apply_loss_scale``,
   on by default) over ``gradient_accumulation_steps``, and ``backward`` (transcribed: the
   strategy needs a model and a process group); the worker's metric reduction (``@sum``
   keys summed over micro-batches and divided by the backward steps, the others averaged).

The model is outside: the strategy stand-in's ``op_compute_log_probs`` / ``op_compute_entropy``
return the micro-batch's rows of the batch's leaf log-probs / entropies laid out on ROLL's
grid, and the critic's output is the leaf values on that grid. Trainer configs are ROLL's
``RLVRConfig`` fields: ``default`` is the dataclass defaults with the two rules its
``__post_init__`` applies to what the step reads (transcribed: ``enable_reference`` when
``use_kl_loss`` or ``init_kl_coef > 0``; ``enable_old_logprobs_recompute`` when
``init_kl_coef > 0`` or the step has more than one backward batch); the contract settings are
read off the resulting config. Single-turn only (the RLVR pipeline's responses have no
tool tokens; multi-turn is the agentic pipeline, not bound for the step).
"""

from __future__ import annotations

import copy
import types
from collections.abc import Mapping
from typing import Any

import torch

from rlconform.adapters.base import Inexpressible, SetupError
from rlconform.adapters.roll.layout import RollLayout
from rlconform.adapters.step_io import StepBatch, StepOutput
from rlconform.conformance.trainer_config import TrainerConfig

ROLL_STEP_CONFIGS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("default", {}),
    (
        "grpo_kl_loss",
        {"adv_estimator": "grpo", "use_kl_loss": True, "kl_loss_coef": 0.001, "init_kl_coef": 0.0},
    ),
    (
        "reinforce_kl_in_reward_adaptive",
        {
            "adv_estimator": "reinforce",
            "whiten_advantages": True,
            "add_token_level_kl": True,
            "target_kl": 0.1,
            "kl_horizon": 100,
        },
    ),
    (
        "gae_whiten_value_clip_token_mean",
        {"whiten_advantages": True, "value_clip": 0.5, "loss_agg_mode": "token-mean"},
    ),
)

_ESTIMATORS = {"gae": "gae", "reinforce": "reinforce_pp", "grpo": "grpo"}
_KL = {"kl": "k1", "abs": "abs", "mse": "k2", "k3": "k3", "low_var_kl": "k3"}

# contract metric -> ROLL's logged name
STEP_METRIC_NAMES = {
    "policy_loss": "actor/pg_loss@sum",
    "kl_loss": "actor/kl_loss@sum",
    "clip_fraction": None,  # actor/clipfrac@sum: a mean of per-sequence shares (declared op-level)
    "value_loss": "critic/loss",
    "kl_in_reward": "critic/kl",
}


# the RLVRConfig fields the step reads
_READS = (
    "adv_estimator",
    "whiten_advantages",
    "whiten_rewards",
    "advantage_clip",
    "gamma",
    "lambd",
    "add_token_level_kl",
    "kl_penalty",
    "init_kl_coef",
    "target_kl",
    "kl_horizon",
    "use_kl_loss",
    "kl_loss_coef",
    "pg_clip",
    "use_pg_clip_range",
    "dual_clip_loss",
    "use_policy_loss_type",
    "entropy_loss_coef",
    "loss_agg_mode",
    "value_clip",
    "enable_reference",
    "enable_old_logprobs_recompute",
)


def _post_init(config: Any) -> Any:
    """The two rules of ``PPOConfig.__post_init__`` / ``set_old_logprobs_status`` the step
    reads (transcribed: the full config needs model and cluster settings)."""
    if config.use_kl_loss or config.init_kl_coef > 0:
        config.enable_reference = True
    if config.init_kl_coef > 0:
        config.enable_old_logprobs_recompute = True
    return config


def contract_settings(config: Any) -> dict[str, Any]:
    """The contract settings (``oracle.step.STEP_SETTINGS``) a ROLL config runs."""
    estimator = config.adv_estimator
    if estimator not in _ESTIMATORS:
        raise SetupError(f"ROLL adv_estimator {estimator!r} has no step binding")
    if estimator == "grpo" and config.whiten_advantages:
        raise SetupError("grpo with whiten_advantages has no step oracle")
    if config.dual_clip_loss or config.use_policy_loss_type != "PPO":
        raise SetupError("only the PPO loss without dual clip has a step binding")
    if config.kl_penalty not in _KL:
        raise SetupError(f"ROLL kl_penalty {config.kl_penalty!r} has no step binding")
    low = config.pg_clip_low if config.use_pg_clip_range else config.pg_clip
    high = config.pg_clip_high if config.use_pg_clip_range else config.pg_clip
    return {
        "estimator": _ESTIMATORS[estimator],
        "norm_adv_by_std": True,
        "gamma": float(config.gamma),
        "lam": float(config.lambd),
        "whiten_advantages": bool(config.whiten_advantages) if estimator != "grpo" else True,
        "kl_in_reward": bool(config.add_token_level_kl),
        "kl_in_reward_estimator": _KL[config.kl_penalty],
        "kl_coef": float(config.init_kl_coef),
        "kl_ctrl": "adaptive" if config.target_kl is not None else "fixed",
        "kl_target": float(config.target_kl) if config.target_kl is not None else 0.1,
        "kl_horizon": float(config.kl_horizon),
        "kl_loss": bool(config.use_kl_loss),
        "kl_loss_estimator": "k3",  # loss_func's kl_penalty="k3"
        "kl_loss_coef": float(config.kl_loss_coef),
        "policy_loss": "ppo_clip",
        "clip_low": float(low),
        "clip_high": float(high),
        "entropy_coeff": float(config.entropy_loss_coef),
        "loss_agg_mode": config.loss_agg_mode,
        "critic": estimator == "gae",
        "cliprange_value": None if config.value_clip is None else float(config.value_clip),
        "on_policy": not config.enable_old_logprobs_recompute,
    }


class _StepStrategy:
    """The strategy's model ops for one micro-batch: the leaves on ROLL's grid."""

    def __init__(self, log_probs: torch.Tensor, entropy: torch.Tensor | None):
        self.log_probs, self.entropy = log_probs, entropy

    def op_compute_log_probs(self, logits: Any, input_ids: Any, attention_mask: Any):
        return self.log_probs

    def op_compute_entropy(self, logits: Any, attention_mask: Any) -> torch.Tensor:
        return self.entropy


class StepOps:
    """The `step` operation of ROLL's RLVR pipeline (module docstring)."""

    step_metric_names = STEP_METRIC_NAMES

    def _roll_config(self, name: str) -> Any:
        cache = self.__dict__.setdefault("_roll_step_configs", {})
        if name not in cache:
            fields = dict(ROLL_STEP_CONFIGS).get(name)
            if fields is None:
                raise SetupError(f"ROLL declares no trainer config {name!r}")
            unknown = sorted(set(fields) - set(self.config_defaults))
            if unknown:
                raise SetupError(f"ROLL's RLVRConfig has no field {', '.join(unknown)}")
            config = self._config(**fields)
            config.train_infer_correction = self.config_module.TrainInferCorrectionConfig()
            cache[name] = _post_init(config)
        return cache[name]

    def trainer_configs(self) -> list[TrainerConfig]:
        """ROLL's default and named configs; none (no step binding) for a tree whose config
        lacks the fields the step reads (a stand-in, or a library-only fork)."""
        cached = self.__dict__.get("_roll_trainer_configs")
        if cached is None:
            cached = []
            if not set(_READS) <= set(self.config_defaults) or not hasattr(
                self.config_module, "TrainInferCorrectionConfig"
            ):
                self.__dict__["_roll_trainer_configs"] = cached
                return []
            for name, fields in ROLL_STEP_CONFIGS:
                config = self._roll_config(name)
                native = {
                    k: getattr(config, k)
                    for k in (
                        "adv_estimator",
                        "whiten_advantages",
                        "add_token_level_kl",
                        "use_kl_loss",
                        "init_kl_coef",
                        "loss_agg_mode",
                        "value_clip",
                        "enable_reference",
                        "enable_old_logprobs_recompute",
                    )
                }
                cached.append(
                    TrainerConfig(
                        name,
                        contract_settings(config),
                        native={**native, **fields},
                        source=f"roll {self.version} RLVRConfig defaults"
                        + (" with fields" if fields else ""),
                    )
                )
            self.__dict__["_roll_trainer_configs"] = cached
        return list(cached)

    def train_step(self, batch: StepBatch, config: TrainerConfig, state: Any = None) -> StepOutput:
        """step.update: one step of ROLL's RLVR pipeline on ``batch`` (module docstring)."""
        rows = len(batch.uids)
        if rows == 0:
            raise Inexpressible("a rollout of no samples: ROLL's pipeline never trains on one")
        if not torch.equal(batch.loss_mask.bool(), batch.response_mask.bool()):
            raise Inexpressible(
                "tool tokens inside a response: the RLVR pipeline is single-turn (the agentic "
                "pipeline, not bound for the step, trains multi-turn responses)"
            )
        sizes = {len(mb) for mb in batch.micro_batches}
        if len(sizes) != 1:
            raise Inexpressible(
                "micro-batches of different sizes: the strategy's make_iterator cuts the "
                "backward batch into per_device_train_batch_size rows"
            )
        order, group = _groups(batch.index)
        cfg = copy.copy(self._roll_config(config.name))
        cfg.actor_infer = types.SimpleNamespace(
            generating_args=types.SimpleNamespace(num_return_sequences=group)
        )
        controller = state if _is_controller(self, state) else _controller(self, cfg)
        F = self.F

        # the pipeline sorts by prompt_id: groups contiguous; rows here in that order
        perm = torch.tensor(order, dtype=torch.long)
        inverse = torch.argsort(perm)
        mask = batch.response_mask[perm]
        layout = self._layout(mask)
        grid = lambda x: layout.tokens_to_roll(x[perm], fill=0.0)  # noqa: E731
        fields = self._sequence_fields(layout, mask)
        old = grid(batch.old_log_probs.detach())
        tensors = {
            **fields,
            "input_ids": torch.zeros_like(fields["attention_mask"]),
            "responses": torch.zeros(
                (rows, layout.width - int(layout.prompt_lengths.min())), dtype=torch.long
            ),
            "response_level_rewards": batch.scores.detach()[perm].to(torch.float32),
            "scores": batch.scores.detach()[perm].to(torch.float32),
            "old_log_probs": old if cfg.enable_old_logprobs_recompute else torch.zeros_like(old),
            "prompt_id": torch.tensor([order.index(i) for i in order], dtype=torch.long),
        }
        tensors["ref_log_probs"] = (
            grid(batch.ref_log_probs.detach())
            if cfg.enable_reference
            else tensors["old_log_probs"].clone()
        )
        if config.resolved["critic"]:
            tensors["values"] = grid(batch.values.detach())
        data = self._proto(tensors)
        data, _ = F.get_sample_level_mask(data, cfg)
        data, _ = F.reward_postprocess(data, cfg, {})
        data, token_metrics = F.compute_token_reward(data, cfg, controller)
        final_mask = data.batch["final_response_mask"].clone()
        data = F.compute_advantage(
            data=data,
            gamma=cfg.gamma,
            lambd=cfg.lambd,
            adv_estimator=cfg.adv_estimator,
            advantage_clip=cfg.advantage_clip,
            whiten_advantages=cfg.whiten_advantages,
            whiten_rewards=cfg.whiten_rewards,
            response_mask=final_mask,
            pipeline_config=cfg,
        )
        data.meta_info["loss_mask_keys"] = ["response_mask", "final_response_mask"]
        if cfg.enable_old_logprobs_recompute:
            # the rollout engine's log-probs are the old ones here (a step batch has no
            # separate record): the train-infer statistics are those of ratio 1
            data.batch["infer_logprobs"] = data.batch["old_log_probs"].clone()
            data, _ = self.runtime.corrections.apply_train_infer_correction_to_batch(
                cfg, data, update_mask_keys=data.meta_info["loss_mask_keys"]
            )
        metrics: dict[str, float] = {k: float(v) for k, v in token_metrics.items()}
        micro = [[int(inverse[i]) for i in rows_] for rows_ in batch.micro_batches]
        value_loss = None
        if config.resolved["critic"]:
            value_loss, critic_metrics = self._train_step(
                data, micro, cfg, self._critic_loss(cfg), {"values": batch.vpreds}, layout, perm
            )
            metrics.update(critic_metrics)
        leaves = {"log_probs": batch.log_probs, "entropy": batch.entropy}
        loss, actor_metrics = self._train_step(
            data, micro, cfg, self._actor_loss(cfg), leaves, layout, perm
        )
        metrics.update(actor_metrics)
        stages = {
            "advantages": layout.tokens_from_roll(data.batch["advantages"])[inverse],
            "returns": layout.tokens_from_roll(data.batch["returns"])[inverse],
        }
        if cfg.adv_estimator != "grpo":
            # grpo normalises the scores in reward_postprocess, before they become token
            # rewards: ROLL's token rewards are then not the contract's stage
            stages["token_rewards"] = layout.tokens_from_roll(data.batch["token_level_rewards"])[
                inverse
            ]
        return StepOutput(
            loss=loss,
            value_loss=value_loss,
            stages={k: v.to(batch.log_probs.dtype) for k, v in stages.items()},
            metrics=metrics,
            state={"kl_coef": float(controller.value)},
            carry=controller,
        )

    # --- the workers' train_step ----------------------------------------------------

    def _actor_loss(self, cfg: Any) -> Any:
        worker = types.SimpleNamespace(pipeline_config=cfg, _logprobs_cache={}, logger=None)
        worker.get_old_log_probs_with_cache = types.MethodType(
            self.sources.get("old_log_probs"), worker
        )
        worker.compute_sample_weights = types.MethodType(
            self.sources.get("rlvr_sample_weights"), worker
        )
        worker.loss_func = types.MethodType(self.sources.get("rlvr_actor_loss"), worker)
        return worker

    def _critic_loss(self, cfg: Any) -> Any:
        worker = types.SimpleNamespace(pipeline_config=cfg)
        worker.forward_func_values = types.MethodType(self.sources.get("critic_values"), worker)
        worker.loss_func = types.MethodType(self.sources.get("critic_loss"), worker)
        return worker

    def _train_step(
        self,
        data: Any,
        micro: list[list[int]],
        cfg: Any,
        worker: Any,
        leaves: Mapping[str, torch.Tensor],
        layout: RollLayout,
        perm: torch.Tensor,
    ) -> tuple[float, dict[str, float]]:
        """``strategy.train_step`` over the backward batch: the counters on the whole batch,
        then per micro-batch ``loss_func``, ``loss * loss_scale / gradient_accumulation_steps``
        and ``backward``; then the worker's metric reduction."""
        final_mask = data.batch["final_response_mask"]
        tokens, samples, _ = self.counted(final_mask, None)
        response_tokens, response_samples, _ = self.counted(
            data.batch["response_mask"][:, 1:].to(final_mask.dtype), None
        )
        meta = {
            "batch_num_tokens": {"final_response_mask": tokens, "response_mask": response_tokens},
            "global_valid_samples": {
                "final_response_mask": samples,
                "response_mask": response_samples,
            },
        }
        steps = len(micro)
        loss_scale = steps * 1  # mini_steps * dp_size (one rank)
        total = 0.0
        collected: dict[str, list[float]] = {}
        for rows in micro:
            index = torch.tensor(rows, dtype=torch.long)
            part = data.select_idxs(index) if hasattr(data, "select_idxs") else data[index]
            part.meta_info.update(copy.deepcopy(meta))
            part.non_tensor_batch["sample_uuid"] = _uuids(rows)
            # the model's outputs for this micro-batch (a fresh graph to the leaves each time)
            if "values" in leaves:
                grid = layout.tokens_to_roll(leaves["values"][perm], fill=0.0).index_select(
                    0, index
                )
                output = torch.cat([grid, torch.zeros_like(grid[:, :1])], dim=-1).unsqueeze(-1)
            else:
                log_probs = layout.tokens_to_roll(leaves["log_probs"][perm], fill=0.0)
                entropy = layout.tokens_to_roll(leaves["entropy"][perm], fill=0.0)
                worker.strategy = _StepStrategy(
                    log_probs.index_select(0, index), entropy.index_select(0, index)
                )
                output = log_probs.index_select(0, index)
            loss, reduced = worker.loss_func(part, output)
            if getattr(cfg, "apply_loss_scale", True):
                loss = loss * loss_scale
            loss = loss / steps  # gradient_accumulation_steps
            loss.backward()
            total += float(loss.detach())
            for key, value in reduced.items():
                collected.setdefault(key, []).append(float(value))
        out = {}
        for key, values in collected.items():
            out[key] = sum(values) if key.endswith("@sum") else sum(values) / len(values)
        return total, out


def _uuids(rows: list[int]) -> Any:
    import numpy as np

    return np.array([f"rlc-{i}" for i in rows], dtype=object)


def _groups(index: Any) -> tuple[list[int], int]:
    """The permutation that makes groups contiguous (the pipeline sorts by prompt_id) and
    the common group size; groups of different sizes are inexpressible."""
    members: dict[Any, list[int]] = {}
    for i, label in enumerate(index):
        members.setdefault(label, []).append(i)
    sizes = {len(m) for m in members.values()}
    if len(sizes) != 1:
        raise Inexpressible(
            "groups of different sizes: every prompt has num_return_sequences responses"
        )
    return [i for m in members.values() for i in m], sizes.pop()


def _controller(target: Any, cfg: Any) -> Any:
    return target.kl_controller_module.get_kl_controller(
        init_kl_coef=cfg.init_kl_coef, target_kl=cfg.target_kl, kl_horizon=cfg.kl_horizon
    )


def _is_controller(target: Any, state: Any) -> bool:
    module = target.kl_controller_module
    return isinstance(state, module.AdaptiveKLController | module.FixedKLController)

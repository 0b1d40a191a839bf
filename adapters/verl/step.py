"""verl binding of the CONTRACT area `step`: one step of the v1 trainer (0.9.x), end to end.

The path, read from ``trainer/ppo/v1/trainer_base.py`` (``_step_once``) and the engine
workers:

1. samples live ragged in the TransferQueue: every field of sample i holds exactly its
   L_i response positions (nothing at padding exists); ``rm_scores`` is
   ``AgentLoopOutput.as_dict``'s placement of the score (the ``place_reward_last`` binding);
2. ``_compute_advantage`` fetches uid, response_mask, rm_scores, old_log_probs,
   ref_log_prob and values, pads them (``to_padded_tensor``: zeros after L_i), runs
   ``ray_trainer.apply_kl_penalty`` with the trainer's controller
   (``core_algos.get_kl_controller(algorithm.kl_ctrl)``, made once, carried across steps)
   when ``use_kl_in_reward``, then ``v1.utils.compute_advantage_for_multi_trajectories``
   with ``config=algorithm``, and writes advantages / returns back ragged
   (``response_to_nested``). Rollout correction runs only when the rollout recorded
   ``rollout_log_probs`` (a step batch carries none; its defaults ``rollout_is`` /
   ``rollout_rs`` are null);
3. ``_update_critic`` / ``_update_actor`` hand one mini-batch (``global_batch_size =
   ppo_mini_batch_size * rollout.n`` rows: here the whole batch) to the engine, whose
   ``forward_backward_batch`` sets ``batch_num_tokens`` (``loss_mask`` summed over the
   mini-batch and all-reduced over ranks) and ``dp_size`` and, per micro-batch, calls the
   loss function (``losses.ppo_loss`` / ``losses.value_loss``) on the model output and
   back-propagates its scalar. That bookkeeping is transcribed (as for ``agg_batch_info``:
   it needs a process group and a model); every number in it is verl's call.

The model is outside: the model output is the batch's leaf log-probs (entropies, values) as
verl's nested sequence output (one prompt token, then the L_i response positions; the loss
cuts the response with ``no_padding_2_padding``). Logged metrics go through verl's own
aggregation (``append_to_dict`` per micro-batch, ``Metric.aggregate_dp`` over the one rank,
``reduce_metrics``) and ``metric_utils.compute_data_metrics`` as ``_compute_metrics`` calls
it.

Trainer configs are verl's: ``default`` is ``trainer/config/_generated_ppo_trainer.yaml`` as
installed (GAE with a critic); each named config is a set of command-line overrides of it
(the options verl's example scripts set), and the contract settings are read off the
resulting config (``contract_settings``), never typed beside it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from rlconform.adapters.base import Inexpressible, SetupError
from rlconform.adapters.step_io import StepBatch, StepOutput
from rlconform.adapters.verl.imports import import_verl_module
from rlconform.conformance.trainer_config import TrainerConfig

_CONFIG_FILE = os.path.join("trainer", "config", "_generated_ppo_trainer.yaml")

# The named configs: overrides of the shipped defaults, as a user passes them to main_ppo.
VERL_STEP_CONFIGS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("default", {}),
    (
        "grpo_kl_loss",
        {
            "algorithm.adv_estimator": "grpo",
            "actor_rollout_ref.actor.use_kl_loss": True,
        },
    ),
    (
        "dr_grpo",
        {
            "algorithm.adv_estimator": "grpo",
            "algorithm.norm_adv_by_std_in_grpo": False,
            "actor_rollout_ref.actor.loss_agg_mode": "seq-mean-token-sum-norm",
        },
    ),
    (
        "rloo_entropy",
        {
            "algorithm.adv_estimator": "rloo",
            "actor_rollout_ref.actor.entropy_coeff": 0.01,
        },
    ),
    (
        "reinforce_pp_kl_in_reward",
        {
            "algorithm.adv_estimator": "reinforce_plus_plus",
            "algorithm.use_kl_in_reward": True,
            "algorithm.kl_ctrl.type": "adaptive",
            "algorithm.kl_ctrl.kl_coef": 0.05,
            "algorithm.kl_ctrl.target_kl": 0.01,
            "algorithm.kl_ctrl.horizon": 100,
            "actor_rollout_ref.actor.loss_agg_mode": "seq-mean-token-mean",
        },
    ),
    (
        "reinforce_pp_baseline_token_sum",
        {
            "algorithm.adv_estimator": "reinforce_plus_plus_baseline",
            "actor_rollout_ref.actor.loss_agg_mode": "seq-mean-token-sum",
        },
    ),
)

# verl's estimator names -> the contract's (the others have no step oracle)
_ESTIMATORS = {
    "gae": "gae",
    "grpo": "grpo",
    "rloo": "rloo",
    "reinforce_plus_plus": "reinforce_pp",
    "reinforce_plus_plus_baseline": "reinforce_pp_baseline",
}
_LOSS_MODES = {"vanilla": "ppo_clip"}

# contract metric -> verl's logged name
STEP_METRIC_NAMES = {
    "policy_loss": "actor/pg_loss",
    "entropy": "actor/entropy_loss",
    "kl_loss": "actor/kl_loss",
    "clip_fraction": "actor/pg_clipfrac",
    "value_loss": "critic/vf_loss",
    "value_clip_fraction": "critic/vf_clipfrac",
    "kl_in_reward": "actor/reward_kl_penalty",
    "advantages/mean": "critic/advantages/mean",
    "advantages/max": "critic/advantages/max",
    "advantages/min": "critic/advantages/min",
    "returns/mean": "critic/returns/mean",
    "returns/max": "critic/returns/max",
    "returns/min": "critic/returns/min",
    "score/mean": "critic/score/mean",
    "reward/mean": "critic/rewards/mean",
    "response_length/mean": "response_length/mean",
}


def shipped_config() -> Any:
    """verl's shipped trainer config (an OmegaConf ``DictConfig``)."""
    from omegaconf import OmegaConf

    verl = import_verl_module("verl")
    path = os.path.join(os.path.dirname(verl.__file__), _CONFIG_FILE)
    if not os.path.isfile(path):
        raise SetupError(f"verl's trainer config {path} is missing: cannot read its defaults")
    return OmegaConf.load(path)


def _with(overrides: Mapping[str, Any]) -> Any:
    from omegaconf import OmegaConf

    config = shipped_config()
    for key, value in overrides.items():
        if OmegaConf.select(config, key, default=KeyError) is KeyError:
            raise SetupError(f"verl trainer config has no key {key!r}")
        OmegaConf.update(config, key, value, merge=False)
    return config


def _kl_name(mode: str) -> str:
    from rlconform.oracle.kl import split_mode

    name, straight = split_mode(mode)
    return name + ("+" if straight else "")


def contract_settings(config: Any) -> dict[str, Any]:
    """The contract settings (``oracle.step.STEP_SETTINGS``) verl's ``config`` runs."""
    algo = config.algorithm
    actor = config.actor_rollout_ref.actor
    critic = config.critic
    if algo.adv_estimator not in _ESTIMATORS:
        raise SetupError(f"verl estimator {algo.adv_estimator!r} has no step binding")
    loss_mode = actor.policy_loss.loss_mode
    if loss_mode not in _LOSS_MODES:
        raise SetupError(f"verl policy loss {loss_mode!r} has no step binding")
    use_critic = bool(critic.enable) if critic.enable is not None else algo.adv_estimator == "gae"
    low = actor.clip_ratio_low if actor.clip_ratio_low is not None else actor.clip_ratio
    high = actor.clip_ratio_high if actor.clip_ratio_high is not None else actor.clip_ratio
    return {
        "estimator": _ESTIMATORS[algo.adv_estimator],
        "norm_adv_by_std": bool(algo.norm_adv_by_std_in_grpo),
        "gamma": float(algo.gamma),
        "lam": float(algo.lam),
        "kl_in_reward": bool(algo.use_kl_in_reward),
        "kl_in_reward_estimator": _kl_name(algo.kl_penalty),
        "kl_coef": float(algo.kl_ctrl.kl_coef),
        "kl_ctrl": str(algo.kl_ctrl.type),
        "kl_target": float(algo.kl_ctrl.target_kl),
        "kl_horizon": float(algo.kl_ctrl.horizon),
        "kl_loss": bool(actor.use_kl_loss),
        "kl_loss_estimator": _kl_name(actor.kl_loss_type),
        "kl_loss_coef": float(actor.kl_loss_coef),
        "policy_loss": _LOSS_MODES[loss_mode],
        "clip_low": float(low),
        "clip_high": float(high),
        "clip_ratio_c": float(actor.clip_ratio_c),
        "entropy_coeff": float(actor.entropy_coeff),
        "loss_agg_mode": str(actor.loss_agg_mode),
        # Dr. GRPO's constant: loss_scale_factor, else the longest response the rollout
        # generates (verl itself then divides by the micro-batch's padded width)
        "norm_length": (
            float(
                actor.loss_scale_factor
                if actor.loss_scale_factor is not None
                else config.data.max_response_length
            )
            if actor.loss_agg_mode == "seq-mean-token-sum-norm"
            else None
        ),
        "critic": use_critic,
        "cliprange_value": float(critic.cliprange_value),
    }


def _native(overrides: Mapping[str, Any], config: Any) -> dict[str, Any]:
    """The config's verl names for the report header: the overrides, and the defaults the
    step reads."""
    from omegaconf import OmegaConf

    keys = (
        "algorithm.adv_estimator",
        "algorithm.use_kl_in_reward",
        "actor_rollout_ref.actor.use_kl_loss",
        "actor_rollout_ref.actor.loss_agg_mode",
        "actor_rollout_ref.actor.policy_loss.loss_mode",
    )
    native = {key: OmegaConf.select(config, key) for key in keys}
    native.update(overrides)
    return native


def _backward_micro_batch(
    loss_fn: Any, outputs: dict[str, torch.Tensor], lengths: list[int], rows: list[int], data: Any
) -> tuple[float, dict[str, Any]]:
    """One micro-batch of the engine's ``forward_backward_batch``: the model output of
    ``rows`` (nested, as the engine gives it), the loss function on it and ``data``, then
    ``backward``; (the loss, its metrics)."""
    index = torch.tensor(rows, dtype=torch.long)
    model_output = {
        name: _model_output(tensor.index_select(0, index), [lengths[i] for i in rows])
        for name, tensor in outputs.items()
    }
    loss, metrics = loss_fn(model_output, data)
    loss.backward()
    return float(loss.detach()), metrics


def _gathered(per_micro: dict[str, Any]) -> dict[str, list[Any]]:
    """The micro-batch metrics of one data-parallel rank as the worker logs them: the
    all-gather gives each ``Metric`` a list of one rank's list (``Metric.aggregate_dp``),
    then ``append_to_dict``."""
    from verl.utils.metric.utils import Metric
    from verl.utils.py_functional import append_to_dict

    gathered = {
        key: Metric.aggregate_dp([values]) if isinstance(values, Metric) else list(values)
        for key, values in per_micro.items()
    }
    logged: dict[str, list[Any]] = {}
    append_to_dict(logged, gathered)
    return logged


def _lengths(response_mask: torch.Tensor) -> list[int]:
    return [int(n) for n in response_mask.sum(-1).tolist()]


def _ragged(tensor: torch.Tensor, lengths: Sequence[int]) -> torch.Tensor:
    """A (B, T) field as the TransferQueue stores it: row i cut to its L_i positions."""
    return torch.nested.as_nested_tensor(
        [tensor[i, :n] for i, n in enumerate(lengths)], layout=torch.jagged
    )


def _padded(rows: torch.Tensor, width: int) -> torch.Tensor:
    """A padded (B, L_max) tensor widened with zeros to the batch's width."""
    if rows.shape[-1] >= width:
        return rows[..., :width]
    return torch.nn.functional.pad(rows, (0, width - rows.shape[-1]))


def _model_output(values: torch.Tensor, lengths: Sequence[int]) -> torch.Tensor:
    """The model's sequence output for one micro-batch: per sample, the prompt token's
    position (the value of response token 0, which ``no_padding_2_padding`` reads there),
    then the L_i response positions (the last one is never read)."""
    rows = []
    for i, n in enumerate(lengths):
        row = values[i, :n]
        rows.append(torch.cat([row, values.new_zeros(1)]))
    return torch.nested.as_nested_tensor(rows, layout=torch.jagged)


class StepOps:
    """The `step` operation of verl's v1 trainer (module docstring)."""

    step_metric_names = STEP_METRIC_NAMES

    def trainer_configs(self) -> list[TrainerConfig]:
        """verl's default and named configs (read once per target); none where the release
        table (or the settings' subset of it) does not bind the step."""
        if "train_step" not in self.bindings:
            return []
        cached = self.__dict__.get("_verl_trainer_configs")
        if cached is None:
            cached = []
            for name, overrides in VERL_STEP_CONFIGS:
                config = self._verl_config_named(name)
                cached.append(
                    TrainerConfig(
                        name,
                        contract_settings(config),
                        native=_native(overrides, config),
                        source=f"verl {self.version} {_CONFIG_FILE}"
                        + (" with overrides" if overrides else ""),
                    )
                )
            self.__dict__["_verl_trainer_configs"] = cached
        return list(cached)

    def _verl_config(self, config: TrainerConfig) -> Any:
        return self._verl_config_named(config.name)

    def _verl_config_named(self, name: str) -> Any:
        """verl's config of the named config (read once per target; never mutated)."""
        cache = self.__dict__.setdefault("_verl_step_configs", {})
        if name not in cache:
            overrides = dict(VERL_STEP_CONFIGS).get(name)
            if overrides is None:
                raise SetupError(f"verl declares no trainer config {name!r}")
            cache[name] = _with(overrides)
        return cache[name]

    def _worker_config(self, config: TrainerConfig, role: str, batch: StepBatch) -> Any:
        """The worker's config dataclass for ``role`` ("actor" or "critic") and the batch's
        sizes (built once per config and sizes: the loss only writes its
        ``global_batch_info``, which every call sets again)."""
        sizes = (len(batch.uids), max(len(rows) for rows in batch.micro_batches))
        cache = self.__dict__.setdefault("_verl_worker_configs", {})
        key = (config.name, role, sizes)
        if key not in cache:
            verl_config = self._verl_config(config)
            node = verl_config.actor_rollout_ref.actor if role == "actor" else verl_config.critic
            cache[key] = _dataclass(node, *sizes)
        return cache[key]

    def train_step(self, batch: StepBatch, config: TrainerConfig, state: Any = None) -> StepOutput:
        """step.update: one step of the v1 trainer on ``batch`` (module docstring)."""
        from verl import DataProto

        rows = len(batch.uids)
        if rows == 0:
            raise Inexpressible(
                "a mini-batch of no samples: the v1 trainer samples a full batch from its "
                "replay buffer and never runs a step without one"
            )
        verl_config = self._verl_config(config)
        cfg = config.resolved
        algo = verl_config.algorithm
        width = batch.response_mask.shape[1]
        lengths = _lengths(batch.response_mask)
        controller = carried_controller(state, algo)
        metrics: dict[str, float] = {}

        # 1-2. the TransferQueue's ragged fields, fetched and padded by _compute_advantage
        rm_scores = self.place_reward_last(batch.scores, batch.response_mask, batch.loss_mask)
        fields = {
            "response_mask": batch.loss_mask,
            "rm_scores": rm_scores,
            "old_log_probs": batch.old_log_probs,
            "ref_log_prob": batch.ref_log_probs,
        }
        if cfg["critic"]:
            fields["values"] = batch.values
        stored = {k: _ragged(v.detach(), lengths) for k, v in fields.items()}
        padded = {k: v.to_padded_tensor(0.0) for k, v in stored.items()}
        from tensordict import TensorDict

        data = DataProto(batch=TensorDict(padded, batch_size=[rows]))
        data.batch["token_level_scores"] = data.batch["rm_scores"]
        data.non_tensor_batch["uid"] = np.array(list(batch.index), dtype=object)
        if algo.use_kl_in_reward:
            trainer = import_verl_module("verl.trainer.ppo.ray_trainer")
            data, kl_metrics = trainer.apply_kl_penalty(
                data, kl_ctrl=controller, kl_penalty=algo.kl_penalty
            )
            metrics.update({k: float(v) for k, v in kl_metrics.items()})
        else:
            data.batch["token_level_rewards"] = data.batch["token_level_scores"]
        v1 = import_verl_module("verl.trainer.ppo.v1.utils")
        keys = [f"{group}_{i}_0" for i, group in enumerate(batch.index)]
        data = v1.compute_advantage_for_multi_trajectories(
            data,
            batch_keys=keys,
            adv_estimator=algo.adv_estimator,
            gamma=algo.gamma,
            lam=algo.lam,
            num_repeat=verl_config.actor_rollout_ref.rollout.n,
            norm_adv_by_std_in_grpo=algo.get("norm_adv_by_std_in_grpo", True),
            config=algo,
        )
        padding = import_verl_module("verl.workers.utils.padding")
        nested_mask = stored["response_mask"]
        advantages = padding.response_to_nested(data.batch["advantages"], nested_mask)
        returns = padding.response_to_nested(data.batch["returns"], nested_mask)
        rewards = data.batch["token_level_rewards"]

        # 3. the critic, then the actor, over the engine's micro-batches
        value_loss = None
        if cfg["critic"]:
            value_loss, critic_metrics = self._critic_update(config, batch, stored, returns)
            metrics.update(critic_metrics)
        loss, actor_metrics = self._actor_update(config, batch, stored, advantages)
        metrics.update(actor_metrics)
        metrics.update(
            self._data_metrics(stored, rewards, advantages, returns, lengths, cfg["critic"], width)
        )
        stages = {
            "token_rewards": _padded(rewards, width),
            "advantages": _padded(advantages.to_padded_tensor(0.0), width),
            "returns": _padded(returns.to_padded_tensor(0.0), width),
        }
        state_out = (
            {"kl_coef": float(controller.value)}
            if controller is not None
            else {"kl_coef": float(algo.kl_ctrl.kl_coef)}
        )
        return StepOutput(
            loss=loss,
            value_loss=value_loss,
            stages=stages,
            metrics=metrics,
            state=state_out,
            carry=controller,
        )

    # --- the engine's mini-batch loop ------------------------------------------------

    def _micro_batch(
        self,
        rows: list[int],
        lengths: Sequence[int],
        fields: dict[str, torch.Tensor],
        batch_num_tokens: int,
        global_batch_size: int,
    ) -> Any:
        """One micro-batch as the engine hands it to the loss: nested prompts (one token)
        and responses, the ragged fields, and the mini-batch's bookkeeping."""
        from tensordict import TensorDict
        from verl.utils import tensordict_utils as tu

        picked = [lengths[i] for i in rows]
        prompts = torch.nested.as_nested_tensor(
            [torch.zeros(1, dtype=torch.int64) for _ in rows], layout=torch.jagged
        )
        responses = torch.nested.as_nested_tensor(
            [torch.zeros(n, dtype=torch.int64) for n in picked], layout=torch.jagged
        )
        selected = {
            name: torch.nested.as_nested_tensor(
                [value.unbind()[i] for i in rows], layout=torch.jagged
            )
            for name, value in fields.items()
        }
        data = TensorDict(
            {"prompts": prompts, "responses": responses, **selected}, batch_size=[len(rows)]
        )
        tu.assign_non_tensor(
            data,
            dp_size=1,
            batch_num_tokens=batch_num_tokens,
            global_batch_size=global_batch_size,
        )
        return data

    def _engine_loop(
        self, loss_fn: Any, batch: StepBatch, fields: dict[str, torch.Tensor], outputs: Any
    ) -> tuple[float, dict[str, Any]]:
        """``forward_backward_batch`` for one rank holding the whole mini-batch: per
        micro-batch the loss function on the model output, ``backward``; the micro-batch
        metrics aggregated as ``train_mini_batch`` and the trainer do."""
        from verl.utils.py_functional import append_to_dict

        lengths = _lengths(batch.response_mask)
        batch_num_tokens = int(batch.loss_mask.sum().item())
        total = 0.0
        per_micro: dict[str, Any] = {}
        for rows in batch.micro_batches:
            data = self._micro_batch(
                rows, lengths, fields, batch_num_tokens, global_batch_size=len(batch.uids)
            )
            loss, metrics = _backward_micro_batch(loss_fn, outputs, lengths, rows, data)
            total += loss
            append_to_dict(per_micro, metrics)
        return total, _gathered(per_micro)

    def _actor_update(
        self,
        config: TrainerConfig,
        batch: StepBatch,
        stored: dict[str, torch.Tensor],
        advantages: torch.Tensor,
    ) -> tuple[float, dict[str, float]]:
        from functools import partial

        from verl.workers.utils.losses import ppo_loss

        actor = self._verl_config(config).actor_rollout_ref.actor
        actor_config = self._worker_config(config, "actor", batch)
        fields = {
            "response_mask": stored["response_mask"],
            "old_log_probs": stored["old_log_probs"],
            "advantages": advantages,
        }
        if actor.use_kl_loss:
            fields["ref_log_prob"] = stored["ref_log_prob"]
        outputs = {"log_probs": batch.log_probs}
        if actor.calculate_entropy or actor.entropy_coeff != 0.0:
            outputs["entropy"] = batch.entropy
        loss_fn = partial(_call_loss, partial(ppo_loss, actor_config))
        loss, logged = self._engine_loop(loss_fn, batch, fields, outputs)
        return loss, _reduced(logged, "actor/")

    def _critic_update(
        self,
        config: TrainerConfig,
        batch: StepBatch,
        stored: dict[str, torch.Tensor],
        returns: torch.Tensor,
    ) -> tuple[float, dict[str, float]]:
        from functools import partial

        from verl.workers.utils.losses import value_loss

        critic_config = self._worker_config(config, "critic", batch)
        fields = {
            "response_mask": stored["response_mask"],
            "values": stored["values"],
            "returns": returns,
        }
        loss_fn = partial(_call_loss, partial(value_loss, critic_config))
        loss, logged = self._engine_loop(loss_fn, batch, fields, {"values": batch.vpreds})
        return loss, _reduced(logged, "critic/")

    def _data_metrics(
        self,
        stored: dict[str, torch.Tensor],
        rewards: torch.Tensor,
        advantages: torch.Tensor,
        returns: torch.Tensor,
        lengths: Sequence[int],
        use_critic: bool,
        width: int,
    ) -> dict[str, float]:
        """``metric_utils.compute_data_metrics`` on the batch ``_compute_metrics`` builds."""
        from tensordict import TensorDict
        from verl import DataProto
        from verl.trainer.ppo.metric_utils import compute_data_metrics

        rows = len(lengths)
        longest = max(lengths) if lengths else 0
        data = {
            "prompts": torch.zeros((rows, 1), dtype=torch.int64),
            "responses": torch.zeros((rows, longest), dtype=torch.int64),
            "response_mask": stored["response_mask"].to_padded_tensor(0),
            "rm_scores": stored["rm_scores"].to_padded_tensor(0.0),
            "token_level_rewards": rewards[:, :longest],
            "advantages": advantages.to_padded_tensor(0.0),
            "returns": returns.to_padded_tensor(0.0),
            "prompt_length": torch.ones(rows),
            "response_length": torch.tensor(lengths, dtype=torch.float32),
        }
        if use_critic:
            data["values"] = stored["values"].to_padded_tensor(0.0)
        data = {k: _widen(v, longest) for k, v in data.items()}
        data["token_level_scores"] = data["rm_scores"]
        proto = DataProto(batch=TensorDict(data, batch_size=[rows]))
        # verl logs a warning per call on a batch without action tokens (it returns NaN
        # statistics, which the metric clause compares); keep the certify console readable
        log = logging.getLogger("verl.trainer.ppo.metric_utils")
        level = log.level
        log.setLevel(logging.ERROR)
        try:
            logged = compute_data_metrics(batch=proto, use_critic=use_critic)
        finally:
            log.setLevel(level)
        return {k: float(v) for k, v in logged.items() if np.isscalar(v)}


def carried_controller(state: Any, algo: Any) -> Any:
    """The trainer's in-reward KL controller: the one the previous step left (``state``),
    else ``core_algos.get_kl_controller(algorithm.kl_ctrl)`` as the trainer makes it once
    (None when the KL is not in the reward)."""
    from verl.trainer.ppo import core_algos

    if isinstance(state, core_algos.FixedKLController | core_algos.AdaptiveKLController):
        return state
    return core_algos.get_kl_controller(algo.kl_ctrl) if algo.use_kl_in_reward else None


def _reduced(logged: dict[str, Any], prefix: str) -> dict[str, float]:
    """The trainer's ``reduce_metrics(rename_dict(metrics, prefix))``."""
    from verl.utils.metric import reduce_metrics
    from verl.utils.py_functional import rename_dict

    return {k: float(v) for k, v in reduce_metrics(rename_dict(logged, prefix)).items()}


def _dataclass(node: Any, mini_batch_size: int, micro_batch_size: int) -> Any:
    """verl's config dataclass of a worker's config node, as the worker builds it
    (``omega_conf_to_dataclass``), without the model to load (the loss never reads it), with
    the batch's sizes: the mini-batch is the whole batch, split into its micro-batches."""
    import copy

    from omegaconf import open_dict
    from verl.utils.config import omega_conf_to_dataclass

    node = copy.deepcopy(node)
    with open_dict(node):
        node.pop("model", None)
        node.ppo_mini_batch_size = mini_batch_size
        node.ppo_micro_batch_size_per_gpu = micro_batch_size
    return omega_conf_to_dataclass(node)


def _widen(tensor: torch.Tensor, longest: int) -> torch.Tensor:
    if tensor.dim() < 2 or tensor.shape[1] in (1, longest):
        return tensor
    return _padded(tensor, longest)


def _call_loss(loss: Any, model_output: dict[str, Any], data: Any) -> Any:
    return loss(model_output=model_output, data=data)

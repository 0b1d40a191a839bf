"""verl binding of the CONTRACT area `step` for the 0.7 line: one step of ``RayPPOTrainer.fit``
with the legacy FSDP workers (the default there).

The path, read from ``trainer/ppo/ray_trainer.py`` (``fit``) and the legacy workers
(``workers/actor/dp_actor.py``, ``workers/critic/dp_critic.py``):

1. the agent loop's padded batch: responses padded to ``data.max_response_length``,
   ``rm_scores`` from the ``place_reward_last`` binding (``AgentLoopWorker._postprocess``),
   the rollout's old and reference log-probs, the critic's values;
2. ``ray_trainer.apply_kl_penalty`` with the trainer's controller when
   ``use_kl_in_reward`` (``get_kl_controller``, made once and carried across steps), then
   ``ray_trainer.compute_advantage`` with the trainer's arguments, called as they are;
3. ``DataParallelPPOCritic.update_critic`` and ``DataParallelPPOActor.update_policy``,
   their real methods, on a worker object made with ``object.__new__`` (the constructor needs
   a process group) holding the config dataclass the worker builds
   (``omega_conf_to_dataclass``) with the batch's sizes. The model is outside:
   ``_forward_micro_batch`` returns the micro-batch's rows of the batch's leaf log-probs,
   entropies or values. The step is the last of two mini-batches of one update (the shipped
   config runs four: ``train_batch_size / ppo_mini_batch_size``), so ``update_policy``
   takes the stored old log-probs as a multi-mini-batch update does; the first mini-batch is
   a copy of the step's, and the optimizer stand-in keeps, at each ``step()``, the gradient
   the optimizer would apply: the leaves end with the step's own;
4. the logged metrics: ``update_policy`` / ``update_critic``'s dict through
   ``reduce_metrics`` as the worker and the trainer reduce it.
"""

from __future__ import annotations

import logging
import warnings
from typing import Any

import numpy as np
import torch

from rlconform.adapters.base import Inexpressible
from rlconform.adapters.step_io import StepBatch, StepOutput
from rlconform.adapters.verl.imports import import_verl_module
from rlconform.adapters.verl.step import VERL_STEP_CONFIGS, StepOps, carried_controller
from rlconform.conformance.trainer_config import TrainerConfig

STEP_METRIC_NAMES_V0 = {
    "policy_loss": "actor/pg_loss",
    "entropy": "actor/entropy",
    "kl_loss": "actor/kl_loss",
    "clip_fraction": "actor/pg_clipfrac",
    "value_loss": "critic/vf_loss",
    "value_clip_fraction": "critic/vf_clipfrac",
    "kl_in_reward": "actor/reward_kl_penalty",
}


class _Optimizer:
    """The optimizer the worker steps: ``step()`` keeps the leaves' gradient (what the
    optimizer would apply), ``zero_grad()`` clears the leaves."""

    def __init__(self, leaves: list[torch.Tensor]):
        self.leaves = leaves
        self.applied: list[torch.Tensor | None] = [None] * len(leaves)

    def step(self) -> None:
        self.applied = [None if t.grad is None else t.grad.detach().clone() for t in self.leaves]

    def zero_grad(self, set_to_none: bool = True) -> None:
        for leaf in self.leaves:
            leaf.grad = None

    def restore(self) -> None:
        for leaf, grad in zip(self.leaves, self.applied):
            leaf.grad = grad


def _split(micro_batches: list[list[int]]) -> int:
    """The micro-batch size ``DataProto.split`` cuts the mini-batch by: every micro-batch
    but the last holds it."""
    sizes = [len(mb) for mb in micro_batches]
    size = sizes[0]
    if any(s != size for s in sizes[:-1]) or sizes[-1] > size:
        raise Inexpressible(
            "micro-batches of unequal sizes other than a shorter last one: DataProto.split "
            "cuts the mini-batch into ppo_micro_batch_size_per_gpu rows"
        )
    return size


class V0StepOps(StepOps):
    """The `step` operation of the 0.7 trainer with legacy workers (module docstring)."""

    step_metric_names = STEP_METRIC_NAMES_V0

    def trainer_configs(self) -> list[TrainerConfig]:
        if "train_step" not in self.bindings:
            return []
        cached = self.__dict__.get("_verl_v0_trainer_configs")
        if cached is None:
            cached = [
                TrainerConfig(c.name, {**c.settings, "on_policy": False}, c.native, c.source)
                for c in StepOps.trainer_configs(self)
            ]
            self.__dict__["_verl_v0_trainer_configs"] = cached
        return list(cached)

    def train_step(self, batch: StepBatch, config: TrainerConfig, state: Any = None) -> StepOutput:
        """step.update: one step of ``RayPPOTrainer.fit`` on ``batch`` (module docstring)."""
        from verl import DataProto

        micro = _split(batch.micro_batches)
        data, controller, metrics, full = self._fit_advantage(batch, config, state)
        cfg = config.resolved
        two = DataProto.concat([data, data])  # a copy of the step's mini-batch, then the step's
        value_loss = None
        if cfg["critic"]:
            value_loss, critic_metrics = self._v0_critic(config, two, batch, micro, full)
            metrics.update(critic_metrics)
        loss, actor_metrics = self._v0_actor(config, two, batch, micro, full)
        metrics.update(actor_metrics)
        return self._fit_output(batch, config, data, controller, metrics, loss, value_loss)

    def _fit_advantage(
        self, batch: StepBatch, config: TrainerConfig, state: Any
    ) -> tuple[Any, Any, dict[str, float], int]:
        """``fit`` up to the workers' update: the agent loop's padded batch (responses padded
        to ``data.max_response_length``), ``apply_kl_penalty`` with the carried controller
        when ``use_kl_in_reward``, ``compute_advantage`` with the trainer's arguments.
        Returns the DataProto, the controller, the KL metrics and the padded width."""
        from tensordict import TensorDict
        from verl import DataProto

        rows = len(batch.uids)
        if rows == 0:
            raise Inexpressible("a mini-batch of no samples: the trainer never updates on one")
        verl_config = self._verl_config(config)
        cfg = config.resolved
        algo = verl_config.algorithm
        width = batch.response_mask.shape[1]
        full = max(int(verl_config.data.max_response_length), width)
        controller = carried_controller(state, algo)

        def wide(t: torch.Tensor) -> torch.Tensor:
            return torch.nn.functional.pad(t, (0, full - t.shape[-1]))

        rm_scores = self.place_reward_last(batch.scores, batch.response_mask, batch.loss_mask)
        tensors = {
            "prompts": torch.zeros((rows, 1), dtype=torch.long),
            "responses": torch.zeros((rows, full), dtype=torch.long),
            "response_mask": wide(batch.loss_mask.detach()),
            "attention_mask": torch.cat(
                [torch.ones((rows, 1), dtype=torch.long), wide(batch.response_mask).long()], -1
            ),
            "token_level_scores": wide(rm_scores.detach()),
            "old_log_probs": wide(batch.old_log_probs.detach()),
            "ref_log_prob": wide(batch.ref_log_probs.detach()),
        }
        tensors["input_ids"] = torch.zeros_like(tensors["attention_mask"])
        tensors["position_ids"] = torch.zeros_like(tensors["attention_mask"])
        if cfg["critic"]:
            tensors["values"] = wide(batch.values.detach())
        data = DataProto(batch=TensorDict(tensors, batch_size=[rows]))
        data.non_tensor_batch["uid"] = np.array(list(batch.index), dtype=object)
        metrics: dict[str, float] = {}
        trainer = import_verl_module("verl.trainer.ppo.ray_trainer")
        if algo.use_kl_in_reward:
            data, kl_metrics = trainer.apply_kl_penalty(
                data, kl_ctrl=controller, kl_penalty=algo.kl_penalty
            )
            metrics.update({k: float(v) for k, v in kl_metrics.items()})
        else:
            data.batch["token_level_rewards"] = data.batch["token_level_scores"]
        data = trainer.compute_advantage(
            data,
            adv_estimator=algo.adv_estimator,
            gamma=algo.gamma,
            lam=algo.lam,
            num_repeat=verl_config.actor_rollout_ref.rollout.n,
            norm_adv_by_std_in_grpo=algo.get("norm_adv_by_std_in_grpo", True),
            config=algo,
        )
        data.meta_info["temperature"] = 1.0
        return data, controller, metrics, full

    def _fit_output(
        self,
        batch: StepBatch,
        config: TrainerConfig,
        data: Any,
        controller: Any,
        metrics: dict[str, float],
        loss: float,
        value_loss: float | None,
    ) -> StepOutput:
        width = batch.response_mask.shape[1]
        algo = self._verl_config(config).algorithm
        stages = {
            "token_rewards": data.batch["token_level_rewards"][:, :width],
            "advantages": data.batch["advantages"][:, :width],
            "returns": data.batch["returns"][:, :width],
        }
        state_out = {
            "kl_coef": float(controller.value)
            if controller is not None
            else float(algo.kl_ctrl.kl_coef)
        }
        return StepOutput(
            loss=loss,
            value_loss=value_loss,
            stages=stages,
            metrics=metrics,
            state=state_out,
            carry=controller,
        )

    # --- the legacy workers -----------------------------------------------------------

    def _v0_worker(self, cls: Any, role: str, config: TrainerConfig, rows: int, micro: int) -> Any:
        from verl.utils.config import omega_conf_to_dataclass

        verl_config = self._verl_config(config)
        node = verl_config.actor_rollout_ref.actor if role == "actor" else verl_config.critic
        from rlconform.adapters.verl.step import _dataclass

        worker = object.__new__(cls)
        worker.config = (
            _dataclass(node, rows, micro) if role == "actor" else _critic(node, rows, micro)
        )
        worker.scaler = None
        worker.use_dynamic_bsz = False
        worker.use_prefix_grouper = False
        worker.use_remove_padding = False
        worker.use_fused_kernels = False
        worker.ulysses_sequence_parallel_size = 1
        worker.use_ulysses_sp = False
        _ = omega_conf_to_dataclass
        return worker

    def _v0_actor(
        self, config: TrainerConfig, data: Any, batch: StepBatch, micro: int, full: int
    ) -> tuple[float, dict[str, float]]:
        from verl.workers.actor.dp_actor import DataParallelPPOActor

        rows = len(batch.uids)
        worker = self._v0_worker(DataParallelPPOActor, "actor", config, rows, micro)
        worker.actor_module = torch.nn.Module()
        optimizer = _Optimizer([batch.log_probs, batch.entropy])
        worker.actor_optimizer = optimizer
        calls = {"n": 0}

        def forward(micro_batch: dict, temperature: float, calculate_entropy: bool = False):
            index = calls["n"]
            calls["n"] += 1
            size = micro_batch["responses"].shape[0]
            start = (index % -(-rows // micro)) * micro  # position in its mini-batch
            rows_ = torch.arange(start, start + size)
            pad = full - batch.log_probs.shape[1]
            out = {
                "log_probs": torch.nn.functional.pad(
                    batch.log_probs.index_select(0, rows_), (0, pad)
                )
            }
            if calculate_entropy:
                out["entropys"] = torch.nn.functional.pad(
                    batch.entropy.index_select(0, rows_), (0, pad)
                )
            return out

        worker._forward_micro_batch = forward
        with _quiet(), _recorded_backward() as losses:
            logged = worker.update_policy(data)
        optimizer.restore()
        return _last_mini_batch(losses, rows, micro), _reduced_v0(logged)

    def _v0_critic(
        self, config: TrainerConfig, data: Any, batch: StepBatch, micro: int, full: int
    ) -> tuple[float, dict[str, float]]:
        from verl.workers.critic.dp_critic import DataParallelPPOCritic

        rows = len(batch.uids)
        worker = self._v0_worker(DataParallelPPOCritic, "critic", config, rows, micro)
        worker.critic_module = torch.nn.Module()
        optimizer = _Optimizer([batch.vpreds])
        worker.critic_optimizer = optimizer
        calls = {"n": 0}

        def forward(micro_batch: dict):
            index = calls["n"]
            calls["n"] += 1
            size = micro_batch["responses"].shape[0]
            start = (index % -(-rows // micro)) * micro  # position in its mini-batch
            rows_ = torch.arange(start, start + size)
            return torch.nn.functional.pad(
                batch.vpreds.index_select(0, rows_), (0, full - batch.vpreds.shape[1])
            )

        worker._forward_micro_batch = forward
        with _quiet(), _recorded_backward() as losses:
            logged = worker.update_critic(data)
        optimizer.restore()
        return _last_mini_batch(losses, rows, micro), _reduced_v0(logged)


def _critic(node: Any, rows: int, micro: int) -> Any:
    """The fields of the critic's config ``update_critic`` reads, from the trainer's config
    node (its dataclass would load the critic model's HF config at construction)."""
    from types import SimpleNamespace

    keys = (
        "ppo_epochs",
        "use_dynamic_bsz",
        "ppo_max_token_len_per_gpu",
        "cliprange_value",
        "loss_agg_mode",
        "grad_clip",
    )
    fields = {k: node[k] for k in keys}
    return SimpleNamespace(**fields, ppo_mini_batch_size=rows, ppo_micro_batch_size_per_gpu=micro)


class _recorded_backward:
    """Record the value of every tensor the worker calls ``backward`` on (its micro-batch
    losses as verl scales them), then back-propagate it as verl does."""

    def __enter__(self) -> list[float]:
        self.original = torch.Tensor.backward
        recorded: list[float] = []
        original = self.original

        def backward(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            recorded.append(float(tensor.detach()))
            return original(tensor, *args, **kwargs)

        torch.Tensor.backward = backward
        return recorded

    def __exit__(self, *exc: Any) -> bool:
        torch.Tensor.backward = self.original
        return False


def _last_mini_batch(losses: list[float], rows: int, micro: int) -> float:
    """The loss back-propagated by the step's own mini-batch (the second of the two)."""
    per_mini_batch = -(-rows // micro)
    return sum(losses[-per_mini_batch:])


def _reduced_v0(logged: dict[str, Any]) -> dict[str, float]:
    from verl.utils.metric import reduce_metrics

    return {k: float(v) for k, v in reduce_metrics(logged).items()}


class _quiet:
    """verl logs per worker call, and clip_grad_norm_ warns that the stand-in module has no
    parameters (the model is outside): keep the certify console readable."""

    def __enter__(self) -> None:
        self.level = logging.getLogger("verl").level
        logging.getLogger("verl").setLevel(logging.ERROR)
        self.warnings = warnings.catch_warnings()
        self.warnings.__enter__()
        warnings.filterwarnings("ignore", message=".*empty generator.*", category=UserWarning)

    def __exit__(self, *exc: Any) -> bool:
        self.warnings.__exit__(*exc)
        logging.getLogger("verl").setLevel(self.level)
        return False


__all__ = ["V0StepOps", "VERL_STEP_CONFIGS"]

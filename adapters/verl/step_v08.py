"""verl binding of the CONTRACT area `step` for the 0.8 line: one step of ``RayPPOTrainer.fit``
with the engine workers (the only workers 0.8 has).

The path, read from ``trainer/ppo/ray_trainer.py`` (``fit``, ``_update_actor``,
``_update_critic``), ``workers/engine_workers.py`` and ``workers/engine/fsdp/
transformer_impl.py`` (``forward_backward_batch``):

1-2. as for 0.7 (``step_v0``): the agent loop's batch padded to ``data.max_response_length``,
   ``apply_kl_penalty`` with the carried controller when ``use_kl_in_reward``, then
   ``ray_trainer.compute_advantage`` with the trainer's arguments;
3. ``_update_critic`` / ``_update_actor`` convert the padded batch with
   ``left_right_2_no_padding`` (only the model inputs become nested, every loss field stays
   padded to the full width, ``loss_mask`` is ``response_mask``; transcribed, as its packing
   imports flash_attn) and set
   ``global_batch_size = ppo_mini_batch_size * rollout.n`` (here the whole batch: one
   mini-batch, one epoch). The engine's ``forward_backward_batch`` sets
   ``batch_num_tokens`` (``loss_mask`` summed, all-reduced over the one rank) and
   ``dp_size``, cuts the micro-batches with verl's ``prepare_micro_batches``
   (``use_dynamic_bsz`` false, the default: equal chunks of
   ``ppo_micro_batch_size_per_gpu`` rows) and, per micro-batch, calls ``losses.ppo_loss`` /
   ``losses.value_loss`` on the model output and back-propagates the scalar unscaled. That
   loop is transcribed (it needs a process group and a model); every number in it is verl's
   call.

The model is outside: its output is the batch's leaf log-probs (entropies, values) as the
engine's nested sequence output, which the loss cuts with ``no_padding_2_padding``. Logged
metrics: the micro-batch metrics through ``append_to_dict``, ``Metric.aggregate_dp`` over the
one rank and ``reduce_metrics``, as the worker and ``_update_actor`` do.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from rlconform.adapters.base import Inexpressible
from rlconform.adapters.step_io import StepBatch, StepOutput
from rlconform.adapters.verl.step import (
    _backward_micro_batch,
    _call_loss,
    _gathered,
    _lengths,
    _reduced,
)
from rlconform.adapters.verl.step_v0 import V0StepOps, _quiet
from rlconform.conformance.trainer_config import TrainerConfig

STEP_METRIC_NAMES_V08 = {
    "policy_loss": "actor/pg_loss",
    "entropy": "actor/entropy_loss",
    "kl_loss": "actor/kl_loss",
    "clip_fraction": "actor/pg_clipfrac",
    "value_loss": "critic/vf_loss",
    "value_clip_fraction": "critic/vf_clipfrac",
    "kl_in_reward": "actor/reward_kl_penalty",
}


def _chunk_size(micro_batches: list[list[int]]) -> int:
    """``ppo_micro_batch_size_per_gpu``: ``prepare_micro_batches`` cuts the mini-batch into
    equal chunks (it asserts that the size divides the mini-batch)."""
    sizes = {len(rows) for rows in micro_batches}
    if len(sizes) != 1:
        raise Inexpressible(
            "micro-batches of unequal sizes: verl 0.8's engine cuts a mini-batch into equal "
            "chunks of ppo_micro_batch_size_per_gpu rows (use_dynamic_bsz false, the default)"
        )
    return sizes.pop()


class V08StepOps(V0StepOps):
    """The `step` operation of the 0.8 trainer on the engine workers (module docstring)."""

    step_metric_names = STEP_METRIC_NAMES_V08

    def train_step(self, batch: StepBatch, config: TrainerConfig, state: Any = None) -> StepOutput:
        """step.update: one step of ``RayPPOTrainer.fit`` on ``batch`` (module docstring)."""
        micro = _chunk_size(batch.micro_batches)
        data, controller, metrics, _ = self._fit_advantage(batch, config, state)
        cfg = config.resolved
        actor = self._verl_config(config).actor_rollout_ref.actor
        value_loss = None
        if cfg["critic"]:
            value_loss, logged = self._engine_update(
                partial(
                    _call_loss,
                    partial(_losses().value_loss, self._worker_config(config, "critic", batch)),
                ),
                data,
                batch,
                micro,
                {"values": batch.vpreds},
            )
            metrics.update(_reduced(logged, "critic/"))
        outputs = {"log_probs": batch.log_probs}
        if actor.calculate_entropy or actor.entropy_coeff != 0.0:
            outputs["entropy"] = batch.entropy
        loss, logged = self._engine_update(
            partial(
                _call_loss, partial(_losses().ppo_loss, self._worker_config(config, "actor", batch))
            ),
            data,
            batch,
            micro,
            outputs,
        )
        metrics.update(_reduced(logged, "actor/"))
        return self._fit_output(batch, config, data, controller, metrics, loss, value_loss)

    def _engine_update(
        self, loss_fn: Any, data: Any, batch: StepBatch, micro: int, outputs: dict[str, Any]
    ) -> tuple[float, dict[str, Any]]:
        """``_update_actor`` / ``_update_critic`` and the engine's ``forward_backward_batch``
        for one rank holding the whole mini-batch (module docstring)."""
        from verl.utils import tensordict_utils as tu
        from verl.utils.py_functional import append_to_dict
        from verl.workers.engine.utils import prepare_micro_batches

        rows = len(batch.uids)
        batch_td = _no_padding(data.to_tensordict())
        tu.assign_non_tensor(batch_td, global_batch_size=rows, mini_batch_size=rows)
        batch_num_tokens = int(batch_td["loss_mask"].sum().item())
        tu.assign_non_tensor(
            batch_td,
            batch_num_tokens=batch_num_tokens,
            dp_size=1,
            use_dynamic_bsz=False,
            micro_batch_size_per_gpu=micro,
        )
        micro_batches, _ = prepare_micro_batches(batch_td)
        lengths = _lengths(batch.response_mask)
        total = 0.0
        per_micro: dict[str, Any] = {}
        start = 0
        with _quiet():
            for micro_batch in micro_batches:
                picked = list(range(start, start + len(micro_batch)))
                start += len(micro_batch)
                loss, metrics = _backward_micro_batch(
                    loss_fn, outputs, lengths, picked, micro_batch
                )
                total += loss
                append_to_dict(per_micro, metrics)
        return total, _gathered(per_micro)


def _no_padding(batch_td: Any) -> Any:
    """What ``left_right_2_no_padding`` does to the fields the losses read: ``loss_mask`` is
    ``response_mask``, every other field stays padded, the widths are recorded. Its packing
    of ``input_ids`` / ``position_ids`` (the model's inputs, outside here) goes through
    ``unpad_input``, which imports flash_attn (CUDA only), so it is transcribed, not called."""
    from verl.utils import tensordict_utils as tu

    tu.assign_non_tensor_data(batch_td, "max_seq_len", batch_td["input_ids"].shape[1])
    tu.assign_non_tensor_data(batch_td, "max_response_len", batch_td["response_mask"].shape[1])
    batch_td.pop("input_ids")
    batch_td.pop("position_ids")
    batch_td["loss_mask"] = batch_td["response_mask"]
    return batch_td


def _losses() -> Any:
    from rlconform.adapters.verl.imports import import_verl_module

    return import_verl_module("verl.workers.utils.losses")


__all__ = ["V08StepOps"]

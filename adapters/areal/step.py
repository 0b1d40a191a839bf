"""AReaL binding of the CONTRACT area `step`: one optimizer step of AReaL's PPO trainer.

The path, read from ``areal/trainer/rl_trainer.py`` and ``areal/trainer/ppo/actor.py``:

1. the rollout batch is a list of trajectory dicts (``input_ids``, ``attention_mask``,
   ``loss_mask``, the inference engine's ``logprobs`` in raw token coordinates, the outcome
   ``rewards``); the reference model's ``compute_logp`` adds ``ref_logp`` per trajectory
   (rolled coordinates: column t is the log-prob of token t + 1);
2. ``actor.compute_advantages(batch)`` (called as is: ``batched_call`` concatenates and
   right-pads the trajectories to the longest, ``_compute_advantages`` does reward bias /
   scale / clip, ``reward_norm``, the KL reward, the placement at ``seqlens - 2`` and the
   GAE loop, then the result is split and unpadded per trajectory);
3. ``actor.ppo_update(batch)`` (called as is): ``_ppo_update`` splits the batch into
   ``ppo_n_minibatches`` minibatches, each its own optimizer step; the binding sets it to 1,
   so the step batch is one minibatch (AReaL's default of 4 runs four such steps on
   advantages computed over the whole rollout batch; without a batch-level normalisation
   the advantages are the same), and hands it to ``engine.train_batch(mb,
   loss_fn=partial(grpo_loss_fn, ...), loss_weight_fn=loss_mask.count_nonzero())``.

``train_batch`` is the real ``FSDPEngine.train_batch`` on an engine object holding what it
reads (``standin_engine``): it runs ``_prepare_mb_list`` (split into ``mb_spec.n_mbs``
micro-batches balanced by tokens, packing, padding), ``compute_total_loss_weight`` (the
all-reduced total loss weight, on a one-process gloo group), ``forward_backward_batch``
(backward per micro-batch) and ``_compute_logprobs_and_loss`` (each micro-batch's loss
times its weight over the total, times the dp size). The model is outside: the stand-in
model returns dummy logits and the engine's ``_compute_logprobs_entropy`` is replaced by
one that reads the batch's leaf log-probs and entropies at the packed positions (each
token id encodes its row and column); the optimizer step is a no-op (the harness reads the
gradients). The loss the step back-propagated is recorded from ``_compute_logprobs_and_loss``.

Trainer configs are ``PPOActorConfig`` fields: ``default`` is ``PPOActorConfig()`` as
installed, with a reference model configured (``PPOConfig.ref``; without one AReaL trains
against reference log-probs of 0, see the report's notes), each named config a set of
fields; the contract settings are read off the config (``contract_settings``).
"""

from __future__ import annotations

import importlib
import logging
import os
import tempfile
import types
from collections.abc import Mapping
from typing import Any

import torch

from rlconform.adapters.areal.advantage import _group_order
from rlconform.adapters.base import Inexpressible, SetupError
from rlconform.adapters.step_io import StepBatch, StepOutput
from rlconform.conformance.trainer_config import TrainerConfig

# What the model computes at the position after a sample's last token (loss_mask 0 there).
AFTER_LOGPROB = -1.0

_GROUP_NORM = {"mean_level": "group", "std_level": "group"}

# The named configs: PPOActorConfig fields over its defaults. ``reward_norm`` is a NormConfig
# made at step time (its group_size is the batch's group size).
AREAL_STEP_CONFIGS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("default", {}),
    ("grpo", {"reward_norm": _GROUP_NORM, "kl_ctl": 0.0}),
    ("dr_grpo", {"reward_norm": {"mean_level": "group", "std_level": None}, "kl_ctl": 0.0}),
    ("grpo_dual_clip", {"reward_norm": _GROUP_NORM, "kl_ctl": 0.0, "c_clip": 3.0}),
    ("grpo_clip_higher", {"reward_norm": _GROUP_NORM, "kl_ctl": 0.0, "eps_clip_higher": 0.28}),
    # every sample of the cases ends with its EOS (max_new_tokens is far above the longest):
    # the option must change nothing
    (
        "grpo_mask_no_eos",
        {"reward_norm": _GROUP_NORM, "kl_ctl": 0.0, "mask_no_eos_with_zero": True},
    ),
)

# Options with no step oracle: (field, the value the binding supports).
_FIXED = (
    ("use_sapo_loss", False),
    ("importance_sampling_level", "token"),
    ("m2_threshold", None),
    ("rejection_sampling", None),
    ("overlong_reward_penalty", False),
    ("use_decoupled_loss", False),
    ("recompute_logprob", False),
    ("adv_norm", None),
    ("reward_bias", 0.0),
    ("reward_scaling", 1.0),
    ("is_critic", False),
)


def contract_settings(config: Any) -> dict[str, Any]:
    """The contract settings (``oracle.step.STEP_SETTINGS``) a ``PPOActorConfig`` runs."""
    for field, supported in _FIXED:
        if getattr(config, field) != supported:
            raise SetupError(f"AReaL {field}={getattr(config, field)!r} has no step binding")
    norm = config.reward_norm
    if norm is None:
        # no normalisation, no critic: the GAE loop with values 0 sums the token rewards
        estimator: dict[str, Any] = {
            "estimator": "reinforce_pp",
            "whiten_advantages": False,
            "gamma": float(config.discount),
        }
        if config.gae_lambda != 1.0:
            raise SetupError("gae_lambda != 1 without a critic has no step oracle")
    else:
        if (norm.mean_level, norm.mean_leave1out) != ("group", False):
            raise SetupError(f"reward_norm {norm} has no step oracle (group mean only)")
        if norm.std_level not in ("group", None) or (config.discount, config.gae_lambda) != (
            1.0,
            1.0,
        ):
            raise SetupError(f"reward_norm {norm} with discount/gae_lambda has no step oracle")
        if config.kl_ctl != 0.0:
            raise SetupError("GRPO (group reward_norm) with a KL reward has no step oracle")
        estimator = {"estimator": "grpo", "norm_adv_by_std": norm.std_level is not None}
    high = config.eps_clip_higher if config.eps_clip_higher is not None else config.eps_clip
    return {
        **estimator,
        "kl_in_reward": config.kl_ctl != 0.0,
        "kl_in_reward_estimator": config.kl_estimator,
        "kl_coef": float(config.kl_ctl),
        "kl_ctrl": "fixed",
        "kl_loss": False,
        "policy_loss": "ppo_clip",
        "clip_low": float(config.eps_clip),
        "clip_high": float(high),
        "clip_ratio_c": None if config.c_clip is None else float(config.c_clip),
        "entropy_coeff": 0.0,  # grpo_loss_fn detaches the entropy
        "loss_agg_mode": "token-mean",  # each loss / all-reduced loss-mask count
        "critic": False,
        "on_policy": False,  # the inference engine's log-probs are the old ones
    }


# --- the engine the actor trains with ----------------------------------------------------


class _Model(torch.nn.Module):
    """Returns logits of the right length; the log-probs come from the leaves (module
    docstring). One zero parameter keeps ``logits.mean() * 0.0`` (the engine's branch for
    a micro-batch without a loss token) differentiable."""

    def __init__(self) -> None:
        super().__init__()
        self.anchor = torch.nn.Parameter(torch.zeros(()))

    def forward(self, input_ids: torch.Tensor, **_: Any) -> Any:
        n = input_ids.shape[-1]
        return types.SimpleNamespace(logits=self.anchor.expand(1, n, 2))


class _Optimizer:
    def zero_grad(self, set_to_none: bool = True) -> None:
        """The model's parameters are not the leaves the harness reads."""


def _process_group() -> None:
    """A one-process gloo group (``compute_total_loss_weight`` all-reduces; the engine logs
    its rank)."""
    import torch.distributed as dist

    if dist.is_initialized():
        return
    handle, path = tempfile.mkstemp(prefix="rlconform-areal-pg-")
    os.close(handle)
    os.unlink(path)
    dist.init_process_group("gloo", init_method=f"file://{path}", rank=0, world_size=1)


class _Leaves:
    """The batch's leaf log-probs and entropies, read at the engine's packed positions.

    Trajectory ``r`` (the data row) has token ids ``1 + r * width + c`` at its raw columns
    c (0 is padding); the rolled log-prob at raw column c is the prediction of token c + 1,
    the sample's response token c for c < L, and the position after its last token for
    c = L."""

    def __init__(self, rows: list[int], lengths: list[int], width: int, logp: Any, ent: Any):
        self.rows, self.lengths, self.width = rows, lengths, width
        self.logp, self.ent = logp, ent

    def gather(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        flat = ids.reshape(-1).tolist()
        logps, ents = [], []
        zero = self.logp.new_zeros(())
        for token in flat:
            if token == 0:
                logps.append(zero)
                ents.append(zero)
                continue
            position, column = divmod(token - 1, self.width)
            row = self.rows[position]
            if column < self.lengths[row]:
                logps.append(self.logp[row, column])
                ents.append(self.ent[row, column])
            else:
                logps.append(zero + AFTER_LOGPROB)
                ents.append(zero)
        if not logps:
            return self.logp.new_zeros((0,)), self.ent.new_zeros((0,))
        return torch.stack(logps).float(), torch.stack(ents).float()


def _fsdp_engine(runtime: Any) -> Any:
    try:
        return importlib.import_module("areal.engine.fsdp_engine")
    except ModuleNotFoundError as exc:
        raise SetupError(
            f"AReaL {runtime.version}: the step binding imports areal.engine.fsdp_engine, "
            f"which needs the missing module {exc.name!r}: pip install -e '.[areal]'"
        ) from None


def standin_engine(runtime: Any, config: Any, leaves: _Leaves, losses: list[float]) -> Any:
    """``FSDPEngine`` without ``__init__``: the attributes ``train_batch`` reads (module
    docstring); its own methods run, except the log-prob gather, the optimizer step and the
    model."""
    import torch.distributed as dist

    fsdp = _fsdp_engine(runtime)
    _process_group()
    engine = object.__new__(fsdp.FSDPEngine)
    engine.config = config
    engine.is_offload = False
    engine.enable_tree_training = False
    engine.is_vision_model = False
    engine.model_config = types.SimpleNamespace(model_type="qwen2")
    engine.parallel_helper = types.SimpleNamespace(dp_size=1, sp_size=1, tp_size=1)
    engine.dp_group = dist.group.WORLD
    engine.logger = logging.getLogger("rlconform.areal.engine")
    engine.logger.setLevel(logging.WARNING)
    engine.device = torch.device("cpu")
    engine._version = 0
    engine.model = _Model()
    engine.optimizer = _Optimizer()

    def logprobs_entropy(logits: Any, inputs: Mapping[str, Any], ulysses_pad_size: int = 0):
        return leaves.gather(inputs["input_ids"])

    def optimizer_step() -> dict[str, float]:
        return {"update_successful": 1.0, "grad_norm": float("nan"), "lr": 0.0}

    scaled = fsdp.FSDPEngine._compute_logprobs_and_loss

    def logprobs_and_loss(*args: Any, **kwargs: Any) -> torch.Tensor:
        loss = scaled(engine, *args, **kwargs)
        losses.append(float(loss.detach()))
        return loss

    engine._compute_logprobs_entropy = logprobs_entropy
    engine.optimizer_step = optimizer_step
    engine._compute_logprobs_and_loss = logprobs_and_loss
    return engine


# --- the step ---------------------------------------------------------------------------


# operations AReaL's trainer runs under options no step config covers (their findings are
# unmeasured, not unreached: conformance.consequence.unbound)
STEP_UNBOUND_OPS = {
    "advantage_gae": "a critic (PPOCritic.compute_values; no critic in the step yet)",
    "value_loss": "a critic (PPOCritic.ppo_update; no critic in the step yet)",
    "gspo_loss": "importance_sampling_level='sequence' (no step config binds it yet)",
    **{
        op: "use_decoupled_loss=True with rejection_sampling (no step config binds it yet)"
        for op in ("tis_weights", "icepop_weights", "is_correction_weights")
    },
}


class StepOps:
    """The `step` operation of AReaL's PPO trainer (module docstring)."""

    step_unbound_ops = STEP_UNBOUND_OPS
    runtime: Any
    version: str
    step_logs_metrics = False  # stats_tracker's export is not bound yet
    step_configs: tuple[tuple[str, dict[str, Any]], ...] = AREAL_STEP_CONFIGS

    def _actor_config(self, fields: Mapping[str, Any], group_size: int = 1) -> Any:
        cli = self.runtime.cli_args
        options = dict(fields)
        norm = options.pop("reward_norm", None)
        if norm is not None:
            options["reward_norm"] = cli.NormConfig(**norm, group_size=group_size)
        return cli.PPOActorConfig(experiment_name="rlconform", trial_name="rlconform", **options)

    def trainer_configs(self) -> list[TrainerConfig]:
        cached = self.__dict__.get("_areal_trainer_configs")
        if cached is None:
            cached = []
            for name, fields in self.step_configs:
                config = self._actor_config(fields)
                cached.append(
                    TrainerConfig(
                        name,
                        contract_settings(config),
                        native=_native(fields, config),
                        source=f"areal {self.version} PPOActorConfig()"
                        + (" with fields" if fields else "")
                        + ", a reference model configured",
                        # the KL reward is -kl_ctl * KLEstimator(old, ref): the estimator
                        # the kl_penalty binding calls (PPOActor.__init__ builds it)
                        extra_ops=("kl_penalty",) if config.kl_ctl != 0.0 else (),
                    )
                )
            self.__dict__["_areal_trainer_configs"] = cached
        return list(cached)

    def train_step(self, batch: StepBatch, config: TrainerConfig, state: Any = None) -> StepOutput:
        """step.update: one optimizer step of AReaL's PPO trainer (module docstring)."""
        fields = dict(self.step_configs).get(config.name)
        if fields is None:
            raise SetupError(f"AReaL declares no trainer config {config.name!r}")
        rows = len(batch.uids)
        if rows == 0:
            raise Inexpressible("AReaL's rollout batch holds at least one trajectory")
        lengths = [int(n) for n in batch.response_mask.sum(-1).tolist()]
        if "reward_norm" in fields:
            order, group_size = _group_order(batch.index, rows)
        else:
            order, group_size = list(range(rows)), 1
        actor_config = self._actor_config(fields, group_size)
        actor_config.ppo_n_minibatches = 1
        actor_config.mb_spec = self.runtime.cli_args.MicroBatchSpec(n_mbs=len(batch.micro_batches))
        settings = contract_settings(actor_config)
        if settings != {k: config.resolved[k] for k in settings}:
            raise SetupError(f"AReaL config {config.name!r}: settings differ at this batch")
        width = 1 + max(lengths)
        trajectories = [
            self._trajectory(batch, row, position, lengths[row], width)
            for position, row in enumerate(order)
        ]
        losses: list[float] = []
        leaves = _Leaves(order, lengths, width, batch.log_probs, batch.entropy)
        engine = standin_engine(self.runtime, actor_config, leaves, losses)
        self.runtime.actor.logger.setLevel(logging.WARNING)
        actor = self.runtime.actor.PPOActor(actor_config, engine=engine)
        tracker = self.runtime.stats_tracker
        tracker.export(reset=True)
        try:
            scored = actor.compute_advantages(trajectories)
            actor.ppo_update(scored)
        finally:
            tracker.export(reset=True)
        columns = batch.response_mask.shape[1]
        dtype = batch.scores.dtype
        stages = {"advantages": _response(scored, order, lengths, columns, "advantages", dtype)}
        if "reward_norm" not in fields:
            # tot_rewards holds the score after reward_norm: the contract's token rewards
            # (the score as given, placed) only where there is no normalisation
            stages["token_rewards"] = _response(
                scored, order, lengths, columns, "tot_rewards", dtype
            )
        kl = {"kl_coef": float(actor.kl_ctl)} if config.resolved["kl_in_reward"] else {}
        return StepOutput(loss=sum(losses), stages=stages, state=kl)

    def _trajectory(
        self, batch: StepBatch, row: int, position: int, n: int, width: int
    ) -> dict[str, torch.Tensor]:
        """Row ``row`` as the rollout workflow hands it over, one prompt token first; its
        token ids say where it sits (``_Leaves``)."""
        old = batch.old_log_probs.detach().to("cpu", torch.float32)
        ref = batch.ref_log_probs.detach().to("cpu", torch.float32)
        mask = batch.loss_mask.detach().to("cpu")
        logprobs = torch.zeros((1, 1 + n), dtype=torch.float32)
        logprobs[0, 1:] = old[row, :n]
        loss_mask = torch.zeros((1, 1 + n), dtype=torch.int32)
        loss_mask[0, 1:] = mask[row, :n].to(torch.int32)
        ref_logp = torch.zeros((1, 1 + n), dtype=torch.float32)
        ref_logp[0, :n] = ref[row, :n]
        return {
            "input_ids": (1 + position * width + torch.arange(1 + n)).reshape(1, -1),
            "attention_mask": torch.ones((1, 1 + n), dtype=torch.bool),
            "loss_mask": loss_mask,
            "logprobs": logprobs,
            "ref_logp": ref_logp,
            "rewards": batch.scores.detach().to("cpu", torch.float32)[row].reshape(1),
        }


def _response(
    scored: list[dict[str, Any]],
    order: list[int],
    lengths: list[int],
    columns: int,
    key: str,
    dtype: torch.dtype,
) -> torch.Tensor:
    """A rolled per-trajectory field back in response coordinates and row order (rolled
    column j is response token j)."""
    out = torch.zeros((len(order), columns), dtype=dtype)
    for position, row in enumerate(order):
        n = lengths[row]
        out[row, :n] = scored[position][key][0, :n].to(dtype)
    return out


def _native(fields: Mapping[str, Any], config: Any) -> dict[str, Any]:
    keys = ("kl_ctl", "kl_estimator", "eps_clip", "eps_clip_higher", "c_clip", "discount")
    native: dict[str, Any] = {k: getattr(config, k) for k in keys}
    native["gae_lambda"] = config.gae_lambda
    native["mask_no_eos_with_zero"] = config.mask_no_eos_with_zero
    native.update({k: v for k, v in fields.items() if k != "reward_norm"})
    if "reward_norm" in fields:
        native["reward_norm"] = dict(fields["reward_norm"], group_size="n_samples")
    return native


__all__ = ["AREAL_STEP_CONFIGS", "StepOps", "contract_settings"]

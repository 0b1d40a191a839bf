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

With a critic (``ppo_critic``) the trainer's two critic calls run too, each on a stand-in
``FSDPEngine`` whose model outputs, at each packed position, a critic value: before the
advantages, ``critic.compute_values`` (the batch's rollout-time ``values``; the value after
a sample's last token is ``AFTER_VALUE``, a position the contract never reads) writes each
trajectory's ``values``; after the actor's update, ``critic.ppo_update`` trains on the
current values (the batch's leaf ``vpreds``), its loss (``ppo_loss_fn``, weighted by the
loss-mask count like the actor's) recorded as the step's value loss.

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
from rlconform.adapters.areal.manifest import PROFILE
from rlconform.adapters.base import Inexpressible, SetupError
from rlconform.adapters.step_io import StepBatch, StepOutput
from rlconform.conformance.trainer_config import TrainerConfig

# What the model computes at the position after a sample's last token (loss_mask 0 there).
AFTER_LOGPROB = -1.0
# What the critic computes there: the value of the state after the last token, which a
# trainer that follows the contract never reads (every step sample is terminated).
AFTER_VALUE = 1.0
# Prompt tokens before each response: two, so that a micro-batch's packed forward holds
# more than one token, as every real prompt makes it (PPOCritic.compute_values concatenates
# each micro-batch's squeezed values: a one-token micro-batch, a one-token prompt with an
# empty response, would be a zero-dimensional tensor there).
PROMPT = 2

_GROUP_NORM = {"mean_level": "group", "std_level": "group"}

# The named configs: PPOActorConfig fields over its defaults. ``reward_norm`` is a NormConfig
# made at step time (its group_size is the batch's group size).
AREAL_STEP_CONFIGS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("default", {}),
    ("grpo", {"reward_norm": _GROUP_NORM, "kl_ctl": 0.0}),
    ("dr_grpo", {"reward_norm": {"mean_level": "group", "std_level": None}, "kl_ctl": 0.0}),
    ("grpo_dual_clip", {"reward_norm": _GROUP_NORM, "kl_ctl": 0.0, "c_clip": 3.0}),
    ("grpo_clip_higher", {"reward_norm": _GROUP_NORM, "kl_ctl": 0.0, "eps_clip_higher": 0.28}),
    # grpo_loss_fn's sapo_loss_fn in place of the clipped surrogate (its default temperatures)
    ("grpo_sapo", {"reward_norm": _GROUP_NORM, "kl_ctl": 0.0, "use_sapo_loss": True}),
    # every sample of the cases ends with its EOS (max_new_tokens is far above the longest):
    # the option must change nothing
    (
        "grpo_mask_no_eos",
        {"reward_norm": _GROUP_NORM, "kl_ctl": 0.0, "mask_no_eos_with_zero": True},
    ),
    # examples/math/gsm8k_ppo.yaml's PPO with a critic (its eps_clip 0.4, batch adv_norm,
    # no KL reward, the critic's eps_clip 0.5), on the inference engine's log-probs
    # (its decoupled loss and reward scaling have no step oracle): ``critic`` holds
    # PPOCriticConfig fields
    (
        "ppo_critic",
        {
            "kl_ctl": 0.0,
            "eps_clip": 0.4,
            "adv_norm": {"mean_level": "batch", "std_level": "batch"},
            "critic": {"eps_clip": 0.5},
        },
    ),
)

# Options with no step oracle: (field, the value the binding supports).
_FIXED = (
    ("importance_sampling_level", "token"),
    ("m2_threshold", None),
    ("rejection_sampling", None),
    ("overlong_reward_penalty", False),
    ("use_decoupled_loss", False),
    ("recompute_logprob", False),
    ("reward_bias", 0.0),
    ("reward_scaling", 1.0),
    ("is_critic", False),
)


def _critic_settings(config: Any, critic: Any) -> dict[str, Any]:
    """GAE with the critic's values: ``adv_norm`` batch whitening or none; the critic's
    ``ppo_critic_loss_fn`` (0.5 x the larger squared error, values clipped by its
    ``eps_clip``), each micro-batch's masked mean weighted by its loss-mask count."""
    if not critic.is_critic:
        raise SetupError("AReaL's critic config must set is_critic=True")
    if config.reward_norm is not None:
        raise SetupError("reward_norm with a critic has no step oracle")
    norm = config.adv_norm
    if norm is not None and (norm.mean_level, norm.std_level, norm.std_unbiased) != (
        "batch",
        "batch",
        True,
    ):
        raise SetupError(f"adv_norm {norm} has no step oracle (unbiased batch whitening only)")
    profile_eps = PROFILE.extra["whiten_std_eps"]  # the step oracle's whitening epsilon
    if norm is not None and norm.eps != profile_eps:
        raise SetupError(
            f"adv_norm eps {norm.eps} differs from the profile's whiten_std_eps {profile_eps}"
        )
    return {
        "estimator": "gae",
        "gamma": float(config.discount),
        "lam": float(config.gae_lambda),
        "whiten_advantages": norm is not None,
        "critic": True,
        "cliprange_value": float(critic.eps_clip),
        "value_loss_scale": 0.5,
    }


def contract_settings(config: Any, critic: Any = None) -> dict[str, Any]:
    """The contract settings (``oracle.step.STEP_SETTINGS``) a ``PPOActorConfig`` (and, for
    PPO with a critic, its ``PPOCriticConfig``) runs."""
    for field, supported in _FIXED:
        if getattr(config, field) != supported:
            raise SetupError(f"AReaL {field}={getattr(config, field)!r} has no step binding")
    if critic is None and config.adv_norm is not None:
        raise SetupError("adv_norm without a critic has no step binding")
    norm = config.reward_norm
    if critic is not None:
        estimator: dict[str, Any] = _critic_settings(config, critic)
    elif norm is None:
        # no normalisation, no critic: the GAE loop with values 0 sums the token rewards
        estimator = {
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
        "critic": False,
        **estimator,
        "kl_in_reward": config.kl_ctl != 0.0,
        "kl_in_reward_estimator": config.kl_estimator,
        "kl_coef": float(config.kl_ctl),
        "kl_ctrl": "fixed",
        "kl_loss": False,
        "policy_loss": "sapo" if config.use_sapo_loss else "ppo_clip",
        "sapo_tau_pos": float(config.sapo_tau_pos),
        "sapo_tau_neg": float(config.sapo_tau_neg),
        "clip_low": float(config.eps_clip),
        "clip_high": float(high),
        "clip_ratio_c": None if config.c_clip is None else float(config.c_clip),
        "entropy_coeff": 0.0,  # grpo_loss_fn detaches the entropy
        "loss_agg_mode": "token-mean",  # each loss / all-reduced loss-mask count
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


class _ValueModel(torch.nn.Module):
    """The critic: its output at each packed position is the value ``leaves`` holds there
    (``PPOCritic`` reads a token-classification head's one logit per token)."""

    def __init__(self, leaves: _Leaves) -> None:
        super().__init__()
        self.anchor = torch.nn.Parameter(torch.zeros(()))
        self.leaves = leaves

    def forward(self, input_ids: torch.Tensor, **_: Any) -> Any:
        values = self.leaves.values(input_ids)
        return types.SimpleNamespace(logits=(values + self.anchor).reshape(1, -1, 1))


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
    """The batch's leaf log-probs and entropies (or the critic's values alone), read at the
    engine's packed positions.

    Trajectory ``r`` (the data row) has token ids ``1 + r * width + c`` at its raw columns
    c (0 is padding); the rolled log-prob at raw column c is the prediction of token c + 1:
    a prompt token for c < PROMPT - 1, the sample's response token j = c - (PROMPT - 1) for
    j < L, and the position after its last token for j = L (``after`` there). The critic's
    output at raw column c is its value there (the same coordinates)."""

    def __init__(
        self,
        rows: list[int],
        lengths: list[int],
        width: int,
        leaf: Any,
        entropy: Any = None,
        after: float = AFTER_LOGPROB,
    ):
        self.rows, self.lengths, self.width = rows, lengths, width
        self.leaf, self.entropy, self.after = leaf, entropy, after

    def gather(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The log-probs and entropies at ``ids``' positions (the engine's gather)."""
        if self.entropy is None:
            raise SetupError("these leaves are a critic's values: they hold no entropies")
        return self._pick(ids, self.leaf, self.after), self._pick(ids, self.entropy, 0.0)

    def values(self, ids: torch.Tensor) -> torch.Tensor:
        """The leaf values at ``ids``' positions (the critic's output)."""
        return self._pick(ids, self.leaf, self.after)

    def _pick(self, ids: torch.Tensor, source: Any, after: float) -> torch.Tensor:
        zero = source.new_zeros(())
        picked = []
        for token in ids.reshape(-1).tolist():
            if token == 0:
                picked.append(zero)
                continue
            position, column = divmod(token - 1, self.width)
            row = self.rows[position]
            j = column - (PROMPT - 1)
            if j < 0:
                picked.append(zero)
            elif j < self.lengths[row]:
                picked.append(source[row, j])
            else:
                picked.append(zero + after)
        if not picked:
            return source.new_zeros((0,))
        return torch.stack(picked).float()


def _fsdp_engine(runtime: Any) -> Any:
    try:
        return importlib.import_module("areal.engine.fsdp_engine")
    except ModuleNotFoundError as exc:
        raise SetupError(
            f"AReaL {runtime.version}: the step binding imports areal.engine.fsdp_engine, "
            f"which needs the missing module {exc.name!r}: pip install -e '.[areal]'"
        ) from None


def standin_engine(
    runtime: Any,
    config: Any,
    leaves: _Leaves,
    losses: list[float],
    model: torch.nn.Module | None = None,
) -> Any:
    """``FSDPEngine`` without ``__init__``: the attributes ``train_batch`` and
    ``forward_batch`` read (module docstring); its own methods run, except the log-prob
    gather, the optimizer step and the model (``model``: the critic's)."""
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
    engine.model = model if model is not None else _Model()
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
        options.pop("critic", None)
        norm = options.pop("reward_norm", None)
        if norm is not None:
            options["reward_norm"] = cli.NormConfig(**norm, group_size=group_size)
        if options.get("adv_norm") is not None:
            options["adv_norm"] = cli.NormConfig(**options["adv_norm"])
        return cli.PPOActorConfig(experiment_name="rlconform", trial_name="rlconform", **options)

    def _critic_config(self, fields: Mapping[str, Any]) -> Any:
        """The ``PPOCriticConfig`` of a config with a critic (its ``critic`` fields), else
        None."""
        if "critic" not in fields:
            return None
        return self.runtime.cli_args.PPOCriticConfig(
            experiment_name="rlconform", trial_name="rlconform", is_critic=True, **fields["critic"]
        )

    def trainer_configs(self) -> list[TrainerConfig]:
        cached = self.__dict__.get("_areal_trainer_configs")
        if cached is None:
            cached = []
            for name, fields in self.step_configs:
                config = self._actor_config(fields)
                cached.append(
                    TrainerConfig(
                        name,
                        contract_settings(config, self._critic_config(fields)),
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
        critic_config = self._critic_config(fields)
        if critic_config is not None:
            # one minibatch, the step's micro-batches, as for the actor
            critic_config.ppo_n_minibatches = 1
            critic_config.mb_spec = actor_config.mb_spec
        settings = contract_settings(actor_config, critic_config)
        if settings != {k: config.resolved[k] for k in settings}:
            raise SetupError(f"AReaL config {config.name!r}: settings differ at this batch")
        width = PROMPT + max(lengths)
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
        value_losses: list[float] = []
        try:
            if critic_config is not None:
                # rl_trainer: values = critic.compute_values(rollout_batch), one per trajectory
                rollout = _Leaves(order, lengths, width, batch.values, after=AFTER_VALUE)
                values = self._critic(critic_config, rollout, []).compute_values(trajectories)
                for trajectory, value in zip(trajectories, values):
                    trajectory["values"] = value
            scored = actor.compute_advantages(trajectories)
            actor.ppo_update(scored)
            if critic_config is not None:
                # rl_trainer: critic.ppo_update(adv_batch) after the actor's update
                current = _Leaves(order, lengths, width, batch.vpreds, after=AFTER_VALUE)
                self._critic(critic_config, current, value_losses).ppo_update(scored)
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
        if critic_config is not None:
            stages["returns"] = _response(scored, order, lengths, columns, "returns", dtype)
        kl = {"kl_coef": float(actor.kl_ctl)} if config.resolved["kl_in_reward"] else {}
        return StepOutput(
            loss=sum(losses),
            stages=stages,
            state=kl,
            value_loss=sum(value_losses) if critic_config is not None else None,
        )

    def _critic(self, critic_config: Any, leaves: _Leaves, losses: list[float]) -> Any:
        """``PPOCritic`` on a stand-in engine whose model outputs ``leaves``' values."""
        engine = standin_engine(self.runtime, critic_config, leaves, losses, _ValueModel(leaves))
        return self.runtime.critic.PPOCritic(critic_config, engine)

    def _trajectory(
        self, batch: StepBatch, row: int, position: int, n: int, width: int
    ) -> dict[str, torch.Tensor]:
        """Row ``row`` as the rollout workflow hands it over, ``PROMPT`` prompt tokens
        first; its token ids say where it sits (``_Leaves``)."""
        old = batch.old_log_probs.detach().to("cpu", torch.float32)
        ref = batch.ref_log_probs.detach().to("cpu", torch.float32)
        mask = batch.loss_mask.detach().to("cpu")
        total = PROMPT + n
        logprobs = torch.zeros((1, total), dtype=torch.float32)
        logprobs[0, PROMPT:] = old[row, :n]
        loss_mask = torch.zeros((1, total), dtype=torch.int32)
        loss_mask[0, PROMPT:] = mask[row, :n].to(torch.int32)
        ref_logp = torch.zeros((1, total), dtype=torch.float32)
        ref_logp[0, PROMPT - 1 : PROMPT - 1 + n] = ref[row, :n]
        return {
            "input_ids": (1 + position * width + torch.arange(total)).reshape(1, -1),
            "attention_mask": torch.ones((1, total), dtype=torch.bool),
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
    column PROMPT - 1 + j is response token j)."""
    out = torch.zeros((len(order), columns), dtype=dtype)
    for position, row in enumerate(order):
        n = lengths[row]
        out[row, :n] = scored[position][key][0, PROMPT - 1 : PROMPT - 1 + n].to(dtype)
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

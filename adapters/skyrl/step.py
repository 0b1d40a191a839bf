"""SkyRL binding of the CONTRACT area `step`: one training step of ``RayPPOTrainer``.

The path, read from ``skyrl/train/trainer.py`` (``RayPPOTrainer.train``) and
``skyrl/backends/skyrl_train/workers/worker.py``; every method named here is SkyRL's own,
called as the loop calls it, on a trainer object built without ``__init__`` (which starts
Ray, the inference engines and the dataloaders):

1. the generator's output (prompt and response token ids, one outcome reward per
   response, the loss masks) goes through ``postprocess_generator_output`` (the reward
   placed on each response's last token, the reward metrics) and
   ``convert_to_training_input`` (right-aligned response tensors, the mini-batch
   boundaries ``compute_prompt_mini_batch_boundaries`` cuts, the DP padding);
2. ``fwd_logprobs_values_reward`` stores the policy's and the reference model's log-probs
   (``action_log_probs``, the old ones, and ``base_action_log_probs``): its model
   forward (``_execute_forward_pass``) is replaced by one returning the batch's old and
   reference log-probs at the rows it is asked for;
3. ``apply_reward_kl_penalty`` when ``use_kl_in_reward``; ``compute_advantages_and_returns``;
   the loop's removal of ``rewards`` / ``uids``;
4. ``train_critic_and_policy``: ``_normalize_advantages`` (the loss-reduction pre-scaling
   per mini-batch), then per mini-batch the dispatch's ``forward_backward`` on each DP rank
   and ``optim_step``. The dispatch (``WorkerDispatch``: Ray actor groups) is replaced by
   ``_Dispatch``: ``stage_data`` is ``MeshDispatch.stage_chunks`` itself with Ray's object
   store replaced by the chunks themselves (``_no_object_store``), ``forward_backward_from_staged``
   calls the real ``PolicyWorkerBase.forward_backward`` of one rank (dp size 1): its
   micro-batch iterator, ``_forward_backward_micro`` (the policy loss from the registry,
   the KL and entropy terms, ``policy_loss * dp_size + (kl - entropy) * microbatch_weight``,
   ``strategy.backward``) and its metric reduction. The worker's model returns the batch's
   leaf log-probs and entropies at the rows its token ids name (``_Model``); the strategy's
   ``backward`` is ``loss.backward()`` and records the loss; ``optim_step`` is a no-op (the
   harness reads the gradients).

With a critic (``ppo_critic``: ``trainer.critic.model.path`` set, GAE) the critic's two
calls run too: its forward in ``fwd_logprobs_values_reward`` answers the batch's
rollout-time values, and ``train_critic_and_policy`` trains it first through the real
``CriticWorkerBase.forward_backward`` (``ppo_critic_loss`` per micro-batch) and
``optim_step`` (the accumulated gradient times 1 / micro-batches) on a stand-in model whose
output, and whose one parameter, is the batch's leaf current values (``_ValueModel``).

Shim (the worker moves its micro-batch to ``torch.cuda.current_device()``, which raises on
a machine without CUDA): ``torch.cuda.current_device`` answers ``"cpu"`` for the duration of
the step (``_cpu_device``).

Trainer configs are ``SkyRLTrainConfig()`` as installed (``default``: GRPO with the k3 KL
loss at 0.001, token-mean reduction) and named sets of ``trainer.algorithm`` fields; the
contract settings are read off the config (``contract_settings``).
"""

from __future__ import annotations

import contextlib
import types
import warnings
from collections.abc import Iterator, Mapping
from typing import Any

import torch

from rlconform.adapters.base import Inexpressible, SetupError
from rlconform.adapters.skyrl.layout import RightAligned
from rlconform.adapters.step_io import StepBatch, StepOutput
from rlconform.conformance.trainer_config import TrainerConfig

# Token ids of the stand-in rollout: the pad id, a response token, and the one prompt token
# of the sample at position p (group order), PROMPT_BASE + p: the model reads it back.
PAD_ID = 0
RESPONSE_ID = 1
PROMPT_BASE = 1000

# the named configs: trainer.algorithm fields over SkyRLTrainConfig()'s
SKYRL_STEP_CONFIGS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("default", {}),
    ("grpo_no_kl", {"use_kl_loss": False}),
    ("sequence_mean", {"loss_reduction": "sequence_mean"}),
    (
        "dr_grpo",
        {
            "grpo_norm_by_std": False,
            "loss_reduction": "seq_mean_token_sum_norm",
            "max_seq_len": 16,
            "use_kl_loss": False,
        },
    ),
    ("rloo", {"advantage_estimator": "rloo", "use_kl_loss": False}),
    ("reinforce_pp", {"advantage_estimator": "reinforce++", "use_kl_loss": False}),
    ("dual_clip", {"policy_loss_type": "dual_clip", "use_kl_loss": False}),
    # sapo_policy_loss with the reduction it asks for (its default temperatures)
    (
        "sapo",
        {"policy_loss_type": "sapo", "loss_reduction": "sequence_mean", "use_kl_loss": False},
    ),
    ("clip_higher", {"eps_clip_high": 0.28, "use_kl_loss": False}),
    ("entropy_bonus", {"use_entropy_loss": True, "entropy_loss_coef": 0.01, "use_kl_loss": False}),
    ("kl_in_reward", {"use_kl_in_reward": True, "use_kl_loss": False, "kl_estimator_type": "k1"}),
    # PPO with a critic: GAE (gamma = lambda = 1, SkyRL's defaults), the critic's
    # ppo_critic_loss with value_clip 0.2 (``critic``: trainer.critic.model.path is set)
    ("ppo_critic", {"advantage_estimator": "gae", "use_kl_loss": False, "critic": True}),
)

# trainer.critic.model.path of a config with a critic: has_critic reads only that it is set
CRITIC_PATH = "rlconform-stand-in-critic"

_REDUCTIONS = {
    "token_mean": "token-mean",
    "sequence_mean": "seq-mean-token-mean",
    "seq_mean_token_sum_norm": "seq-mean-token-sum-norm",
}
_ESTIMATORS = {"grpo": "grpo", "rloo": "rloo", "reinforce++": "reinforce_pp", "gae": "gae"}
_POLICY_LOSSES = ("regular", "dual_clip", "sapo")


def contract_settings(algorithm: Any, critic: bool = False) -> dict[str, Any]:
    """The contract settings (``oracle.step.STEP_SETTINGS``) a ``trainer.algorithm`` runs
    (``critic``: the config trains a critic)."""
    estimator = _ESTIMATORS.get(algorithm.advantage_estimator)
    if estimator is None:
        raise SetupError(
            f"SkyRL advantage_estimator {algorithm.advantage_estimator!r} has no step binding"
        )
    if (estimator == "gae") != critic:
        raise SetupError("the SkyRL step binds GAE with a critic and the others without one")
    if algorithm.policy_loss_type not in _POLICY_LOSSES:
        raise SetupError(
            f"SkyRL policy_loss_type {algorithm.policy_loss_type!r} has no step binding"
        )
    mode = _REDUCTIONS.get(algorithm.loss_reduction)
    if mode is None:
        raise SetupError(f"SkyRL loss_reduction {algorithm.loss_reduction!r} has no step oracle")
    if algorithm.use_kl_in_reward and algorithm.kl_ctrl.type != "fixed":
        raise SetupError("the adaptive in-reward KL controller has no step binding yet")
    for field in ("advantage_batch_normalize", "zero_variance_filter", "use_tis"):
        if getattr(algorithm, field):
            raise SetupError(f"SkyRL {field}=True has no step binding")
    if algorithm.temperature not in (None, 1.0):
        raise SetupError("a sampling temperature other than 1 has no step binding")
    kl_coef = float(algorithm.kl_loss_coef)
    extra: dict[str, Any] = {"gamma": float(algorithm.gamma)} if estimator == "reinforce_pp" else {}
    if critic:
        # compute_gae_advantage_return whitens (masked_whiten); ppo_critic_loss is 0.5 x the
        # larger squared error, values clipped by value_clip (None: unclipped)
        extra = {
            "gamma": float(algorithm.gamma),
            "lam": float(algorithm.lambd),
            "whiten_advantages": True,
            "cliprange_value": (
                None if algorithm.value_clip is None else float(algorithm.value_clip)
            ),
            "value_loss_scale": 0.5,
            # ppo_critic_loss: masked_mean(loss, loss_mask, dim=-1).mean(), whatever
            # loss_reduction says (CriticWorkerBase.optim_step averages the micro-batches)
            "critic_loss_agg_mode": "seq-mean-token-mean",
        }
    return {
        **extra,
        "estimator": estimator,
        "norm_adv_by_std": bool(algorithm.grpo_norm_by_std) if estimator == "grpo" else True,
        "kl_in_reward": bool(algorithm.use_kl_in_reward),
        "kl_in_reward_estimator": algorithm.kl_estimator_type,
        "kl_coef": max(0.0, kl_coef),
        "kl_ctrl": "fixed",
        "kl_loss": bool(algorithm.use_kl_loss),
        "kl_loss_estimator": algorithm.kl_estimator_type,
        "kl_loss_coef": kl_coef,
        "policy_loss": "sapo" if algorithm.policy_loss_type == "sapo" else "ppo_clip",
        "sapo_tau_pos": float(algorithm.sapo.tau_pos),
        "sapo_tau_neg": float(algorithm.sapo.tau_neg),
        "clip_low": float(algorithm.eps_clip_low),
        "clip_high": float(algorithm.eps_clip_high),
        "clip_ratio_c": (
            float(algorithm.clip_ratio_c) if algorithm.policy_loss_type == "dual_clip" else None
        ),
        "entropy_coeff": float(algorithm.entropy_loss_coef) if algorithm.use_entropy_loss else 0.0,
        "loss_agg_mode": mode,
        "norm_length": (
            float(algorithm.max_seq_len) if mode == "seq-mean-token-sum-norm" else None
        ),
        "critic": critic,
        "on_policy": False,  # fwd_logprobs_values_reward computes the old log-probs
    }


# --- what the trainer and its worker hold --------------------------------------------------


def _positions(sequences: torch.Tensor) -> list[int]:
    """The group-order position each left-padded sequence's prompt token names."""
    return [next(t for t in row if t != PAD_ID) - PROMPT_BASE for row in sequences.tolist()]


class _Model(torch.nn.Module):
    """The policy: for each sequence, the leaf log-probs and entropies of the sample its
    prompt token names, right-aligned as SkyRL's model wrapper returns them
    (``action_log_probs`` (B, num_actions); ``output["entropy"]`` (B, seq_len), the response
    entropies at ``[-num_actions - 1 : -1]``)."""

    def __init__(self, rows: list[int], lengths: list[int], logp: Any, entropy: Any):
        super().__init__()
        self.rows, self.lengths = rows, lengths
        self.logp, self.entropy = logp, entropy

    def forward(self, sequences: torch.Tensor, num_actions: int, **_: Any) -> Any:
        positions = _positions(sequences)
        data_rows = [self.rows[p] for p in positions]
        index = torch.tensor(data_rows, dtype=torch.long)
        layout = RightAligned([self.lengths[r] for r in data_rows], num_actions)
        logp = layout.to_skyrl(self.logp[:, :num_actions].index_select(0, index))
        entropy = layout.to_skyrl(self.entropy[:, :num_actions].index_select(0, index))
        lead = sequences.shape[1] - num_actions - 1
        full = torch.cat(
            [
                entropy.new_zeros((len(data_rows), lead)),
                entropy,
                entropy.new_zeros((len(data_rows), 1)),
            ],
            dim=1,
        )
        return logp.float(), {"entropy": full.float()}


class _ValueModel(torch.nn.Module):
    """The critic: for each sequence, the batch's leaf current values (``vpreds``) of the
    sample its prompt token names, right-aligned (``values`` (B, num_actions), as SkyRL's
    critic wrapper returns them). Its parameters are that leaf: ``CriticWorkerBase.
    optim_step`` scales their gradients (by 1 / the micro-batches accumulated)."""

    def __init__(self, rows: list[int], lengths: list[int], vpreds: Any):
        super().__init__()
        self.rows, self.lengths, self.vpreds = rows, lengths, vpreds

    def forward(self, sequences: torch.Tensor, num_actions: int, **_: Any) -> Any:
        data_rows = [self.rows[p] for p in _positions(sequences)]
        index = torch.tensor(data_rows, dtype=torch.long)
        layout = RightAligned([self.lengths[r] for r in data_rows], num_actions)
        values = layout.to_skyrl(self.vpreds[:, :num_actions].index_select(0, index))
        return values.float(), {}

    def parameters(self, recurse: bool = True) -> Iterator[torch.Tensor]:
        yield self.vpreds


class _Strategy:
    """``strategy.backward`` is the plain backward; metrics all-reduce over one rank; the
    optimizer step is a no-op (the harness reads the gradients)."""

    def __init__(self, losses: list[float]):
        self.losses = losses

    def backward(self, loss: torch.Tensor, model: Any, optimizer: Any) -> None:
        loss.backward()
        self.losses.append(float(loss.detach()))

    def optimizer_step(self, optimizer: Any, model: Any, scheduler: Any, name: str = "") -> None:
        return None

    def all_reduce(self, data: Any, op: str = "mean", group: Any = None) -> Any:
        return data


@contextlib.contextmanager
def _no_object_store(dispatch_module: Any) -> Iterator[None]:
    """``ray.put`` in ``MeshDispatch.stage_chunks`` returns the chunk itself (no cluster)."""
    original = dispatch_module.ray
    dispatch_module.ray = types.SimpleNamespace(put=lambda value: value)
    try:
        yield
    finally:
        dispatch_module.ray = original


@contextlib.contextmanager
def _cpu_device() -> Iterator[None]:
    """The shim named in the module docstring."""
    original = torch.cuda.current_device
    torch.cuda.current_device = lambda: "cpu"  # type: ignore[assignment]
    try:
        with warnings.catch_warnings():
            # the worker's torch.autocast(device_type="cuda") disables itself on a CPU
            warnings.filterwarnings("ignore", message="CUDA is not available")
            yield
    finally:
        torch.cuda.current_device = original  # type: ignore[assignment]


class _Dispatch:
    """``WorkerDispatch`` for one policy rank and, with a critic, one critic rank (module
    docstring)."""

    def __init__(self, runtime: Any, worker: Any, old: Any, ref: Any, critic: Any = None):
        self.runtime, self.worker, self.critic = runtime, worker, critic
        self.old, self.ref = old, ref
        self.critic_steps: list[int] = []  # micro-batches each critic optim_step averaged

    def get_lcm_dp_size(self) -> int:
        return 1

    def empty_cache(self, model: str | None = None) -> None:
        """Nothing is cached on a CPU."""

    def stage_data(self, model: str, data: Any, boundaries: list[tuple[int, int]]) -> Any:
        dispatch = self.runtime.dispatch
        with _no_object_store(dispatch):
            return dispatch.MeshDispatch.stage_chunks(1, data, boundaries)

    def _rank(self, model: str) -> Any:
        worker = {"policy": self.worker, "critic": self.critic}.get(model)
        if worker is None:
            raise SetupError(f"the SkyRL step binding has no {model} worker")
        return worker

    def forward_backward_from_staged(self, model: str, chunk_refs: list[Any]) -> Any:
        (chunk,) = chunk_refs
        return self._rank(model).forward_backward(chunk)

    def optim_step(self, model: str) -> Any:
        """The worker's own ``optim_step`` (the critic's scales the accumulated gradients
        by 1 / micro-batches; the policy's does not) on a no-op optimizer."""
        worker = self._rank(model)
        if model == "critic":
            self.critic_steps.append(worker._micro_batches_accumulated)
        return worker.optim_step()


def _log_probs(trainer: Any, rows: list[int], lengths: list[int], batch: StepBatch) -> Any:
    """``_execute_forward_pass`` of the policy, the reference model and the critic: the
    batch's old and reference log-probs (rollout-time values) at the sequences' rows,
    right-aligned, one row per padded one."""

    def forward(model: str, data: Any, key: str, mini_batch_boundaries: Any = None) -> torch.Tensor:
        source = {
            ("policy", "logprobs"): batch.old_log_probs,
            ("ref", "logprobs"): batch.ref_log_probs,
            ("critic", "values"): batch.values,
        }.get((model, key))
        if source is None:
            raise SetupError(f"the SkyRL step binding has no {model} forward for {key!r}")
        width = int(data.metadata["response_length"])
        positions = _positions(data["sequences"])
        data_rows = [rows[p] for p in positions]
        layout = RightAligned([lengths[r] for r in data_rows], width)
        picked = source.detach()[:, :width].index_select(
            0, torch.tensor(data_rows, dtype=torch.long)
        )
        return layout.to_skyrl(picked).to(torch.float32)

    return forward


# operations SkyRL's trainer runs under options no step config covers (their findings are
# unmeasured, not unreached: conformance.consequence.unbound)
STEP_UNBOUND_OPS = {
    "gspo_loss": "policy_loss_type='gspo' (the step oracle has the PPO clip and SAPO losses only)",
    "cispo_loss": "policy_loss_type='cispo' (the step oracle has the PPO clip and SAPO losses only)",
}


class StepOps:
    """The `step` operation of SkyRL's ``RayPPOTrainer`` (module docstring)."""

    step_unbound_ops = STEP_UNBOUND_OPS
    runtime: Any
    version: str
    step_logs_metrics = False  # the trainer's all_metrics are not bound yet
    step_configs: tuple[tuple[str, dict[str, Any]], ...] = SKYRL_STEP_CONFIGS

    def _step_cfg(self, fields: Mapping[str, Any]) -> Any:
        cfg = self.runtime.config.SkyRLTrainConfig()
        fields = dict(fields)
        if fields.pop("critic", False):
            cfg.trainer.critic.model.path = CRITIC_PATH
        for key, value in fields.items():
            if not hasattr(cfg.trainer.algorithm, key):
                raise SetupError(f"SkyRL's AlgorithmConfig has no field {key!r}")
            setattr(cfg.trainer.algorithm, key, value)
        return cfg

    def trainer_configs(self) -> list[TrainerConfig]:
        cached = self.__dict__.get("_skyrl_trainer_configs")
        if cached is None:
            cached = []
            for name, fields in self.step_configs:
                cfg = self._step_cfg(fields)
                algorithm = cfg.trainer.algorithm
                cached.append(
                    TrainerConfig(
                        name,
                        contract_settings(algorithm, _has_critic(cfg)),
                        native=_native(fields, algorithm),
                        source=f"skyrl {self.version} SkyRLTrainConfig()"
                        + (" with trainer.algorithm fields" if fields else ""),
                    )
                )
            self.__dict__["_skyrl_trainer_configs"] = cached
        return list(cached)

    def train_step(self, batch: StepBatch, config: TrainerConfig, state: Any = None) -> StepOutput:
        """step.update: one training step of ``RayPPOTrainer`` (module docstring)."""
        fields = dict(self.step_configs).get(config.name)
        if fields is None:
            raise SetupError(f"SkyRL declares no trainer config {config.name!r}")
        rows = len(batch.uids)
        if rows == 0:
            raise Inexpressible("SkyRL's generator returns at least one trajectory")
        lengths = [int(n) for n in batch.response_mask.sum(-1).tolist()]
        if min(lengths) == 0:
            raise Inexpressible(
                "a response of no token: SkyRL's generator returns at least the token it "
                "stopped on (postprocess_generator_output writes the reward at [-1])"
            )
        order, group_size = _group_order(list(batch.index))
        sizes = [len(mb) for mb in batch.micro_batches]
        if any(size != sizes[0] for size in sizes[:-1]) or sizes[-1] > sizes[0]:
            raise Inexpressible(
                f"micro-batches of sizes {sizes}: SkyRL's worker cuts its shard into "
                "micro_train_batch_size_per_gpu rows (the last may be shorter)"
            )
        cfg = self._step_cfg(fields)
        prompts = rows // group_size
        cfg.trainer.train_batch_size = prompts
        cfg.trainer.policy_mini_batch_size = prompts
        cfg.trainer.critic_mini_batch_size = prompts
        cfg.trainer.micro_train_batch_size_per_gpu = sizes[0]
        cfg.generator.n_samples_per_prompt = group_size
        algorithm = cfg.trainer.algorithm
        critic = _has_critic(cfg)
        settings = contract_settings(algorithm, critic)
        if settings != {k: config.resolved[k] for k in settings}:
            raise SetupError(f"SkyRL config {config.name!r}: settings differ at this batch")
        losses: list[float] = []
        value_losses: list[float] = []
        worker = self._worker(cfg, order, lengths, batch, losses)
        critic_worker = (
            self._critic_worker(cfg, order, lengths, batch, value_losses) if critic else None
        )
        trainer = self._trainer(cfg, worker, batch, critic_worker)
        trainer._execute_forward_pass = _log_probs(trainer, order, lengths, batch)
        masks = [[int(x) for x in batch.loss_mask[i, : lengths[i]].tolist()] for i in range(rows)]
        scores = [float(s) for s in batch.scores.detach().to("cpu", torch.float64).tolist()]
        generator_output = {
            "prompt_token_ids": [[PROMPT_BASE + p] for p in range(rows)],
            "response_ids": [[RESPONSE_ID] * lengths[r] for r in order],
            "rewards": [scores[r] for r in order],
            "loss_masks": [masks[r] for r in order],
            "rollout_logprobs": None,
        }
        uids = [str(batch.index[r]) for r in order]
        with _cpu_device():
            output, uids = trainer.postprocess_generator_output(generator_output, uids)
            data = trainer.convert_to_training_input(output, uids)
            data = trainer.fwd_logprobs_values_reward(data)
            if algorithm.use_kl_in_reward:
                data = trainer.apply_reward_kl_penalty(data)
            data = trainer.compute_advantages_and_returns(data)
            stages = {
                "token_rewards": data["rewards"].clone(),
                "advantages": data["advantages"].clone(),
                "returns": data["returns"].clone(),
            }
            # RayPPOTrainer.train: the keys removed before training
            data.pop("rewards")
            data.metadata.pop("uids")
            data.metadata.pop("is_last_step", None)
            trainer.train_critic_and_policy(data)
        width = batch.response_mask.shape[1]
        dtype = batch.scores.dtype
        canonical = {
            name: _canonical(value, order, lengths, width, dtype) for name, value in stages.items()
        }
        kl = (
            {"kl_coef": float(trainer.reward_kl_controller.value)}
            if algorithm.use_kl_in_reward
            else {}
        )
        value_loss = None
        if critic:
            # the loss whose gradient the critic's optim_step applies: the micro-batch losses
            # back-propagated, each step's averaged over the micro-batches it accumulated
            (accumulated,) = trainer.dispatch.critic_steps
            value_loss = sum(value_losses) / max(accumulated, 1)
        return StepOutput(loss=sum(losses), stages=canonical, state=kl, value_loss=value_loss)

    def _bare_worker(self, cls: Any, cfg: Any, model: Any, losses: list[float]) -> Any:
        """A SkyRL worker class without ``__init__``: the attributes ``forward_backward`` and
        ``optim_step`` read on one rank (no optimizer, a scheduler at learning rate 0)."""
        worker = object.__new__(cls)
        worker.cfg = cfg.trainer
        worker.model = model
        worker.optimizer = None
        worker.strategy = _Strategy(losses)
        worker.record_memory = False
        worker.mesh_rank = self.runtime.dispatch.MeshRank(
            dp=0, sp=0, tp=0, pp=0, world_size=1, dp_size=1, pp_size=1
        )
        worker.scheduler = types.SimpleNamespace(get_last_lr=lambda: [0.0])
        worker.device_mesh = types.SimpleNamespace(get_group=lambda name: None)
        return worker

    def _worker(
        self, cfg: Any, order: list[int], lengths: list[int], batch: StepBatch, losses: list[float]
    ) -> Any:
        """``PolicyWorkerBase`` without ``__init__`` (``policy_loss_fn`` is the registry's
        entry its ``__init__`` looks up)."""
        model = _Model(order, lengths, batch.log_probs, batch.entropy)
        worker = self._bare_worker(self.runtime.worker.PolicyWorkerBase, cfg, model, losses)
        worker.policy_loss_fn = self.runtime.ppo_utils.PolicyLossRegistry.get(
            cfg.trainer.algorithm.policy_loss_type
        )
        return worker

    def _critic_worker(
        self, cfg: Any, order: list[int], lengths: list[int], batch: StepBatch, losses: list[float]
    ) -> Any:
        """``CriticWorkerBase`` without ``__init__`` (``critic_loss_fn`` is the
        ``ppo_critic_loss`` its ``__init__`` sets)."""
        model = _ValueModel(order, lengths, batch.vpreds)
        worker = self._bare_worker(self.runtime.worker.CriticWorkerBase, cfg, model, losses)
        worker.critic_loss_fn = self.runtime.ppo_utils.ppo_critic_loss
        worker._micro_batches_accumulated = 0
        return worker

    def _trainer(self, cfg: Any, worker: Any, batch: StepBatch, critic: Any = None) -> Any:
        """``RayPPOTrainer`` without ``__init__``: what the step's methods read."""
        trainer = object.__new__(self.runtime.trainer.RayPPOTrainer)
        trainer.cfg = cfg
        trainer.all_metrics = {}
        trainer.all_timings = {}
        trainer.global_step = 1
        trainer.tokenizer = types.SimpleNamespace(pad_token_id=PAD_ID)
        algorithm = cfg.trainer.algorithm
        uses_ref = algorithm.use_kl_loss or algorithm.use_kl_in_reward  # build_models
        trainer.ref_model = object() if uses_ref else None
        trainer.reward_kl_controller = (
            self.runtime.ppo_utils.get_kl_controller(algorithm)
            if algorithm.use_kl_in_reward
            else None
        )
        trainer.dispatch = _Dispatch(
            self.runtime, worker, batch.old_log_probs, batch.ref_log_probs, critic
        )
        return trainer


def _has_critic(cfg: Any) -> bool:
    """SkyRL's ``has_critic``: the config names a critic model (``trainer.critic.model.path``)."""
    return cfg.trainer.critic.model.path is not None


def _group_order(index: list[Any]) -> tuple[list[int], int]:
    """SkyRL's generator returns each prompt's ``n_samples_per_prompt`` samples
    consecutively (``compute_prompt_mini_batch_boundaries`` asserts it): the rows in group
    order (groups by first appearance, members in batch order) and the group size."""
    members: dict[Any, list[int]] = {}
    for i, label in enumerate(index):
        members.setdefault(label, []).append(i)
    sizes = {len(m) for m in members.values()}
    if len(sizes) != 1:
        raise Inexpressible(
            f"groups of sizes {sorted(sizes)}: SkyRL samples n_samples_per_prompt responses "
            "per prompt"
        )
    return [i for group in members.values() for i in group], sizes.pop()


def _canonical(
    value: torch.Tensor, order: list[int], lengths: list[int], width: int, dtype: torch.dtype
) -> torch.Tensor:
    """A right-aligned (group order) stage back in the batch's layout and row order."""
    columns = value.shape[1]
    out = torch.zeros((len(order), width), dtype=dtype)
    for position, row in enumerate(order):
        n = lengths[row]
        out[row, :n] = value[position, columns - n :].to(dtype)
    return out


def _native(fields: Mapping[str, Any], algorithm: Any) -> dict[str, Any]:
    keys = (
        "advantage_estimator",
        "use_kl_loss",
        "kl_loss_coef",
        "kl_estimator_type",
        "use_kl_in_reward",
        "policy_loss_type",
        "loss_reduction",
        "eps_clip_low",
        "eps_clip_high",
        "grpo_norm_by_std",
    )
    native = {k: getattr(algorithm, k) for k in keys}
    native.update(fields)
    return native


__all__ = ["SKYRL_STEP_CONFIGS", "StepOps", "contract_settings"]

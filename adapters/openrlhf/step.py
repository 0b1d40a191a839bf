"""OpenRLHF binding of the CONTRACT area `step`: one PPO step of ``train_ppo_ray``, end to end.

The path, read from ``openrlhf/trainer/ppo_trainer.py`` (``PPOTrainer.fit``) and the Ray
actors' ``ppo_train`` / ``training_step``:

1. ``make_experience``: the actor's and reference model's log-probs of the rollout (the
   batch's old / ref log-probs), ``compute_approx_kl(old, ref, kl_estimator)`` for the
   reward KL when the KL is not a loss (else zeros), ``info["kl"] = masked_mean(kl,
   action_mask, dim=-1)`` per sample; the rewards are the batch's scores;
2. ``RemoteExperienceMaker.compute_advantages_and_returns`` (called as is) with the
   trainer's controller ``kl_ctl`` (``FixedKLController(init_coef)``, or
   ``AdaptiveKLController`` when ``--algo.kl.target`` is set; made once, carried across
   steps);
3. the critic's and the actor's ``ppo_train``: the batch's micro-batches (equal sizes: a
   ``DataLoader`` with ``drop_last``) paired with ``iter_grad_accum_global_norm``'s
   normalisers (called as is), then ``training_step`` per micro-batch, and the status
   merging of ``ppo_train``;
4. ``PPOTrainer.fit``: ``kl_ctl.update(status["kl"], rollout.batch_size *
   n_samples_per_prompt)``.

Source-level binding: ``ActorPPOTrainer.training_step`` and ``CriticPPOTrainer.training_step``
are OpenRLHF's own function bodies, compiled from the installed ``ppo_actor.py`` /
``ppo_critic.py`` (their modules import DeepSpeed, Ray and vLLM, which do not import on a
CPU machine) and run on a trainer object holding what they read: the model is a stand-in
returning the micro-batch's rows of the batch's leaf log-probs (entropies, values);
``strategy.backward`` is DeepSpeed's, which scales every micro-batch loss by
1 / accumulation steps before backward (the normalisers pre-compensate it); the optimizer
step is a no-op (the harness reads the gradients). Transcribed (they need a Ray cluster):
the few lines of ``make_experience`` named in 1 (calling OpenRLHF's ``compute_approx_kl``
and ``masked_mean``), ``ppo_train``'s status merging, and the controller update of 4.
Trainer configs are ``train_ppo_ray``'s command line: ``default`` is its parser's defaults
(the parser is built from ``train_ppo_ray.py``'s own ``add_argument`` calls), each named
config a set of flags; the contract settings are read off the parsed config.
"""

from __future__ import annotations

import ast
import copy
import dataclasses
import types
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Optional

import torch

from rlconform.adapters.base import Inexpressible, SetupError
from rlconform.adapters.openrlhf.common import group_positions
from rlconform.adapters.step_io import StepBatch, StepOutput
from rlconform.conformance.trainer_config import TrainerConfig

# The named configs: train_ppo_ray flags (hierarchical names) over its defaults.
OPENRLHF_STEP_CONFIGS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("default", {}),
    (
        "reinforce_adaptive_kl",
        {"algo.advantage.estimator": "reinforce", "algo.kl.target": 0.01, "algo.kl.horizon": 100},
    ),
    (
        "group_norm_kl_loss",
        {
            "algo.advantage.estimator": "group_norm",
            "algo.kl.use_loss": True,
            "algo.kl.estimator": "k3",
            "algo.kl.init_coef": 0.001,
        },
    ),
    (
        "rloo_entropy_seq_mean",
        {
            "algo.advantage.estimator": "rloo",
            "algo.kl.use_loss": True,
            "algo.kl.estimator": "k3",
            "actor.entropy_coef": 0.01,
            "actor.loss_agg_mode": "seq-mean-token-mean",
        },
    ),
)

_ESTIMATORS = {
    "gae": "gae",
    "reinforce": "reinforce_pp",
    "reinforce_baseline": "reinforce_pp_baseline",
    "group_norm": "grpo",
    "dr_grpo": "grpo",
    "rloo": "rloo",
}

# contract metric -> OpenRLHF's logged name (``ppo_train``'s status)
STEP_METRIC_NAMES = {
    "policy_loss": "policy_loss",
    "entropy": "entropy_loss",
    "clip_fraction": "ppo_clip_ratio",
    "score/mean": "reward",
    "value_loss": "critic_loss",
    "kl_in_reward": "kl",
    "kl_loss": "kl",
}


# --------------------------------------------------------------------- configs


def _parser_source(root: Path) -> list[ast.stmt]:
    """The statements of ``train_ppo_ray.py``'s ``__main__`` block that build its parser."""
    path = root / "openrlhf" / "cli" / "train_ppo_ray.py"
    if not path.is_file():
        raise SetupError(
            f"OpenRLHF's trainer entry point {path} is missing: cannot read its defaults"
        )
    tree = ast.parse(path.read_text())
    for node in tree.body:
        if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test):
            body = []
            for stmt in node.body:
                if "parse_args" in ast.unparse(stmt):
                    return body
                body.append(stmt)
    raise SetupError(f"{path}: no parser in its __main__ block")


def shipped_args(root: Path, flags: Mapping[str, Any]) -> Any:
    """``train_ppo_ray``'s parsed config for ``flags`` (hierarchical, as the trainer sees it),
    with the post-parse defaults it applies to the options the step reads."""
    import argparse
    import os
    from datetime import datetime

    from openrlhf.utils.config import hierarchize

    namespace: dict[str, Any] = {"argparse": argparse, "os": os, "datetime": datetime}
    module = ast.Module(body=_parser_source(root), type_ignores=[])
    exec(compile(module, "train_ppo_ray.py", "exec"), namespace)  # noqa: S102 - its parser
    parser = namespace["parser"]
    known = {a.dest for a in parser._actions}
    unknown = sorted(set(flags) - known)
    if unknown:
        raise SetupError(f"train_ppo_ray has no option {', '.join(unknown)}")
    parsed = parser.parse_args([])
    for key, value in flags.items():
        setattr(parsed, key, value)
    args = hierarchize(parsed)
    if args.actor.eps_clip_low_high is None:  # as train_ppo_ray does after parsing
        args.actor.eps_clip_low_high = (args.actor.eps_clip, args.actor.eps_clip)
    return args


def contract_settings(args: Any) -> dict[str, Any]:
    """The contract settings (``oracle.step.STEP_SETTINGS``) an OpenRLHF config runs."""
    estimator = args.algo.advantage.estimator
    if estimator not in _ESTIMATORS:
        raise SetupError(f"OpenRLHF estimator {estimator!r} has no step binding")
    if args.actor.policy_loss_type != "ppo" or args.algo.advantage.is_correction_level != "off":
        raise SetupError("only policy_loss_type ppo without IS correction has a step oracle")
    if args.algo.kl.unbiased_gradient or args.algo.advantage.no_std_norm:
        raise SetupError("unbiased_gradient and no_std_norm have no step oracle")
    kl = args.algo.kl
    low, high = args.actor.eps_clip_low_high
    return {
        "estimator": _ESTIMATORS[estimator],
        "norm_adv_by_std": estimator != "dr_grpo",
        "gamma": float(args.algo.advantage.gamma),
        "lam": float(args.algo.advantage.lambd),
        "kl_in_reward": not kl.use_loss,
        "kl_in_reward_estimator": kl.estimator,
        "kl_coef": float(kl.init_coef),
        "kl_ctrl": "adaptive" if kl.target else "fixed",
        "kl_target": float(kl.target) if kl.target else 0.1,
        "kl_horizon": float(kl.horizon),
        "kl_loss": bool(kl.use_loss),
        "kl_loss_estimator": kl.estimator,
        "kl_loss_coef": float(kl.init_coef),
        "policy_loss": "ppo_clip",
        "clip_low": float(low),
        "clip_high": float(high),
        "clip_ratio_c": args.actor.dual_clip,
        "entropy_coeff": float(args.actor.entropy_coef or 0.0),
        "loss_agg_mode": args.actor.loss_agg_mode,
        "critic": estimator == "gae",
        "cliprange_value": float(args.critic.value_clip),
    }


# --------------------------------------------------------------------- the trainer's code


def _method(root: Path, module: str, cls: str, name: str, namespace: dict[str, Any]) -> Any:
    """OpenRLHF's ``cls.name`` compiled from its source file in ``namespace``."""
    path = root / "openrlhf" / "trainer" / "ray" / f"{module}.py"
    tree = ast.parse(path.read_text())
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == name:
                    code = compile(ast.Module(body=[item], type_ignores=[]), str(path), "exec")
                    scope = dict(namespace)
                    exec(code, scope)  # noqa: S102 - OpenRLHF's own method
                    return scope[name]
    raise SetupError(f"{path}: no {cls}.{name} (is this a modified fork?)")


class _Strategy:
    """What ``training_step`` reads of ``DeepspeedStrategy`` on one rank."""

    def __init__(self, args: Any, accumulated_gradient: int):
        self.args = args
        self.accumulated_gradient = accumulated_gradient
        self.ring_attn_group = None

    def backward(self, loss: torch.Tensor, model: Any, optimizer: Any) -> None:
        # DeepSpeedEngine.backward scales the loss by 1 / gradient_accumulation_steps
        (loss / self.accumulated_gradient).backward()

    def optimizer_step(self, *args: Any, **kwargs: Any) -> None:
        return None

    def moving_average(self, *args: Any, **kwargs: Any) -> None:
        return None

    def get_grad_norm(self, model: Any) -> float:
        return 0.0

    def all_reduce(self, data: Any, op: str = "mean") -> Any:
        return data  # one rank

    def is_rank_0(self) -> bool:
        return True


class _Model:
    """The model of ``training_step``: the micro-batch's rows of the batch's leaves."""

    def __init__(self, rows: dict[str, torch.Tensor]):
        self.rows = rows

    def train(self) -> None:
        return None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        output = types.SimpleNamespace(entropy=self.rows.get("entropy"), aux_loss=None)
        return self.rows["out"], output


class StepOps:
    """The `step` operation of OpenRLHF's PPO trainer (module docstring)."""

    step_metric_names = STEP_METRIC_NAMES
    runtime: Any
    version: str

    def _step_args(self, name: str) -> Any:
        cache = self.__dict__.setdefault("_openrlhf_step_args", {})
        if name not in cache:
            flags = dict(OPENRLHF_STEP_CONFIGS).get(name)
            if flags is None:
                raise SetupError(f"OpenRLHF declares no trainer config {name!r}")
            cache[name] = shipped_args(self.runtime.root, flags)
        return cache[name]

    def trainer_configs(self) -> list[TrainerConfig]:
        """train_ppo_ray's default and named configs; none (no step binding) for a tree
        without the trainer's entry point (a stand-in or a library-only fork)."""
        cached = self.__dict__.get("_openrlhf_trainer_configs")
        if cached is None:
            cached = []
            if not (self.runtime.root / "openrlhf" / "cli" / "train_ppo_ray.py").is_file():
                self.__dict__["_openrlhf_trainer_configs"] = cached
                return []
            for name, flags in OPENRLHF_STEP_CONFIGS:
                args = self._step_args(name)
                native = {
                    "algo.advantage.estimator": args.algo.advantage.estimator,
                    "algo.kl.use_loss": args.algo.kl.use_loss,
                    "algo.kl.estimator": args.algo.kl.estimator,
                    "algo.kl.init_coef": args.algo.kl.init_coef,
                    "actor.loss_agg_mode": args.actor.loss_agg_mode,
                    **flags,
                }
                cached.append(
                    TrainerConfig(
                        name,
                        contract_settings(args),
                        native=native,
                        source=f"openrlhf {self.version} train_ppo_ray.py parser"
                        + (" with flags" if flags else ""),
                    )
                )
            self.__dict__["_openrlhf_trainer_configs"] = cached
        return list(cached)

    def _training_steps(self) -> tuple[Any, Any]:
        cached = self.__dict__.get("_openrlhf_training_steps")
        if cached is None:
            from dataclasses import fields

            rt = self.runtime
            models = __import__("openrlhf.models", fromlist=["aggregate_loss"])
            namespace = {
                "torch": torch,
                "Optional": Optional,
                "Dict": dict,
                "fields": fields,
                "Experience": rt.experience.Experience,
                "aggregate_loss": models.aggregate_loss,
                "compute_approx_kl": rt.utils.compute_approx_kl,
                "masked_mean": rt.utils.masked_mean,
                "get_loss_batch_info": rt.loss_utils.get_loss_batch_info,
                "merge_mm_train_inputs": None,  # only with multimodal inputs
            }
            cached = (
                _method(rt.root, "ppo_actor", "ActorPPOTrainer", "training_step", namespace),
                _method(rt.root, "ppo_critic", "CriticPPOTrainer", "training_step", namespace),
            )
            self.__dict__["_openrlhf_training_steps"] = cached
        return cached

    def train_step(self, batch: StepBatch, config: TrainerConfig, state: Any = None) -> StepOutput:
        """step.update: one PPO step of OpenRLHF on ``batch`` (module docstring)."""
        rt = self.runtime
        rows = len(batch.uids)
        if rows == 0:
            raise Inexpressible("a rollout of no samples: OpenRLHF's replay buffer is never empty")
        sizes = {len(mb) for mb in batch.micro_batches}
        if len(sizes) != 1:
            raise Inexpressible(
                "micro-batches of different sizes: ppo_train's DataLoader has one batch_size "
                "(micro_train_batch_size) and drop_last"
            )
        base = self._step_args(config.name)
        estimator = base.algo.advantage.estimator
        positions, group = group_positions(list(batch.index), rows, estimator)
        args = copy.deepcopy(base)
        args.rollout.n_samples_per_prompt = group
        args.rollout.batch_size = rows // group
        gas = len(batch.micro_batches)
        controller = state if _is_controller(rt, state) else _controller(rt, args)

        mask = batch.loss_mask.bool()
        old = batch.old_log_probs.detach()
        ref = batch.ref_log_probs.detach()
        # make_experience (transcribed lines; OpenRLHF's functions)
        if not args.algo.kl.use_loss:
            kl = rt.utils.compute_approx_kl(old, ref, kl_estimator=args.algo.kl.estimator)
        else:
            kl = torch.zeros_like(old)
        info_kl = rt.utils.masked_mean(kl, mask, dim=-1)
        Experience = rt.experience.Experience
        experience = Experience(
            action_mask=mask,
            rewards=batch.scores.detach().clone(),
            kl=kl,
            values=batch.values.detach() if batch.values is not None else None,
            index=positions,
            info={"kl": info_kl, "reward": batch.scores.detach().clone()},
        )
        maker = self.experience_maker(args, 0.0)
        maker.kl_ctl = controller
        (experience,) = maker.compute_advantages_and_returns([experience])
        advantages, returns = experience.advantages, experience.returns

        actor_step, critic_step = self._training_steps()
        micro = []
        for indices in batch.micro_batches:
            index = torch.tensor(indices, dtype=torch.long)
            micro.append(
                Experience(
                    sequences=torch.zeros((len(indices), 1), dtype=torch.long),
                    attention_mask=torch.ones((len(indices), 1), dtype=torch.long),
                    action_mask=mask.index_select(0, index),
                    action_log_probs=old.index_select(0, index),
                    base_action_log_probs=ref.index_select(0, index)
                    if args.algo.kl.use_loss
                    else None,
                    values=batch.values.detach().index_select(0, index)
                    if batch.values is not None
                    else None,
                    advantages=advantages.index_select(0, index),
                    returns=returns.index_select(0, index),
                    index=[positions[i] for i in indices],
                    info={
                        k: v.index_select(0, index)
                        for k, v in experience.info.items()
                        if isinstance(v, torch.Tensor) and v.dim() > 0
                    },
                )
            )
        strategy = _Strategy(args, gas)
        metrics: dict[str, float] = {}
        value_loss = None
        if config.resolved["critic"]:
            critic = _trainer(
                strategy, args, critic_loss_fn=rt.loss.ValueLoss(args.critic.value_clip)
            )
            value_loss, critic_status = self._ppo_train(
                critic_step, critic, micro, batch, {"out": batch.vpreds}, critic=True
            )
            metrics.update(critic_status)
        actor = _trainer(strategy, args, actor_loss_fn=_policy_loss(rt, args))
        actor.kl_coef = float(controller.value)  # PPOTrainer: fit(kl_ctl=self.kl_ctl.value)
        leaves = {"out": batch.log_probs, "entropy": batch.entropy}
        loss, actor_status = self._ppo_train(actor_step, actor, micro, batch, leaves, critic=False)
        metrics.update(actor_status)
        # PPOTrainer.fit: the controller sees the step's KL
        controller.update(actor_status.get("kl", 0.0), args.rollout.batch_size * group)
        return StepOutput(
            loss=loss,
            value_loss=value_loss,
            stages={"advantages": advantages, "returns": returns},
            metrics=metrics,
            state={"kl_coef": float(controller.value)},
            carry=controller,
        )

    def _ppo_train(
        self,
        step_fn: Any,
        trainer: Any,
        micro: list[Any],
        batch: StepBatch,
        leaves: dict[str, torch.Tensor],
        critic: bool,
    ) -> tuple[float, dict[str, float]]:
        """``ppo_train`` over one optimizer step: ``iter_grad_accum_global_norm`` pairs each
        micro-batch with the step's normalisers; the status merging is transcribed."""
        pairs = self.runtime.loss_utils.iter_grad_accum_global_norm(
            micro, trainer.strategy, trainer.strategy.accumulated_gradient, lambda e: e.action_mask
        )
        total = 0.0
        status_list = []
        for step, ((experience, info), indices) in enumerate(zip(pairs, batch.micro_batches)):
            index = torch.tensor(indices, dtype=torch.long)
            rows = {k: v.index_select(0, index) for k, v in leaves.items() if v is not None}
            name = "critic" if critic else "actor"
            setattr(trainer, name, _Model(rows))
            captured = _Capture(trainer.strategy)
            trainer.strategy = captured
            try:
                if critic:
                    status = step_fn(trainer, experience, step, info)
                else:
                    status = step_fn(trainer, experience, trainer.kl_coef, step, info)
            finally:
                trainer.strategy = captured.inner
            total += captured.loss
            status_list.append(status)
        if critic:
            return total, _critic_status(status_list)
        return total, _actor_status(status_list)


class _Capture:
    """The strategy, recording the loss each ``backward`` back-propagates (after
    DeepSpeed's 1 / accumulation-steps scaling: what reaches the gradient)."""

    def __init__(self, inner: _Strategy):
        self.inner = inner
        self.loss = 0.0

    def backward(self, loss: torch.Tensor, model: Any, optimizer: Any) -> None:
        self.loss += float(loss.detach()) / self.inner.accumulated_gradient
        self.inner.backward(loss, model, optimizer)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def _trainer(strategy: _Strategy, args: Any, **fields: Any) -> Any:
    scheduler = types.SimpleNamespace(get_last_lr=lambda: [0.0])
    trainer = types.SimpleNamespace(
        strategy=strategy,
        args=args,
        aux_loss=args.actor.aux_loss_coef > 1e-8,
        ema_model=None,
        replay_buffer=None,
        actor_optim=None,
        critic_optim=None,
        actor_scheduler=scheduler,
        critic_scheduler=scheduler,
        kl_coef=0.0,
        **fields,
    )
    return trainer


def _policy_loss(rt: Any, args: Any) -> Any:
    """``ActorPPOTrainer.__init__``'s ``PolicyLoss`` from the config."""
    return rt.loss.PolicyLoss(
        clip_eps_low=args.actor.eps_clip_low_high[0],
        clip_eps_high=args.actor.eps_clip_low_high[1],
        dual_clip=args.actor.dual_clip,
        token_level_loss=args.actor.loss_agg_mode == "token-mean",
        policy_loss_type=args.actor.policy_loss_type,
        is_correction_level=args.algo.advantage.is_correction_level,
        is_correction_mode=args.algo.advantage.is_correction_mode,
        is_correction_gating=args.algo.advantage.is_correction_gating,
        is_correction_threshold=args.algo.advantage.is_correction_threshold,
    )


def _controller(rt: Any, args: Any) -> Any:
    """``PPOTrainer.__init__``'s ``kl_ctl``."""
    kl = args.algo.kl
    if kl.target:
        return rt.kl_controller.AdaptiveKLController(kl.init_coef, kl.target, kl.horizon)
    return rt.kl_controller.FixedKLController(kl.init_coef)


def _is_controller(rt: Any, state: Any) -> bool:
    return isinstance(
        state, rt.kl_controller.AdaptiveKLController | rt.kl_controller.FixedKLController
    )


def _scalar(value: Any) -> float:
    return float(value.float().mean().item()) if isinstance(value, torch.Tensor) else float(value)


def _actor_status(status_list: list[dict[str, Any]]) -> dict[str, float]:
    """``ActorPPOTrainer.ppo_train``'s merging (one rank): per micro-batch each metric times
    its weight (tokens or samples) over the same count; then over micro-batches the
    token- or sample-weighted mean."""
    merged_list = []
    for status in status_list:
        metrics, weights = status["metrics"], status["weights"]
        n_tokens, n_samples = status["num_action_tokens"], status["num_samples"]
        merged = {}
        for key, value in metrics.items():
            weight = weights[key]
            if weight is None:
                continue
            merged[key] = _scalar(value)  # value * count, all-reduced (one rank), / count
        merged["_tokens"], merged["_samples"], merged["_weights"] = n_tokens, n_samples, weights
        merged_list.append(merged)
    total_tokens = sum(m["_tokens"] for m in merged_list)
    total_samples = sum(m["_samples"] for m in merged_list)
    out = {}
    for key in set().union(*(m.keys() for m in merged_list)):
        if key.startswith("_"):
            continue
        if merged_list[0]["_weights"].get(key) == "token":
            out[key] = sum(m.get(key, 0) * m["_tokens"] for m in merged_list) / total_tokens
        else:
            out[key] = sum(m.get(key, 0) * m["_samples"] for m in merged_list) / total_samples
    return out


def _critic_status(status_list: list[dict[str, Any]]) -> dict[str, float]:
    """``CriticPPOTrainer.ppo_train``: the plain mean of each status over micro-batches."""
    keys = status_list[0].keys()
    return {k: sum(float(s[k]) for s in status_list) / len(status_list) for k in keys}


__all__ = ["StepOps", "OPENRLHF_STEP_CONFIGS", "contract_settings", "shipped_args"]
_ = dataclasses  # dataclasses.fields is handed to training_step's namespace

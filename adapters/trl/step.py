"""TRL binding of the CONTRACT area `step`: one optimizer step of ``GRPOTrainer``, end to end.

The path, read from ``trl/trainer/grpo_trainer.py`` and ``transformers``' ``Trainer``:

1. ``_prepare_inputs`` calls ``_generate_and_score_completions`` once per generation batch
   (``per_device_train_batch_size * steps_per_generation`` completions; one optimizer step
   under the defaults, where ``steps_per_generation = gradient_accumulation_steps``): the
   reward functions' scores become advantages (group mean / std over contiguous groups of
   ``num_generations``), ``num_items_in_batch`` is the generation batch's loss-mask sum, the
   reference log-probs are computed when ``beta != 0`` and the old ones only when the
   batch is reused (``num_iterations > 1``) or vLLM's IS correction is on; otherwise
   ``_compute_loss`` takes the current log-probs, detached, as the old ones (the config's
   ``on_policy`` setting). The batch is then shuffled (``shuffle_sequence_dict``; the step
   batch's order is the shuffled one) and split into ``steps_per_generation`` equal
   micro-batches (``split_tensor_dict``, called here);
2. ``Trainer.training_step`` per micro-batch: ``compute_loss -> _compute_loss`` on the
   micro-batch, then ``accelerator.backward(loss)``; the loss is not divided again
   (``GRPOTrainer.loss_is_scaled_for_ga = True``: ``_compute_loss`` divides by
   ``current_gradient_accumulation_steps`` itself where its loss type needs it);
3. the metrics ``_compute_loss`` and the scoring append to ``_metrics['train']`` are logged
   by ``GRPOTrainer.log`` as the mean of each list's non-NaN values (transcribed: ``log``
   then hands them to ``Trainer.log``, which needs a training state).

The model is outside: the shell's ``_get_per_token_logps_and_entropies`` returns the
micro-batch's rows of the batch's leaf log-probs and entropies (for the scoring pass: the
batch's old and reference log-probs), so TRL's own code builds the graph that reaches the
leaves. Trainer configs are ``GRPOConfig``'s: ``default`` is ``GRPOConfig()`` as installed,
each named config a set of ``GRPOConfig`` fields, and the contract settings are read off the
config (``contract_settings``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from rlconform.adapters.base import Inexpressible, SetupError
from rlconform.adapters.step_io import StepBatch, StepOutput
from rlconform.adapters.trl import layout
from rlconform.conformance.trainer_config import TrainerConfig

# The named configs: GRPOConfig fields a user sets (the rest: GRPOConfig's defaults).
TRL_STEP_CONFIGS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("default", {}),
    # use_bias_correction_kl (default True) weights the KL by the IS ratio: no step oracle
    ("grpo_kl", {"loss_type": "grpo", "beta": 0.04, "use_bias_correction_kl": False}),
    ("bnpo", {"loss_type": "bnpo"}),
    ("dr_grpo", {"loss_type": "dr_grpo", "scale_rewards": "none"}),
    ("entropy_bonus", {"entropy_coef": 0.01}),
    ("two_iterations", {"num_iterations": 2}),
    ("sapo", {"loss_type": "sapo"}),
)

# TRL loss type -> the contract's aggregation mode of its normaliser
_AGG_MODES = {
    "dapo": "token-mean",
    "bnpo": "token-mean",
    "grpo": "seq-mean-token-mean",
    "luspo": "seq-mean-token-sum",
    "dr_grpo": "seq-mean-token-sum-norm",
    "sapo": "seq-mean-token-mean",  # _compute_loss: sapo shares grpo's normaliser
}

# contract metric -> TRL's logged name
STEP_METRIC_NAMES = {
    "policy_loss": "policy_loss",
    "entropy": None,  # TRL logs the mean entropy, not the entropy term as aggregated
    "entropy/mean": "entropy",
    "kl_loss": None,  # likewise for the KL term
    "kl_loss/mean": "kl",
    "clip_fraction": "clip_ratio/region_mean",
    "score/mean": "reward",
    "response_length/mean": "completions/mean_length",
}

# the fields of the generation batch that are per completion (split into micro-batches)
_PER_SAMPLE = (
    "prompt_ids",
    "prompt_mask",
    "completion_ids",
    "completion_mask",
    "advantages",
    "old_per_token_logps",
    "ref_per_token_logps",
    "tool_mask",
)


def contract_settings(args: Any) -> dict[str, Any]:
    """The contract settings (``oracle.step.STEP_SETTINGS``) a ``GRPOConfig`` runs."""
    if args.loss_type not in _AGG_MODES:
        raise SetupError(f"TRL loss_type {args.loss_type!r} has no step binding")
    if args.importance_sampling_level != "token":
        raise SetupError("importance_sampling_level 'sequence' (GSPO) has no step oracle")
    if args.scale_rewards not in ("group", "none"):
        raise SetupError(f"scale_rewards {args.scale_rewards!r} has no step oracle")
    if args.beta != 0.0 and args.use_bias_correction_kl:
        raise SetupError("use_bias_correction_kl (the IS-weighted KL term) has no step oracle")
    if args.delta is not None or args.use_adaptive_entropy:
        raise SetupError("delta and adaptive entropy have no step oracle")
    if args.top_entropy_quantile < 1.0 or args.off_policy_mask_threshold is not None:
        raise SetupError("top_entropy_quantile < 1 and the off-policy mask have no step oracle")
    high = args.epsilon_high if args.epsilon_high is not None else args.epsilon
    mode = _AGG_MODES[args.loss_type]
    generate_every = args.steps_per_generation * args.num_iterations
    return {
        "estimator": "grpo",
        "norm_adv_by_std": args.scale_rewards != "none",
        "kl_in_reward": False,
        "kl_loss": args.beta != 0.0,
        "kl_loss_estimator": "k3",
        "kl_loss_coef": float(args.beta),
        "policy_loss": "sapo" if args.loss_type == "sapo" else "ppo_clip",
        "sapo_tau_pos": float(args.sapo_temperature_pos),
        "sapo_tau_neg": float(args.sapo_temperature_neg),
        "clip_low": float(args.epsilon),
        "clip_high": float(high),
        "entropy_coeff": float(args.entropy_coef),
        "loss_agg_mode": mode,
        "norm_length": (
            float(args.max_completion_length) if mode == "seq-mean-token-sum-norm" else None
        ),
        "critic": False,
        # _generate_and_score_completions keeps old log-probs only when the generation
        # batch outlives one optimizer step or vLLM's IS correction needs them
        "on_policy": (
            args.gradient_accumulation_steps % generate_every == 0
            and not (args.use_vllm and args.vllm_importance_sampling_correction)
        ),
    }


class StepOps:
    """The `step` operation of ``GRPOTrainer`` (module docstring)."""

    step_metric_names = STEP_METRIC_NAMES
    step_configs: tuple[tuple[str, dict[str, Any]], ...] = TRL_STEP_CONFIGS
    config_source_note = ""  # what a branch of GRPOTrainer adds to every config (report)
    # the step's completions all finished (a config masking truncated ones keeps them); off
    # for the TRL targets, whose reports were generated with truncated ones (no config of
    # theirs reads it)
    completions_end_on_eos = False
    shell: Any
    runtime: Any  # the TRL runtime (its version names the GRPOConfig)
    version: str

    def trainer_configs(self) -> list[TrainerConfig]:
        cached = self.__dict__.get("_trl_trainer_configs")
        if cached is None:
            cached = []
            for name, fields in self.step_configs:
                args = self._step_config(**fields)
                cached.append(
                    TrainerConfig(
                        name,
                        contract_settings(args),
                        native=_native(fields, args),
                        # TRL's version: Unsloth's target is versioned by unsloth-zoo
                        source=f"trl {self.runtime.version} GRPOConfig"
                        f"({self.config_source_note})" + (" with fields" if fields else ""),
                    )
                )
            self.__dict__["_trl_trainer_configs"] = cached
        return list(cached)

    def train_step(self, batch: StepBatch, config: TrainerConfig, state: Any = None) -> StepOutput:
        """step.update: one optimizer step of GRPOTrainer on ``batch`` (module docstring)."""
        from trl.trainer.utils import split_tensor_dict

        fields = dict(self.step_configs).get(config.name)
        if fields is None:
            raise SetupError(f"TRL declares no trainer config {config.name!r}")
        rows = len(batch.uids)
        lengths = [int(n) for n in batch.response_mask.sum(-1).tolist()]
        if rows == 0:
            raise Inexpressible("TRL scores a generation batch of at least one group")
        if min(lengths) == 0:
            raise Inexpressible(
                "a completion of no token: TRL's generator returns at least the token it stopped on"
            )
        sizes = {len(mb) for mb in batch.micro_batches}
        if len(sizes) != 1:
            raise Inexpressible(
                "micro-batches of different sizes: split_tensor_dict cuts the generation "
                "batch into steps_per_generation equal slices"
            )
        grouping = layout.group_order(list(batch.index))
        if grouping is None:
            raise Inexpressible(
                "TRL's groups all hold num_generations completions; this batch has groups "
                "of different sizes"
            )
        order, group_size = grouping
        n_micro = len(batch.micro_batches)
        args = self._step_config(
            **fields,
            num_generations=group_size,
            per_device_train_batch_size=sizes.pop(),
            gradient_accumulation_steps=n_micro,
        )
        if contract_settings(args) != {
            k: v for k, v in config.resolved.items() if k in contract_settings(args)
        }:
            raise SetupError(f"TRL config {config.name!r}: settings differ at these batch sizes")
        trainer = self._step_trainer(args, n_micro)
        width = batch.response_mask.shape[1]
        longest = max(lengths)
        perm = torch.tensor(order, dtype=torch.long)
        tool = [[int(x) for x in batch.loss_mask[i, : lengths[i]].tolist()] for i in range(rows)]
        scored, _ = self.shell.generate_and_score(
            args,
            lengths=[lengths[i] for i in order],
            tool_masks=[tool[i] for i in order],
            rewards_per_func=batch.scores.detach().to("cpu", torch.float32)[perm].reshape(-1, 1),
            old=batch.old_log_probs.detach()[perm][:, :longest].to(torch.float32),
            ref=batch.ref_log_probs.detach()[perm][:, :longest].to(torch.float32),
            trainer=trainer,
            end_on_eos=self.completions_end_on_eos,
        )
        if ("old_per_token_logps" in scored) == bool(config.resolved["on_policy"]):
            raise SetupError(
                f"TRL config {config.name!r}: on_policy setting disagrees with the trainer "
                "(it kept old log-probs: " + str("old_per_token_logps" in scored) + ")"
            )
        # the shuffle lands on the step batch's order
        inverse = torch.empty_like(perm)
        inverse[perm] = torch.arange(rows)
        generation = {
            k: (v[inverse] if k in _PER_SAMPLE and isinstance(v, torch.Tensor) else v)
            for k, v in scored.items()
        }
        chunks = split_tensor_dict(generation, n_micro)
        logp = _cut(batch.log_probs, longest)
        entropy = _cut(batch.entropy, longest)
        total = 0.0
        for rows_of_mb, inputs in zip(batch.micro_batches, chunks):
            index = torch.tensor(rows_of_mb, dtype=torch.long)
            loss = self._micro_batch_loss(
                trainer, inputs, logp.index_select(0, index), entropy.index_select(0, index)
            )
            loss.backward()  # Trainer.training_step: accelerator.backward(loss), no rescale
            total += float(loss.detach())
        advantages = layout.on_actions(
            generation["advantages"].to(batch.scores.dtype), batch.response_mask
        )
        return StepOutput(
            loss=total,
            stages={"advantages": layout.widen(advantages, width)},
            metrics=_logged(trainer._metrics["train"]),
            state={},
        )

    # -- what a branch of GRPOTrainer changes (adapters/trl_liger overrides them) --------

    def _step_config(self, **fields: Any) -> Any:
        return self.shell.config(**fields)

    def _step_trainer(self, args: Any, n_micro: int) -> Any:
        return self.shell.trainer(args, accumulation_steps=n_micro)

    def _micro_batch_loss(
        self, trainer: Any, inputs: dict[str, Any], logps: torch.Tensor, entropies: torch.Tensor
    ) -> torch.Tensor:
        """``compute_loss``'s default branch, ``_compute_loss``, on one micro-batch; the
        shell's ``_get_per_token_logps_and_entropies`` returns the micro-batch's leaf rows."""
        given = (logps, entropies)

        def per_token_logps(model: Any, *a: Any, **k: Any) -> tuple[Any, ...]:
            return (*given, None) if self.shell.bindings.logps_returns_aux else given

        trainer._get_per_token_logps_and_entropies = per_token_logps
        return trainer._compute_loss(self.shell._policy, inputs)


def _cut(tensor: torch.Tensor, longest: int) -> torch.Tensor:
    """The batch's (B, width) leaf as TRL's completion tensors are wide (the generation
    batch's longest completion); slicing keeps the graph to the leaf."""
    return tensor[:, :longest]


def _logged(metrics: Mapping[str, Sequence[float]]) -> dict[str, float]:
    """``GRPOTrainer.log``: each metric's list of appended values, averaged over its
    non-NaN values; when none is left TRL logs None, a lost value, reported here as NaN."""
    out = {}
    for key, values in metrics.items():
        valid = [float(v) for v in values if not math.isnan(float(v))]
        out[key] = sum(valid) / len(valid) if valid else math.nan
    return out


def _native(fields: Mapping[str, Any], args: Any) -> dict[str, Any]:
    keys = ("loss_type", "beta", "epsilon", "scale_rewards", "num_iterations", "entropy_coef")
    native = {k: getattr(args, k) for k in keys}
    native.update(fields)
    return native

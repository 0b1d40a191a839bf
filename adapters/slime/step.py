"""slime binding of the CONTRACT area `step`: one optimizer step of slime's Megatron actor.

The path, read from slime 624b824 (``slime/ray/rollout.py``,
``slime/backends/megatron_utils/actor.py``, ``model.py``, ``loss.py``):

1. the rollout side: ``RolloutManager._post_process_rewards`` (group normalisation for
   grpo and reinforce_plus_plus_baseline) turns the scores into the ``rewards`` of the
   train data; ``_convert_samples_to_train_data`` gives ``rollout_mask_sums`` (one rollout
   per sample here: each sample's own mask sum);
2. ``MegatronTrainRayActor.train_actor``: the old log-probs are recomputed
   (``rollout_data["log_probs"]``) unless ``can_reuse_log_probs_in_loss`` holds, the
   reference ones when KL is used; then ``compute_advantages_and_returns(args,
   rollout_data)``, called as it is (the critic's values for ppo);
3. ``train_one_step`` per micro-batch: ``loss_function(args, batch, num_microbatches,
   step_global_batch_size, logits)`` (``policy_loss_function`` / ``value_loss_function``
   and slime's reducer), then what Megatron does with its output, which is not installed
   here and is reproduced as megatron-core's ``forward_step_calc_loss`` /
   ``finalize_model_grads`` do it (``pipeline_parallel/schedules.py``,
   ``distributed/finalize_model_grads.py``): without ``--calculate-per-token-loss`` the
   loss is divided by ``max(normalizer, 1)`` (1 here) and by ``num_microbatches`` before
   ``backward`` (DDP's 1/dp is 1 on one rank); with it, each loss is back-propagated
   as it is and the gradients are divided by the step's total token count (the
   normalisers summed over micro-batches) after the last one;
4. ``reduce_train_step_metrics`` on the micro-batches' log dicts, as ``train_one_step``
   calls it.

The model is outside. slime computes the current log-probs itself, from logits
(``get_log_probs_and_entropy``, float32), so the binding hands it logits built as a
differentiable function of the harness's log-prob leaves: a vocabulary of two tokens,
``z = [lp, log(1 - exp(lp))]``, every target token id 0. Then ``log_softmax(z)[0] = lp``
and the chain rule returns slime's gradient to the leaf unchanged (the log-sum-exp does
not depend on lp). Consequences, each named where it applies:

- an action token's log-prob must be a log-probability with a usable gradient: one at or
  above ``-1e-30`` (probability 1 in float32, where log-softmax has no gradient) or above
  0 is ``Inexpressible``;
- at a tool token (mask 0) a value that is no log-probability gets the logits of
  probability 1/2 (no gradient path matters there: a correct trainer ignores the token);
  NaN or infinite values become NaN logits, as a broken model's would;
- slime's entropy is the logits' own: the case's entropies cannot be met (no distribution
  has an arbitrary (log-prob, entropy) pair). Every declared config keeps slime's default
  ``entropy_coef = 0`` (the entropy has no gradient) and the entropy metric is not
  compared; a config with an entropy bonus is a SetupError.

Trainer configs are slime's own flags: ``default`` is the parser's defaults
(``loader.argument_defaults``), each named config a set of flags; the two rules of
``slime_validate_args`` the step reads are transcribed (``eps_clip_high`` defaults to
``eps_clip``; ``use_critic`` iff ``advantage_estimator == "ppo"``). One step per rollout
(``global_batch_size = rollout_batch_size * n_samples_per_prompt``, slime's documented
setting), one data-parallel rank, context parallel 1.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import importlib
import os
from collections.abc import Iterator, Sequence
from typing import Any

import torch

from rlconform.adapters.base import Inexpressible, SetupError
from rlconform.adapters.logits_from_logprobs import two_token_logits
from rlconform.adapters.slime import layout, loader, runtime
from rlconform.adapters.step_io import StepBatch, StepOutput
from rlconform.conformance.trainer_config import TrainerConfig

# The named configs: slime flags a user sets (the rest: slime's defaults).
SLIME_STEP_CONFIGS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("default", {}),
    (
        "grpo_kl_loss",
        {"use_kl_loss": True, "kl_loss_coef": 0.01, "kl_loss_type": "low_var_kl"},
    ),
    ("per_token_loss", {"calculate_per_token_loss": True}),
    ("dr_grpo", {"grpo_std_normalization": False}),
    (
        "reinforce_pp_kl_in_reward",
        {
            "advantage_estimator": "reinforce_plus_plus",
            "normalize_advantages": True,
            "kl_coef": 0.01,
        },
    ),
    ("ppo_gae", {"advantage_estimator": "ppo"}),
)

_ESTIMATORS = {
    "grpo": "grpo",
    "reinforce_plus_plus": "reinforce_pp",
    "reinforce_plus_plus_baseline": "reinforce_pp_baseline",
    "ppo": "gae",
}
_KL = {"k1": "k1", "k2": "k2", "low_var_kl": "k3"}

# contract metric -> slime's logged name (reduce_train_step_metrics' keys)
STEP_METRIC_NAMES = {
    "policy_loss": "pg_loss",
    "entropy": None,  # the logits' entropy, not the case's (module docstring)
    "entropy/mean": None,
    "kl_loss": "kl_loss",
    "clip_fraction": "pg_clipfrac",
    "value_loss": "value_loss",
    "value_clip_fraction": "value_clipfrac",
}

# the slime flags the step reads (a tree whose parser lacks one has no step binding)
_READS = (
    "advantage_estimator",
    "rewards_normalization",
    "grpo_std_normalization",
    "normalize_advantages",
    "gamma",
    "lambd",
    "kl_coef",
    "kl_loss_type",
    "use_kl_loss",
    "kl_loss_coef",
    "use_unbiased_kl",
    "eps_clip",
    "eps_clip_high",
    "eps_clip_c",
    "entropy_coef",
    "calculate_per_token_loss",
    "value_clip",
    "use_rollout_logprobs",
    "use_tis",
    "get_mismatch_metrics",
    "use_opsm",
    "use_opd",
    "custom_advantage_function_path",
    "custom_pg_loss_reducer_function_path",
    "keep_old_actor",
)


def _validated(args: argparse.Namespace) -> argparse.Namespace:
    """The two rules of ``slime_validate_args`` the step reads (transcribed: the function
    also checks checkpoint paths and cluster settings)."""
    if args.eps_clip_high is None:
        args.eps_clip_high = args.eps_clip
    args.use_critic = args.advantage_estimator == "ppo"
    return args


def reuses_log_probs(args: argparse.Namespace) -> bool:
    """``train_actor``'s ``can_reuse_log_probs_in_loss`` for a rollout of one step: the
    old log-probs are then the current ones, detached (``policy_loss_function``)."""
    return (
        args.loss_type == "policy_loss"
        and args.kl_coef == 0
        and not args.use_rollout_logprobs
        and not args.get_mismatch_metrics
        and not args.use_critic
        and not args.keep_old_actor
        and not args.use_opd
        and args.advantage_estimator != "gspo"
    )


def contract_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The contract settings (``oracle.step.STEP_SETTINGS``) a slime config runs."""
    estimator = args.advantage_estimator
    if estimator not in _ESTIMATORS:
        raise SetupError(f"slime --advantage-estimator {estimator} has no step oracle")
    if args.custom_advantage_function_path or args.custom_pg_loss_reducer_function_path:
        raise SetupError("a custom advantage or reducer function has no step oracle")
    if args.use_tis or args.use_opsm or args.use_opd or args.use_unbiased_kl:
        raise SetupError("TIS, OPSM, OPD and the unbiased KL have no step binding")
    if args.entropy_coef != 0:
        raise SetupError(
            "--entropy-coef != 0: the entropy bonus needs logits leaves (module docstring)"
        )
    if args.kl_loss_type not in _KL:
        raise SetupError(f"slime --kl-loss-type {args.kl_loss_type} has no step binding")
    if estimator == "grpo" and args.normalize_advantages:
        raise SetupError("grpo with --normalize-advantages has no step oracle")
    if estimator == "grpo" and not args.rewards_normalization:
        raise SetupError("grpo with --disable-rewards-normalization has no step oracle")
    if estimator == "reinforce_plus_plus_baseline" and args.kl_coef != 0:
        raise SetupError("reinforce_plus_plus_baseline with --kl-coef has no step binding")
    # grpo's returns ignore the rollout KL (get_grpo_returns): no KL in its reward
    kl_in_reward = args.kl_coef != 0 and estimator in ("ppo", "reinforce_plus_plus")
    return {
        "estimator": _ESTIMATORS[estimator],
        "norm_adv_by_std": bool(args.grpo_std_normalization),
        "gamma": float(args.gamma),
        "lam": float(args.lambd),
        "whiten_advantages": True if estimator == "grpo" else bool(args.normalize_advantages),
        "kl_in_reward": kl_in_reward,
        "kl_in_reward_estimator": _KL[args.kl_loss_type],
        "kl_coef": float(args.kl_coef),
        "kl_ctrl": "fixed",
        "kl_loss": bool(args.use_kl_loss),
        "kl_loss_estimator": _KL[args.kl_loss_type],
        "kl_loss_coef": float(args.kl_loss_coef),
        "policy_loss": "ppo_clip",
        "clip_low": float(args.eps_clip),
        "clip_high": float(args.eps_clip_high),
        "clip_ratio_c": None if args.eps_clip_c is None else float(args.eps_clip_c),
        "entropy_coeff": 0.0,
        "loss_agg_mode": "token-mean" if args.calculate_per_token_loss else "seq-mean-token-mean",
        "critic": bool(args.use_critic),
        "cliprange_value": float(args.value_clip),
        "value_loss_scale": 1.0,  # value_loss_function: max of the squared errors, no 1/2
        "on_policy": reuses_log_probs(args),
    }


@contextlib.contextmanager
def _uncompiled_globals() -> Iterator[None]:
    """``loss.py`` calls ``compute_approx_kl`` / ``compute_policy_loss`` /
    ``compute_cispo_loss`` through its module globals, which are the ``@torch.compile``
    wrappers; for the block they are the undecorated functions (the adapter's policy:
    ``adapters/slime/__init__.py``). ``RLCONFORM_SLIME_COMPILED=1`` keeps them compiled."""
    if os.environ.get("RLCONFORM_SLIME_COMPILED") == "1":
        yield
        return
    module = importlib.import_module("slime.backends.megatron_utils.loss")
    names = ("compute_approx_kl", "compute_policy_loss", "compute_cispo_loss")
    saved = {n: getattr(module, n) for n in names if hasattr(module, n)}
    for name, fn in saved.items():
        setattr(module, name, loader.uncompiled(fn))
    try:
        yield
    finally:
        for name, fn in saved.items():
            setattr(module, name, fn)


def _logits(rows: Sequence[torch.Tensor], masks: Sequence[torch.Tensor]) -> torch.Tensor:
    """The packed ``[1, sum(L_i + 1), 2]`` float32 logits whose log-softmax at token id 0
    is each sample's leaf log-prob row, a one-token prompt first (module docstring;
    ``adapters/logits_from_logprobs.py``)."""
    pieces = []
    for i, (lp, mask) in enumerate(zip(rows, masks, strict=True)):
        token = two_token_logits(lp, mask, framework="slime", sample=i)
        prompt_and_tail = torch.zeros((1, 2), dtype=lp.dtype, device=lp.device)
        # position p predicts token p + 1: the prompt's logits give response token 0, the
        # last response token's logits predict nothing (zeros)
        pieces.append(torch.cat([token, prompt_and_tail], dim=0))
    packed = torch.cat(pieces, dim=0) if pieces else torch.zeros((0, 2))
    return packed.to(torch.float32).unsqueeze(0)


def _values_head(rows: Sequence[torch.Tensor], masks: Sequence[torch.Tensor]) -> torch.Tensor:
    """The packed ``[1, sum(L_i + 1), 1]`` value-head output (as ``SlimeLossOps.value_loss``;
    every position carries its value, the masks are not needed)."""
    pieces = [torch.cat([r, r.new_zeros(1)]) for r in rows]
    return torch.cat(pieces).to(torch.float32).reshape(1, -1, 1)


def _f32(rows: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    return [r.detach().to(torch.float32) for r in rows]


class SlimeStepOps:
    """The `step` operation of slime's Megatron actor (module docstring)."""

    step_metric_names = STEP_METRIC_NAMES

    def _slime_args(self, name: str) -> argparse.Namespace:
        cache = self.__dict__.setdefault("_slime_step_args", {})
        if name not in cache:
            flags = dict(SLIME_STEP_CONFIGS).get(name)
            if flags is None:
                raise SetupError(f"slime declares no trainer config {name!r}")
            defaults = self.__dict__.get("_slime_arg_defaults")
            if defaults is None:
                defaults = loader.argument_defaults()
                self.__dict__["_slime_arg_defaults"] = defaults
            unknown = sorted(set(flags) - set(vars(defaults)))
            if unknown:
                raise SetupError(f"slime's parser has no flag for {', '.join(unknown)}")
            args = copy.deepcopy(defaults)
            for key, value in flags.items():
                setattr(args, key, value)
            cache[name] = _validated(args)
        return cache[name]

    def trainer_configs(self) -> list[TrainerConfig]:
        """slime's default and named configs; none for a tree without the functions the
        step calls or whose parser lacks a flag the step reads."""
        cached = self.__dict__.get("_slime_trainer_configs")
        if cached is not None:
            return list(cached)
        cached = []
        needs = ("loss_function", "compute_advantages_and_returns", "post_process_rewards")
        if all(getattr(self.fw, n, None) is not None for n in needs):
            try:
                defaults = self._slime_args("default")
            except SetupError:
                defaults = None
            if defaults is not None and set(_READS) <= set(vars(defaults)):
                for name, flags in SLIME_STEP_CONFIGS:
                    args = self._slime_args(name)
                    native = {k: getattr(args, k) for k in _READS}
                    cached.append(
                        TrainerConfig(
                            name,
                            contract_settings(args),
                            native={**native, **flags},
                            source=f"slime {self.version} argument defaults"
                            + (" with flags" if flags else ""),
                        )
                    )
        self.__dict__["_slime_trainer_configs"] = cached
        return list(cached)

    def train_step(self, batch: StepBatch, config: TrainerConfig, state: Any = None) -> StepOutput:
        """step.update: one step of slime's actor (and critic for ppo) on ``batch``."""
        n = len(batch.uids)
        if n == 0:
            raise Inexpressible("a rollout of no samples: slime's step size is never 0")
        args = copy.copy(self._slime_args(config.name))
        lengths = layout.lengths_from_mask(batch.response_mask)
        masks = [batch.loss_mask[i, :L].to(torch.int64) for i, L in enumerate(lengths)]
        old = _f32(layout.to_lists(batch.old_log_probs, lengths))
        ref = _f32(layout.to_lists(batch.ref_log_probs, lengths))
        rewards = self._step_rewards(args, batch)
        rollout_data: dict[str, Any] = {
            "rewards": rewards,
            "raw_reward": [float(s) for s in batch.scores.tolist()],
            "response_lengths": list(lengths),
            "total_lengths": [L + 1 for L in lengths],
            "loss_masks": masks,
            # the rollout engine's log-probs are the old ones (a step batch has no separate
            # record); with the defaults they only size the zero KL and feed a metric
            "rollout_log_probs": [r.clone() for r in old],
            "rollout_mask_sums": torch.tensor([int(m.sum()) for m in masks]),
            "unconcat_tokens": [torch.zeros(L + 1, dtype=torch.long) for L in lengths],
        }
        if not reuses_log_probs(args):
            rollout_data["log_probs"] = old
        if args.kl_coef != 0 or args.use_kl_loss:
            rollout_data["ref_log_probs"] = ref
        if args.use_critic:
            rollout_data["values"] = _f32(layout.to_lists(batch.values, lengths))
        with runtime.one_rank_job(), _uncompiled_globals():
            self.fw.compute_advantages_and_returns(args, rollout_data)
            stages = {
                "advantages": layout.from_lists(
                    rollout_data["advantages"],
                    batch.response_mask.shape[-1],
                    dtype=batch.log_probs.dtype,
                    device=batch.log_probs.device,
                ),
                "returns": layout.from_lists(
                    rollout_data["returns"],
                    batch.response_mask.shape[-1],
                    dtype=batch.log_probs.dtype,
                    device=batch.log_probs.device,
                ),
            }
            metrics: dict[str, float] = {}
            value_loss = None
            if args.use_critic:
                critic = copy.copy(args)
                critic.loss_type = "value_loss"
                leaves = layout.to_lists(batch.vpreds, lengths)
                value_loss, logged = self._train_one_step(
                    critic,
                    rollout_data,
                    batch.micro_batches,
                    leaves,
                    masks,
                    batch.vpreds,
                    _values_head,
                )
                metrics.update(logged)
            leaves = layout.to_lists(batch.log_probs, lengths)
            loss, logged = self._train_one_step(
                args,
                rollout_data,
                batch.micro_batches,
                leaves,
                masks,
                batch.log_probs,
                _logits,
            )
            metrics.update(logged)
        return StepOutput(
            loss=loss,
            value_loss=value_loss,
            stages=stages,
            metrics=metrics,
            state={"kl_coef": float(args.kl_coef)},  # slime's coefficient is fixed
        )

    def _step_rewards(self, args: argparse.Namespace, batch: StepBatch) -> list[float]:
        """``_post_process_rewards`` as the rollout manager calls it on the step's samples
        (``SlimeAdvantageOps._group_rewards``: groups made contiguous, ``n_samples_per_prompt``
        the group size)."""
        scores = [float(s) for s in batch.scores.tolist()]
        estimator = args.advantage_estimator
        if estimator in ("grpo", "reinforce_plus_plus_baseline") and args.rewards_normalization:
            return self._group_rewards(
                scores, batch.index, estimator, bool(args.grpo_std_normalization)
            )
        return scores

    def _train_one_step(
        self,
        args: argparse.Namespace,
        rollout_data: dict[str, Any],
        micro_batches: list[list[int]],
        leaves: list[torch.Tensor],
        masks: list[torch.Tensor],
        leaf: torch.Tensor,
        head: Any,
    ) -> tuple[float, dict[str, float]]:
        """``train_one_step``: per micro-batch ``loss_function`` and Megatron's scaling and
        backward (module docstring), then ``reduce_train_step_metrics``."""
        per_token = bool(args.calculate_per_token_loss)
        num_microbatches = len(micro_batches)
        step_global_batch_size = len(rollout_data["response_lengths"])
        keys = (
            "advantages",
            "returns",
            "log_probs",
            "ref_log_probs",
            "values",
            "rollout_log_probs",
            "loss_masks",
            "response_lengths",
            "total_lengths",
            "unconcat_tokens",
        )
        total, tokens, logs = 0.0, 0, []
        for rows in micro_batches:
            part = {k: [rollout_data[k][i] for i in rows] for k in keys if k in rollout_data}
            part["rollout_mask_sums"] = rollout_data["rollout_mask_sums"][rows]
            mb_leaves = [leaves[i] for i in rows]
            output = head(mb_leaves, [masks[i] for i in rows])
            loss, normalizer, log = self.fw.loss_function(
                args, part, num_microbatches, step_global_batch_size, output
            )
            if not per_token:
                # forward_step_calc_loss: the 3-tuple branch (normalizer 1 here)
                loss = loss / torch.clamp(torch.as_tensor(normalizer), min=1)
                loss = loss / num_microbatches
            else:
                tokens += int(normalizer)
            loss.backward()
            total += float(loss.detach())
            logs.append(log)
        if per_token and tokens > 0 and leaf.grad is not None:
            # finalize_model_grads: the gradients divided by the step's token count
            with torch.no_grad():
                leaf.grad.div_(tokens)
        if per_token and tokens > 0:
            total /= tokens
        reported = self.fw.reduce_train_step_metrics(
            logs,
            calculate_per_token_loss=per_token,
            step_global_batch_size=step_global_batch_size,
            cp_size=1,
            dp_with_cp_group=runtime.single_rank_group(),
        )
        return total, {k: float(v) for k, v in reported.items()}

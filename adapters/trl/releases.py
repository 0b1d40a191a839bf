"""Per-release binding tables: what the trainer shell must know of TRL's internals.

The shell (``shell.py``) runs ``GRPOTrainer``'s real private methods on an object that was
never ``__init__``-ed, so it depends on internals that change between releases: the
attributes ``__init__`` derives from ``GRPOConfig``, the tuple ``_generate`` returns, the
arity of ``_get_per_token_logps_and_entropies``, the names of ``_compute_loss``'s locals
the adapter reads back and of the metrics it logs. One ``Bindings`` row per group of
releases whose internals are identical in those respects (read from each release's
``trl/trainer/grpo_trainer.py``); any release not listed is refused (exit 2) with the
supported range, because a shell that guesses internals would certify the wrong thing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from rlconform.adapters.base import SetupError


@dataclasses.dataclass(frozen=True)
class Bindings:
    """What the shell needs to drive one group of TRL releases."""

    name: str
    releases: tuple[str, ...]
    # the order of the tuple ``GRPOTrainer._generate`` returns
    generate_fields: tuple[str, ...]
    # ``_get_per_token_logps_and_entropies`` returns (logps, entropies[, aux_loss])
    logps_returns_aux: bool
    # locals of ``_compute_loss`` read back at its return (see shell.capture_locals)
    loss_local: str = "per_token_loss"
    kl_local: str = "per_token_kl"
    # metrics ``_compute_loss`` / ``_generate_and_score_completions`` append to _metrics
    clip_metric: str = "clip_ratio/region_mean"
    cispo_clip_metric: str = "cispo_clip_ratio"
    logprob_gap_metric: str = "sampling/sampling_logp_difference/mean"
    loss_types: tuple[str, ...] = ()
    is_modes: tuple[str, ...] = ()
    # GRPOConfig fields -> the trainer attributes ``GRPOTrainer.__init__`` sets from them
    attributes: Callable[[Any], dict[str, Any]] = lambda args: {}

    @property
    def span(self) -> str:
        return (
            f"{self.releases[0]} .. {self.releases[-1]}"
            if len(self.releases) > 1
            else self.releases[0]
        )


def _attributes_1_9(args: Any) -> dict[str, Any]:
    """``GRPOTrainer.__init__`` (1.9 - 1.16): the attributes derived from the config that
    ``_generate_and_score_completions`` and ``_compute_loss`` read."""
    entropy_coef = args.entropy_coef
    return {
        "max_completion_length": args.max_completion_length,
        "num_generations": args.num_generations,
        "num_generations_eval": args.num_generations_eval or args.num_generations,
        "chat_template_kwargs": args.chat_template_kwargs or {},
        "pad_to_multiple_of": args.pad_to_multiple_of,
        "use_vllm": args.use_vllm,
        "vllm_importance_sampling_correction": args.vllm_importance_sampling_correction,
        "vllm_importance_sampling_mode": args.vllm_importance_sampling_mode,
        "vllm_importance_sampling_clip_max": args.vllm_importance_sampling_clip_max,
        "vllm_importance_sampling_clip_min": args.vllm_importance_sampling_clip_min,
        "loss_type": args.loss_type,
        "multi_objective_aggregation": args.multi_objective_aggregation,
        "scale_rewards": args.scale_rewards,
        "importance_sampling_level": args.importance_sampling_level,
        "off_policy_mask_threshold": args.off_policy_mask_threshold,
        "mask_truncated_completions": args.mask_truncated_completions,
        "top_entropy_quantile": args.top_entropy_quantile,
        "entropy_coef": entropy_coef,
        "use_adaptive_entropy": args.use_adaptive_entropy,
        "_entropy_bonus_enabled": entropy_coef != 0.0 or args.use_adaptive_entropy,
        "_last_world_entropy": float("inf"),
        "_entropy_window_stats": None,
        "num_iterations": args.num_iterations,
        "epsilon_low": args.epsilon,
        "epsilon_high": args.epsilon_high if args.epsilon_high is not None else args.epsilon,
        "beta": args.beta,
        "log_multimodal": args.log_multimodal,
    }


_LOSS_TYPES_1_9 = ("grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo", "luspo", "vespo")
_IS_MODES = ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask")

TABLES: tuple[Bindings, ...] = (
    Bindings(
        name="trl-1.9",
        releases=(
            "1.9.0",
            "1.9.1",
            "1.9.2",
            "1.10.0",
            "1.11.0",
            "1.12.0",
            "1.13.0",
            "1.14.0",
            "1.14.1",
            "1.14.2",
            "1.15.0",
            "1.16.0",
        ),
        generate_fields=(
            "prompt_ids",
            "completion_ids",
            "tool_mask",
            "completions",
            "sampling_logps",
            "extra_fields",
            "images",
            "tool_images",
        ),
        logps_returns_aux=True,
        loss_types=_LOSS_TYPES_1_9,
        is_modes=_IS_MODES,
        attributes=_attributes_1_9,
    ),
)


def supported_range() -> str:
    return ", ".join(table.span for table in TABLES)


def release_of(version: str) -> str:
    """``1.16.0`` from ``1.16.0``, ``1.16.0+standin``, ``1.16.0.dev0``."""
    head = version.split("+")[0]
    parts = []
    for piece in head.split("."):
        digits = "".join(ch for ch in piece if ch.isdigit())
        if digits != piece or not digits:
            if digits:
                parts.append(digits)
            break
        parts.append(piece)
    return ".".join(parts[:3])


def bindings_for(version: str) -> Bindings:
    """The table for an installed TRL version; SetupError (exit 2) outside the range."""
    release = release_of(version)
    for table in TABLES:
        if release in table.releases:
            return table
    raise SetupError(
        f"trl {version} is not supported: the trainer shell knows the internals of TRL "
        f"{supported_range()} (install one of those, e.g. pip install 'rlconform[trl]')"
    )


def describe(table: Bindings) -> Mapping[str, str]:
    return {"bindings": table.name, "binding_releases": table.span}

"""Trainer configs (CONTRACT §2 `step`, §0b): the named settings a target's step runs under.

A target with a step binding declares ``trainer_configs()``: a ``default`` config (its
trainer's shipped defaults, read from the trainer's own config objects or files) and named
configs for the options its users run. ``settings`` are in contract vocabulary
(``rlconform.oracle.step.STEP_SETTINGS``: estimator, KL placement and coefficients, policy
loss and clip ranges, entropy and value terms, aggregation mode); ``native`` are the same
choices under the trainer's own names, for the report header; ``source`` says where the
defaults were read. ``ops`` are the contract operations the config's step runs: a finding
of a clause none of whose operations any config runs is ``unreached`` (§0b).

``certify --trainer-config NAME`` (repeatable) selects configs; the default is every one
declared. This is not audit's ``--config FILE`` (the parameters of a recorded batch).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from rlconform.adapters.base import SetupError
from rlconform.oracle.step import resolve

# The operation each setting value makes the step run (the rest always run).
_ESTIMATOR_OPS = {
    "grpo": "advantage_grpo",
    "rloo": "advantage_rloo",
    "gae": "advantage_gae",
    "reinforce_pp": "advantage_reinforce_pp",
    "reinforce_pp_baseline": "advantage_reinforce_pp_baseline",
}
_POLICY_LOSS_OPS = {"ppo_clip": "ppo_clip_loss", "sapo": "sapo_loss"}
_ALWAYS = ("place_reward_last", "actor_loss", "agg_loss", "policy_loss_reduced")


@dataclasses.dataclass(frozen=True)
class TrainerConfig:
    """One named trainer config: settings (contract names), the trainer's own names, and
    where the defaults came from."""

    name: str
    settings: Mapping[str, Any]
    native: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    source: str = ""
    extra_ops: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        try:
            resolve(self.settings)
        except ValueError as exc:
            raise SetupError(f"trainer config {self.name!r}: {exc}") from exc

    @property
    def resolved(self) -> dict[str, Any]:
        return resolve(self.settings)

    @property
    def ops(self) -> frozenset[str]:
        """The contract operations this config's step runs."""
        cfg = self.resolved
        ops = set(_ALWAYS) | {_ESTIMATOR_OPS[cfg["estimator"]]} | set(self.extra_ops)
        ops.add(_POLICY_LOSS_OPS[cfg["policy_loss"]])
        if cfg["kl_in_reward"]:
            ops |= {"apply_kl_in_reward", "kl_controller_update"}
        if cfg["kl_loss"]:
            ops.add("kl_penalty")
        if cfg["critic"]:
            ops.add("value_loss")
        return frozenset(ops)

    def as_json(self) -> dict[str, Any]:
        return {
            "settings": dict(self.resolved),
            "native": dict(self.native),
            "source": self.source,
        }


def declared(target: Any) -> list[TrainerConfig]:
    """The target's declared configs (none: it has no step binding)."""
    fn = getattr(target, "trainer_configs", None)
    return list(fn()) if callable(fn) else []


def select(target: Any, names: Sequence[str] | None) -> list[TrainerConfig]:
    """The configs ``names`` asks for (all declared when empty); an unknown name is a usage
    error naming the declared ones."""
    configs = declared(target)
    if not names:
        return configs
    by_name = {c.name: c for c in configs}
    unknown = [n for n in names if n not in by_name]
    if unknown:
        known = ", ".join(by_name) or "none: the target has no step binding"
        raise SetupError(
            f"unknown trainer config {', '.join(map(repr, unknown))} for target "
            f"{getattr(target, 'name', '?')!r}; declared: {known}"
        )
    return [by_name[n] for n in names]

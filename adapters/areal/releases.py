"""The AReaL releases the adapter supports, and the functions their bindings call.

The package registry carries one AReaL release, 1.0.4 (``pip index versions areal``); its
postprocess math, read from the wheel: ``PPOActor._compute_advantages`` and
``grpo_loss_fn`` (``areal/trainer/ppo/actor.py``), the critic's ``ppo_loss_fn``
(``areal/trainer/ppo/critic.py``), ``ppo_actor_loss_fn`` / ``ppo_critic_loss_fn``
(``areal/utils/functional/functional.py``), ``Normalization`` and ``KLEstimator``
(``areal/utils/data.py``). Any other release exits 2 naming the range.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# (runtime module key, attribute) of every function the bindings call.
CALLED = (
    ("actor", "PPOActor"),
    ("actor", "grpo_loss_fn"),
    ("critic", "ppo_loss_fn"),
    ("functional", "ppo_actor_loss_fn"),
    ("functional", "ppo_critic_loss_fn"),
    ("data", "Normalization"),
    ("data", "KLEstimator"),
    ("cli_args", "PPOActorConfig"),
    ("cli_args", "NormConfig"),
)

RELEASES: tuple[str, ...] = ("1.0.4",)


def supported_range() -> str:
    return ", ".join(RELEASES)


def missing(modules: Mapping[str, Any]) -> list[str]:
    """Called functions the imported modules lack (a fork that removed or renamed one)."""
    return [
        f"{modules[key].__name__}.{attribute}"
        for key, attribute in CALLED
        if not hasattr(modules[key], attribute)
    ]

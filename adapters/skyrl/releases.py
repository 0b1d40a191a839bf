"""The SkyRL releases the adapter supports, and the functions their bindings call.

The package registry's ``skyrl`` (the unified package, Python >= 3.12) has one release with
this layout, 0.4.0; the legacy ``skyrl-train`` (0.3.x, ``skyrl_train.*``) is a different
package and is not bound. The postprocess math, read from the wheel: the estimator and
policy-loss registries, ``compute_approx_kl``, ``masked_whiten``, ``ppo_critic_loss``, the KL
controllers and ``apply_loss_reduction_to_advantages_minibatch``
(``skyrl/backends/skyrl_train/utils/ppo_utils.py``), and the trainer's
``compute_advantages_and_returns`` / ``apply_reward_kl_penalty`` / ``_normalize_advantages``
(``skyrl/train/trainer.py``). Any other release exits 2 naming the range.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# (runtime module key, attribute) of every function the bindings call.
CALLED = (
    ("ppo_utils", "compute_approx_kl"),
    ("ppo_utils", "compute_advantages_and_returns"),
    ("ppo_utils", "PolicyLossRegistry"),
    ("ppo_utils", "ppo_critic_loss"),
    ("ppo_utils", "reduce_loss"),
    ("ppo_utils", "AdaptiveKLController"),
    ("ppo_utils", "FixedKLController"),
    ("ppo_utils", "get_kl_controller"),
    ("ppo_utils", "apply_loss_reduction_to_advantages_minibatch"),
    ("trainer", "RayPPOTrainer"),
    ("config", "SkyRLTrainConfig"),
    ("training_batch", "TrainingInputBatch"),
    ("worker", "PolicyWorkerBase"),
    ("dispatch", "MeshDispatch"),
    ("dispatch", "MeshRank"),
)

RELEASES: tuple[str, ...] = ("0.4.0",)

PYTHON = (3, 12)  # skyrl's Requires-Python: >= 3.12


def supported_range() -> str:
    return ", ".join(RELEASES)


def missing(modules: Mapping[str, Any]) -> list[str]:
    """Called functions the imported modules lack (a fork that removed or renamed one)."""
    return [
        f"{modules[key].__name__}.{attribute}"
        for key, attribute in CALLED
        if not hasattr(modules[key], attribute)
    ]

"""The AReaL adapter (github.com/inclusionAI/AReaL): layout conversion and calls into
AReaL's own postprocess functions, on the paths its PPO trainer runs.

``rlconform certify areal`` (``pip install --no-deps areal==1.0.4 && pip install -e
'.[areal]'``) or ``--framework-path /path/to/checkout`` (a fork). Supported releases are in
``releases.py``; any other exits 2 naming them. What is bound: the KL estimator, GRPO
and GAE advantages through ``PPOActor._compute_advantages`` (GAE with a critic's values and
batch whitening, ``advantage.py``), the actor loss through
``grpo_loss_fn`` (PPO clip, dual clip, sequence-level IS, SAPO), the decoupled loss's
rejection sampling (``offpolicy.py``: its importance weights, token and sequence level, clamp and
mask), the critic's loss
(``manifest.BINDINGS``) and the training step (``step.py``: ``compute_advantages``,
``ppo_update`` and the engine's ``train_batch`` with its loss weighting, under the
``PPOActorConfig`` configs it declares, one of them PPO with a critic: ``PPOCritic``'s
``compute_values`` and ``ppo_update`` on the same engine). Not bound yet: M2PO, SAPO's
sequence level, SAPO and rejection sampling in the step, the logged statistics
(``step.metrics`` skips).
"""

from __future__ import annotations

from typing import Any

from rlconform.adapters.areal.advantage import GaeBindings
from rlconform.adapters.areal.kl import KLBindings
from rlconform.adapters.areal.loss import LossBindings
from rlconform.adapters.areal.manifest import BINDINGS, PROFILE, load_deviations
from rlconform.adapters.areal.offpolicy import OffpolicyBindings
from rlconform.adapters.areal.runtime import ArealRuntime, load_runtime
from rlconform.adapters.areal.step import StepOps
from rlconform.adapters.base import Target


class ArealTarget(KLBindings, GaeBindings, LossBindings, OffpolicyBindings, StepOps, Target):
    """AReaL, bound operation by operation."""

    name = "areal"

    def __init__(
        self, runtime: ArealRuntime, device: str = "cpu", framework_path: str | None = None
    ):
        self.runtime = runtime
        self.device = device
        self.framework_path = framework_path
        self.version = runtime.version
        self.profile = PROFILE
        self.bindings = dict(BINDINGS)
        self.deviations = load_deviations(runtime.version)

    def describe(self) -> dict[str, str]:
        info = super().describe()
        info["release"] = self.runtime.version
        info["source"] = str(self.runtime.root)
        info["shims"] = "none"
        return info

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled as its recipe (a worker imports AReaL itself)."""
        return (load, (self.device, self.framework_path))


def load(device: str = "cpu", framework_path: str | None = None) -> ArealTarget:
    """The AReaL target; SetupError (CLI exit 2) when AReaL is missing or unsupported."""
    return ArealTarget(load_runtime(framework_path), device=device, framework_path=framework_path)


__all__ = ["ArealTarget", "load"]

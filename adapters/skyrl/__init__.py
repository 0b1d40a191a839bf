"""The SkyRL adapter (github.com/NovaSky-AI/SkyRL): layout conversion and calls into SkyRL's
own postprocess functions, on the paths its PPO trainer runs.

``rlconform certify skyrl`` in a Python >= 3.12 environment (``pip install -e
'.[dev,skyrl]'``, which installs skyrl==0.4.0) or ``--framework-path /path/to/checkout``
(a fork). Supported releases are in ``releases.py``; any other exits 2 naming them, and so
does Python < 3.12. What is bound (``manifest.BINDINGS``): the KL estimator, the KL in the
reward and its controllers, the GRPO / RLOO / REINFORCE++ / GAE estimators through the
trainer's ``compute_advantages_and_returns``, and the PPO clip / dual clip / GSPO / CISPO /
SAPO / critic losses through the registry the workers use, and the loss aggregation (the
trainer's advantage pre-scaling, ``reduce_loss``, the dp-size factor), and the training
step (``step.py``: ``RayPPOTrainer.train``'s chain on one rollout batch through the policy
worker's ``forward_backward`` and, under ``ppo_critic``, the critic worker's, under
``SkyRLTrainConfig()`` and named configs). Not bound yet: dp size > 1 and mini-batches in
the step, the step's logged metrics, step-wise trajectories, DPPO / rollout-IS.
"""

from __future__ import annotations

from typing import Any

from rlconform.adapters.base import Target
from rlconform.adapters.skyrl.advantage import AdvantageBindings
from rlconform.adapters.skyrl.aggregate import AggregateBindings
from rlconform.adapters.skyrl.kl import KLBindings
from rlconform.adapters.skyrl.loss import LossBindings
from rlconform.adapters.skyrl.manifest import BINDINGS, PROFILE, load_deviations
from rlconform.adapters.skyrl.runtime import SkyRLRuntime, load_runtime
from rlconform.adapters.skyrl.step import StepOps


class SkyRLTarget(StepOps, KLBindings, AdvantageBindings, LossBindings, AggregateBindings, Target):
    """SkyRL, bound operation by operation."""

    name = "skyrl"

    def __init__(
        self, runtime: SkyRLRuntime, device: str = "cpu", framework_path: str | None = None
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
        """Pickled as its recipe (a worker imports SkyRL itself)."""
        return (load, (self.device, self.framework_path))


def load(device: str = "cpu", framework_path: str | None = None) -> SkyRLTarget:
    """The SkyRL target; SetupError (CLI exit 2) when SkyRL is missing, unsupported, or the
    Python is older than 3.12."""
    return SkyRLTarget(load_runtime(framework_path), device=device, framework_path=framework_path)


__all__ = ["SkyRLTarget", "load"]

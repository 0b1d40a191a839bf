"""The OpenRLHF adapter (github.com/OpenRLHF/OpenRLHF): layout conversion and calls into
OpenRLHF's own postprocess functions, on the paths its PPO trainer runs.

``rlconform certify openrlhf`` (OpenRLHF installed: ``runtime.INSTALL``) or ``rlconform
certify openrlhf --framework-path /path/to/checkout`` (a fork). Supported releases and the
signatures each one's bindings use are in ``releases.py``; any other release exits 2 naming
the range. Every operation calls one OpenRLHF function (or the trainer's chain of them:
the advantage step of ``RemoteExperienceMaker``); operations OpenRLHF has no function for
are not implemented, so their clauses are skipped. The profile, the bindings table and the
loading of each release's baseline are in ``manifest.py``.
"""

from __future__ import annotations

from rlconform.adapters.base import Target
from rlconform.adapters.openrlhf.advantage import AdvantageBindings
from rlconform.adapters.openrlhf.entropy import EntropyBindings
from rlconform.adapters.openrlhf.kl import KLBindings
from rlconform.adapters.openrlhf.loss import LossBindings
from rlconform.adapters.openrlhf.manifest import BINDINGS, PROFILE, load_deviations
from rlconform.adapters.openrlhf.runtime import OpenRLHFRuntime, load_runtime
from rlconform.adapters.openrlhf.step import StepOps


class OpenRLHFTarget(KLBindings, AdvantageBindings, EntropyBindings, LossBindings, StepOps, Target):
    """OpenRLHF, bound operation by operation."""

    # run under options no step config covers; each binding's path names the option
    step_unbound = (
        "entropy_from_logits",
        "entropy_mean",
        "importance_weighted_kl",
        "advantage_reinforce_pp_baseline",
        "gspo_loss",
        "icepop_weights",
        "is_correction_weights",
        "tis_weights",
    )

    name = "openrlhf"

    def __init__(
        self, runtime: OpenRLHFRuntime, device: str = "cpu", framework_path: str | None = None
    ):
        self.runtime = runtime
        self.framework_path = framework_path
        self.device = device
        self.version = runtime.version
        self.profile = PROFILE
        self.bindings = dict(BINDINGS)
        self.deviations = load_deviations(runtime.release.name)

    def describe(self) -> dict[str, str]:
        info = super().describe()
        info["release"] = self.runtime.release.name
        info["bindings"] = self.runtime.release.describe()
        info["source"] = str(self.runtime.root)
        info["shims"] = ", ".join(self.runtime.shims) or "none"
        return info

    def __reduce__(self) -> tuple:
        """Pickled as its recipe (gloo workers import OpenRLHF themselves)."""
        return (load, (self.device, self.framework_path))


def load(device: str = "cpu", framework_path: str | None = None) -> OpenRLHFTarget:
    """The OpenRLHF target; SetupError (CLI exit 2) when OpenRLHF is missing or its release is
    outside the supported range."""
    return OpenRLHFTarget(
        load_runtime(framework_path), device=device, framework_path=framework_path
    )


__all__ = ["OpenRLHFTarget", "load"]

"""The ROLL adapter (github.com/alibaba/ROLL): layout conversion and calls into ROLL's own
``roll.utils.functionals`` / ``roll.utils.kl_controller`` and its ``DataProto``.

``rlconform certify roll --framework-path /path/to/ROLL`` (a source checkout) or, with ROLL
installed from a checkout, ``rlconform certify roll``. The adapter never computes: every
operation converts canonical tensors to ROLL's (B, L - 1) full-sequence layout
(``layout.py``), calls one ROLL function (or ROLL's pipeline chain of them), and converts
back. Operations ROLL has no function for are not implemented (their clauses are skipped).
"""

from __future__ import annotations

from rlconform.adapters.base import Target
from rlconform.adapters.roll.advantage import AdvantageBindings
from rlconform.adapters.roll.aggregate import AggregateBindings
from rlconform.adapters.roll.batch import BatchBindings
from rlconform.adapters.roll.common import config_defaults
from rlconform.adapters.roll.kl import KLBindings
from rlconform.adapters.roll.logprob import LogprobBindings
from rlconform.adapters.roll.manifest import DEVIATIONS, PROFILE
from rlconform.adapters.roll.mask import MaskBindings
from rlconform.adapters.roll.metrics import MetricsBindings
from rlconform.adapters.roll.offpolicy import OffpolicyBindings
from rlconform.adapters.roll.reward import RewardBindings
from rlconform.adapters.roll.runtime import RollRuntime, load_runtime


class RollTarget(
    MaskBindings,
    LogprobBindings,
    RewardBindings,
    KLBindings,
    AdvantageBindings,
    OffpolicyBindings,
    AggregateBindings,
    BatchBindings,
    MetricsBindings,
    Target,
):
    """ROLL, bound operation by operation."""

    name = "roll"

    def __init__(self, runtime: RollRuntime, device: str = "cpu"):
        self.runtime = runtime
        self.device = device
        self.version = runtime.version_string
        self.functionals = runtime.functionals
        self.kl_controller_module = runtime.kl_controller
        self.data_proto = runtime.data_proto
        self.data_proto_error = runtime.data_proto_error
        self.config_defaults = config_defaults(runtime.functionals)
        self.profile = PROFILE
        self.deviations = dict(DEVIATIONS)

    def describe(self) -> dict[str, str]:
        info = super().describe()
        info["source"] = str(self.runtime.root)
        info["commit"] = self.runtime.commit or "unknown"
        info["shims"] = ", ".join(self.runtime.shims) or "none"
        return info


def load(device: str = "cpu", framework_path: str | None = None) -> RollTarget:
    """The ROLL target: ROLL installed, or the checkout at ``framework_path``.

    Raises SetupError (CLI exit 2) saying what to do when ROLL cannot be found.
    """
    return RollTarget(load_runtime(framework_path), device=device)


__all__ = ["RollTarget", "load"]

"""The ROLL adapter (github.com/alibaba/ROLL): layout conversion and calls into ROLL's own
``roll.utils.functionals`` / ``roll.utils.kl_controller`` and its ``DataProto``.

``rlconform certify roll --framework-path /path/to/ROLL`` (a source checkout) or, with ROLL
installed from a checkout, ``rlconform certify roll``. The adapter never computes: every
operation converts canonical tensors to ROLL's (B, L - 1) full-sequence layout
(``layout.py``), calls one ROLL function (or ROLL's pipeline chain of them), and converts
back. Operations ROLL has no function for are not implemented (their clauses are skipped).
"""

from __future__ import annotations

import sys

from rlconform.adapters.base import Target
from rlconform.adapters.roll.advantage import AdvantageBindings
from rlconform.adapters.roll.aggregate import AggregateBindings
from rlconform.adapters.roll.batch import BatchBindings
from rlconform.adapters.roll.bindings import BINDINGS
from rlconform.adapters.roll.common import config_defaults
from rlconform.adapters.roll.kl import KLBindings
from rlconform.adapters.roll.logprob import LogprobBindings
from rlconform.adapters.roll.loss import LossBindings
from rlconform.adapters.roll.manifest import PROFILE, shipped_deviations
from rlconform.adapters.roll.mask import MaskBindings
from rlconform.adapters.roll.metrics import MetricsBindings
from rlconform.adapters.roll.offpolicy import OffpolicyBindings
from rlconform.adapters.roll.reward import RewardBindings
from rlconform.adapters.roll.runtime import RollRuntime, load_runtime
from rlconform.adapters.roll.source import RollSources
from rlconform.adapters.roll.step import StepOps


class RollTarget(
    MaskBindings,
    LogprobBindings,
    RewardBindings,
    KLBindings,
    AdvantageBindings,
    OffpolicyBindings,
    LossBindings,
    AggregateBindings,
    BatchBindings,
    MetricsBindings,
    StepOps,
    Target,
):
    """ROLL, bound operation by operation."""

    name = "roll"
    # run under an option no step config covers (the binding's path does not name it)
    step_unbound_ops = {
        op: "train_infer_correction (is_weight.enabled or a filter: compute_train_infer_"
        "correction in the actor workers)"
        for op in ("tis_weights", "icepop_weights", "is_correction_weights")
    }
    # PPOConfig.loss_agg_mode takes each of the four modes (default seq-mean-token-mean)
    step_unbound_agg_modes = {
        m: f"loss_agg_mode={m!r} (PPOConfig)"
        for m in (
            "token-mean",
            "seq-mean-token-sum",
            "seq-mean-token-mean",
            "seq-mean-token-sum-norm",
        )
    }

    def __init__(self, runtime: RollRuntime, device: str = "cpu", shipped_baseline: bool = True):
        self.runtime = runtime
        self.device = device
        self.version = runtime.version_string
        self.functionals = runtime.functionals
        self.kl_controller_module = runtime.kl_controller
        self.data_proto = runtime.data_proto
        self.data_proto_error = runtime.data_proto_error
        self.config_defaults = config_defaults(runtime.functionals)
        self.config_module = sys.modules["roll.configs.base_config"]
        self.sources = RollSources(runtime.root)
        self.sources.prepare()
        self.profile = PROFILE
        self.shipped_baseline = shipped_baseline
        self.deviations = shipped_deviations() if shipped_baseline else {}
        self.bindings = BINDINGS

    def __reduce__(self) -> tuple:
        """Rebuilt from the same checkout in another process (gloo workers): the imported
        modules and compiled functions are not picklable."""
        return (
            _rebuild,
            (type(self), self.device, str(self.runtime.root), self.shipped_baseline),
        )

    def describe(self) -> dict[str, str]:
        info = super().describe()
        info["source"] = str(self.runtime.root)
        info["commit"] = self.runtime.commit or "unknown"
        info["shims"] = ", ".join(self.runtime.shims) or "none"
        return info


def _rebuild(cls: type, device: str, root: str, shipped_baseline: bool) -> RollTarget:
    return cls(load_runtime(root), device=device, shipped_baseline=shipped_baseline)


def load(
    device: str = "cpu", framework_path: str | None = None, shipped_baseline: bool = True
) -> RollTarget:
    """The ROLL target: ROLL installed, or the checkout at ``framework_path``.

    ``shipped_baseline``: declare the breaks observed on the supported ROLL release
    (``baselines/``); False certifies with no declared break (rlconform's own tests of the
    stand-in package). Raises SetupError (CLI exit 2) saying what to do when ROLL cannot be
    found.
    """
    return RollTarget(
        load_runtime(framework_path), device=device, shipped_baseline=shipped_baseline
    )


class RollAgenticReinforceTarget(RollTarget):
    """ROLL with ``adv_estimator="agentic_reinforce"`` on the agentic pipeline:
    adv.reinforce_pp runs ``compute_agentic_reinforce_return`` (turn-level returns over the
    multi-turn mask) on every case. ``rlconform certify
    rlconform.adapters.roll:load_agentic_reinforce --framework-path ...``."""

    name = "roll-agentic-reinforce"
    agentic_reinforce_estimator = "agentic_reinforce"


def load_agentic_reinforce(
    device: str = "cpu", framework_path: str | None = None, shipped_baseline: bool = True
) -> RollTarget:
    """The ROLL target with the agentic pipeline's ``agentic_reinforce`` estimator."""
    return RollAgenticReinforceTarget(
        load_runtime(framework_path), device=device, shipped_baseline=shipped_baseline
    )


__all__ = ["RollAgenticReinforceTarget", "RollTarget", "load", "load_agentic_reinforce"]

"""TRL's Liger branch as a certification target: ``GRPOTrainer`` with ``use_liger_kernel=True``.

``rlconform certify trl-liger`` (``pip install 'rlconform[trl-liger]'``: TRL 1.12.0 and
liger-kernel 0.8.5). With ``use_liger_kernel=True``, TRL 1.9 .. 1.12 computes the GRPO loss
in Liger's fused linear kernel (``compute_liger_loss`` -> ``LigerFusedLinearGRPOLoss``)
instead of its own ``_compute_loss``; the scoring path (rewards -> advantages,
``num_items_in_batch``) is the same, and is certified with plain TRL
(``rlconform certify trl``). This target binds what the branch changes: the policy losses,
the KL term, the aggregation and the step (``fused.py``, ``loss.py``, ``step.py``), on
TRL's trainer shell (``adapters/trl/shell.py``). Releases outside ``releases.py`` exit 2
naming the range; the report header names the TRL and Liger releases and the branch group.
"""

from __future__ import annotations

import importlib
from importlib import metadata
from typing import Any

from rlconform.adapters.base import SetupError, Target
from rlconform.adapters.trl.runtime import TrlRuntime, load_runtime
from rlconform.adapters.trl.shell import Shell
from rlconform.adapters.trl_liger.fused import COMPILED, FusedShell
from rlconform.adapters.trl_liger.loss import LigerLossBindings
from rlconform.adapters.trl_liger.manifest import BINDINGS, PROFILE, deviations_for
from rlconform.adapters.trl_liger.releases import (
    LIGER_RELEASES,
    branch_for,
    check_liger,
    trl_range,
)
from rlconform.adapters.trl_liger.step import LigerStepOps


class TrlLigerTarget(LigerLossBindings, LigerStepOps, Target):
    """TRL's GRPOTrainer on its Liger branch, bound operation by operation."""

    # run under options no step config covers; each binding's path names the option
    step_unbound = (
        "importance_weighted_kl",
        "cispo_loss",
        "gspo_loss",
    )

    name = "trl-liger"

    def __init__(self, runtime: TrlRuntime, device: str = "cpu", framework_path: str | None = None):
        self.runtime = runtime
        self.device = device
        self.framework_path = framework_path
        self.branch = branch_for(runtime.release)
        self.liger_version, classes = _load_liger()
        self.version = runtime.version
        self.release_table = runtime.bindings
        self.shell = Shell(runtime.trainer_cls, runtime.config_cls, runtime.bindings)
        self.fused = FusedShell(self.shell, *classes)
        self.profile = PROFILE
        self.deviations = deviations_for(runtime.release)
        self.bindings = dict(BINDINGS)

    def describe(self) -> dict[str, str]:
        info = super().describe()
        info.update(
            {
                "bindings": self.branch.name,
                "binding_releases": self.branch.span,
                "liger_kernel": self.liger_version,
                "liger_compiled": str(COMPILED),
                "source": self.runtime.root,
            }
        )
        return info

    def __reduce__(self) -> tuple[Any, ...]:
        """Rebuilt from scratch in a spawned gloo worker (the shell holds classes)."""
        return (load, (self.device, self.framework_path))


def _load_liger() -> tuple[str, tuple[type, type, type]]:
    try:
        version = metadata.version("liger-kernel")
    except metadata.PackageNotFoundError:
        raise SetupError(
            "liger-kernel is not installed: pip install 'rlconform[trl-liger]'"
        ) from None
    check_liger(version)
    try:
        grpo = importlib.import_module("liger_kernel.chunked_loss.grpo_loss")
        ppo = importlib.import_module("liger_kernel.chunked_loss.fused_linear_ppo")
    except ImportError as exc:
        raise SetupError(f"liger-kernel {version}: cannot import its GRPO loss: {exc}") from None
    classes = (
        grpo.LigerFusedLinearGRPOLoss,
        grpo.LigerFusedLinearGRPOFunction,
        ppo.LigerFusedLinearPPOBase,
    )
    return version, classes


def load(device: str = "cpu", framework_path: str | None = None) -> TrlLigerTarget:
    """The target; SetupError (CLI exit 2) when TRL or Liger is missing or unsupported."""
    try:
        runtime = load_runtime(framework_path)
    except SetupError as exc:
        raise SetupError(
            f"trl-liger needs TRL {trl_range()} with liger-kernel {', '.join(LIGER_RELEASES)} "
            f"(pip install 'rlconform[trl-liger]'): {exc}"
        ) from None
    return TrlLigerTarget(runtime, device=device, framework_path=framework_path)


__all__ = ["TrlLigerTarget", "load"]

"""TRL (huggingface/trl) as a certification target: ``GRPOTrainer``'s real methods.

``rlconform certify trl`` (TRL installed: ``pip install 'rlconform[trl]'``), or
``--framework-path DIR`` for a directory holding a ``trl`` package. TRL keeps its
postprocess math inside two private trainer methods, ``_generate_and_score_completions``
and ``_compute_loss``; the adapter runs them on a trainer shell without a model
(``shell.py``), converts the canonical tensors to TRL's layout and back (``layout.py``)
and reads what TRL computed. The shell depends on private internals, so only the releases
in ``releases.py`` are accepted (any other exits 2 naming the supported range); the report
header names the release and the binding table that ran. Operations TRL has no function
for are absent: their clauses are skipped as "not implemented by target".
"""

from __future__ import annotations

from typing import Any

from rlconform.adapters.base import Target
from rlconform.adapters.trl.advantage import AdvantageBindings
from rlconform.adapters.trl.loss import AGG_LOSS_TYPES, LossBindings
from rlconform.adapters.trl.manifest import BINDINGS, PROFILE, deviations_for
from rlconform.adapters.trl.offpolicy import OffpolicyBindings
from rlconform.adapters.trl.releases import describe as describe_bindings
from rlconform.adapters.trl.runtime import TrlRuntime, load_runtime
from rlconform.adapters.trl.shell import Shell
from rlconform.adapters.trl.step import StepOps


class TrlTarget(AdvantageBindings, LossBindings, OffpolicyBindings, StepOps, Target):
    """TRL's GRPOTrainer, bound operation by operation."""

    # an aggregation mode no step config uses is the normaliser of this loss_type
    step_unbound_agg_modes = {m: f"loss_type={t!r}" for m, t in AGG_LOSS_TYPES.items()}
    # run under options no step config covers; each binding's path names the option
    step_unbound = (
        "importance_weighted_kl",
        "advantage_gdpo",
        "cispo_loss",
        "gspo_loss",
    )

    name = "trl"

    def __init__(self, runtime: TrlRuntime, device: str = "cpu", framework_path: str | None = None):
        self.runtime = runtime
        self.device = device
        self.framework_path = framework_path
        self.version = runtime.version
        self.release_table = runtime.bindings
        self.shell = Shell(runtime.trainer_cls, runtime.config_cls, runtime.bindings)
        self.profile = PROFILE
        self.deviations = deviations_for(runtime.release)
        self.bindings = dict(BINDINGS)  # op -> TRL functions and trainer path (report)

    def describe(self) -> dict[str, str]:
        info = super().describe()
        info.update(describe_bindings(self.runtime.bindings))
        info["source"] = self.runtime.root
        return info

    def __reduce__(self) -> tuple[Any, ...]:
        """Rebuilt from scratch in a spawned gloo worker (the shell holds classes)."""
        return (load, (self.device, self.framework_path))


def load(device: str = "cpu", framework_path: str | None = None) -> TrlTarget:
    """The TRL target; SetupError (CLI exit 2) when TRL is missing or unsupported."""
    return TrlTarget(load_runtime(framework_path), device=device, framework_path=framework_path)


__all__ = ["TrlTarget", "load"]

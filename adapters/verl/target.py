"""The verl target: one binding mixin per contract area, composed over verl's functions, for
one release line (``releases.py``) and one choice of trainer settings."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlconform.adapters.base import Target
from rlconform.adapters.verl.actor import ActorLossOps
from rlconform.adapters.verl.advantage import AdvantageOps
from rlconform.adapters.verl.aggregate import AggregateOps
from rlconform.adapters.verl.batch import BatchOps
from rlconform.adapters.verl.kl import KLOps
from rlconform.adapters.verl.layout import LayoutOps
from rlconform.adapters.verl.logprob import LogprobOps
from rlconform.adapters.verl.mask import MaskOps
from rlconform.adapters.verl.metrics import MetricsOps
from rlconform.adapters.verl.offpolicy import OffpolicyOps
from rlconform.adapters.verl.profile import profile_for
from rlconform.adapters.verl.releases import DEFAULTS, Release, Settings
from rlconform.adapters.verl.reward import RewardOps
from rlconform.adapters.verl.source import VerlSource
from rlconform.adapters.verl.step import StepOps
from rlconform.adapters.verl.step_v0 import V0StepOps
from rlconform.adapters.verl.step_v08 import V08StepOps

BASELINES = Path(__file__).parent / "baselines"


def baseline_path(release: Release, settings: Settings) -> Path:
    """The shipped baseline of ``release`` (``verl-<certified>[-alternates].toml``)."""
    stem = Path(release.baseline).stem
    suffix = "" if settings == DEFAULTS else "-alternates"
    return BASELINES / f"{stem}{suffix}.toml"


class VerlTarget(
    MaskOps,
    LayoutOps,
    LogprobOps,
    RewardOps,
    KLOps,
    AdvantageOps,
    ActorLossOps,
    OffpolicyOps,
    AggregateOps,
    BatchOps,
    MetricsOps,
    V08StepOps,
    Target,
):
    """verl's own postprocess functions behind the canonical padded layout."""

    name = "verl"

    def __init__(
        self,
        source: VerlSource,
        release: Release,
        settings: Settings = DEFAULTS,
        device: str = "cpu",
    ):
        from rlconform.conformance import baseline

        self.device = device
        self.source = source
        self.version = source.version
        self.release = release
        self.settings = settings
        self.profile = profile_for(release, settings)
        self.bindings = settings.bindings(release)
        path = baseline_path(release, settings)
        self.baseline_file = path if path.is_file() else None
        self.deviations = baseline.load(path) if self.baseline_file else {}

    # the step: the v1 trainer (0.9), RayPPOTrainer with the engine workers (0.8) or with the
    # legacy workers (0.7)
    @property
    def _step_ops(self) -> type:
        return {"0.7": V0StepOps, "0.8": V08StepOps}.get(self.release.line, StepOps)

    @property
    def step_metric_names(self) -> dict[str, Any]:  # type: ignore[override]
        return self._step_ops.step_metric_names

    def trainer_configs(self) -> list[Any]:
        return self._step_ops.trainer_configs(self)

    def train_step(self, batch: Any, config: Any, state: Any = None) -> Any:
        return self._step_ops.train_step(self, batch, config, state)

    def implements(self, op: str) -> bool:
        """An operation runs only where the release's table binds it to a verl function."""
        return op in self.bindings and super().implements(op)

    def describe(self) -> dict[str, str]:
        header = super().describe()
        header.update(self.release.describe())
        header["settings"] = self.settings.name
        header["baseline"] = self.baseline_file.name if self.baseline_file else "(none)"
        header["framework_path"] = self.source.framework_path or "(installed package)"
        header["location"] = self.source.location
        if self.source.commit:
            header["commit"] = self.source.commit
        return header

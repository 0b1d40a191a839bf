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

_LOSS_MODE = "actor_rollout_ref.actor.policy_loss.loss_mode"
_ROLLOUT_CORRECTION = "algorithm.rollout_correction (rollout_is / rollout_rs)"
_ENTROPY = (
    "the old-log-prob pass of every step (calculate_entropy, for actor/entropy; the step "
    "takes entropies as inputs)"
)
# Operations the headed trainer runs under options (or on a pass) no step config covers,
# read from each line's trainer: their findings are unmeasured, not unreached
# (conformance.consequence.unbound). Kept for an operation whose binding runs on the line's
# headed trainer (``step_unbound_ops``).
UNBOUND_OPTIONS = {
    "gspo_loss": f"{_LOSS_MODE}=gspo",
    "gmpo_loss": f"{_LOSS_MODE}=geo_mean",
    "cispo_loss": f"{_LOSS_MODE}=cispo",
    "dppo_tv_loss": f"{_LOSS_MODE}=dppo_tv",
    "sapo_loss": f"{_LOSS_MODE}=sapo",
    "advantage_remax": "algorithm.adv_estimator=remax",
    "advantage_opo": "algorithm.adv_estimator=opo",
    "advantage_optimal_token_baseline": "algorithm.adv_estimator=optimal_token_baseline",
    "advantage_gdpo": "algorithm.adv_estimator=gdpo",
    "tis_weights": _ROLLOUT_CORRECTION,
    "icepop_weights": _ROLLOUT_CORRECTION,
    "is_correction_weights": _ROLLOUT_CORRECTION,
    "logprob_gap": "actor_rollout_ref.rollout.calculate_log_probs=True",
    "entropy_from_logits": _ENTROPY,
    "entropy_mean": _ENTROPY,
}


def _trainer_of(binding: dict[str, Any]) -> str:
    """The trainer a binding's path runs on (its first word: ``v1`` or ``v0``)."""
    words = str(binding.get("path", "")).split()
    return words[0] if words else ""


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

    @property
    def step_unbound_agg_modes(self) -> dict[str, str]:
        """Each mode the line's agg_loss knows is the actor's loss_agg_mode option."""
        return {m: f"actor_rollout_ref.actor.loss_agg_mode={m}" for m in self.release.agg_modes}

    @property
    def step_unbound_ops(self) -> dict[str, str]:
        """``UNBOUND_OPTIONS`` of the operations bound on this line's headed trainer (an
        operation bound on another trainer path, e.g. 0.9's v0 trainer, stays unreached)."""
        return {
            op: option
            for op, option in UNBOUND_OPTIONS.items()
            if op in self.bindings
            and _trainer_of(self.bindings[op]) == self.release.trainer.split()[0]
        }

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

"""The verl target: one binding mixin per contract area, composed over verl's functions."""

from __future__ import annotations

from rlconform.adapters.base import Target
from rlconform.adapters.verl.advantage import AdvantageOps
from rlconform.adapters.verl.aggregate import AggregateOps
from rlconform.adapters.verl.batch import BatchOps
from rlconform.adapters.verl.kl import KLOps
from rlconform.adapters.verl.layout import LayoutOps
from rlconform.adapters.verl.logprob import LogprobOps
from rlconform.adapters.verl.loss import LossOps
from rlconform.adapters.verl.manifest import DEVIATIONS, PROFILE
from rlconform.adapters.verl.mask import MaskOps
from rlconform.adapters.verl.metrics import MetricsOps
from rlconform.adapters.verl.offpolicy import OffpolicyOps
from rlconform.adapters.verl.reward import RewardOps


class VerlTarget(
    MaskOps,
    LayoutOps,
    LogprobOps,
    RewardOps,
    KLOps,
    AdvantageOps,
    LossOps,
    OffpolicyOps,
    AggregateOps,
    BatchOps,
    MetricsOps,
    Target,
):
    """verl's own postprocess functions behind the canonical padded layout."""

    name = "verl"

    def __init__(self, device: str = "cpu", version: str = "0.9.1"):
        self.device = device
        self.version = version
        self.profile = PROFILE
        self.deviations = dict(DEVIATIONS)

"""torchref: a vectorized torch implementation of the whole contract.

It is the embedded default target, the worked example of a custom-trainer adapter (copy
this folder: one mixin per contract area), and the fast path for audits. Device-agnostic:
``rlconform certify torchref --device cuda`` runs it on a GPU.
"""

from __future__ import annotations

import torch

from rlconform.adapters.base import Profile, Target
from rlconform.adapters.torchref.advantage import AdvantageOps
from rlconform.adapters.torchref.aggregate import AggregateOps
from rlconform.adapters.torchref.batch import BatchOps
from rlconform.adapters.torchref.filter import FilterOps
from rlconform.adapters.torchref.kl import KLOps
from rlconform.adapters.torchref.layout import LayoutOps
from rlconform.adapters.torchref.logprob import LogprobOps
from rlconform.adapters.torchref.loss import LossOps
from rlconform.adapters.torchref.mask import MaskOps
from rlconform.adapters.torchref.metrics import MetricsOps
from rlconform.adapters.torchref.offpolicy import OffpolicyOps
from rlconform.adapters.torchref.reward import RewardOps
from rlconform.adapters.torchref.schema import SchemaOps
from rlconform.adapters.torchref.step import StepOps

TORCHREF_PROFILE = Profile(name="torchref", dtype="float32")


class TorchRef(
    SchemaOps,
    FilterOps,
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
    StepOps,
    Target,
):
    """The reference torch target (float32 by default, like a real trainer)."""

    name = "torchref"

    def __init__(self, device: str = "cpu", dtype: str = "float32"):
        self.device = device
        self.version = torch.__version__
        self.profile = Profile(name=f"torchref-{dtype}", dtype=dtype)
        self.deviations = {}

"""The oracle as a target: certifies the harness plumbing end to end.

Each operation converts the padded tensors it receives into ragged lists, calls the
stdlib oracle in float64 and pads the answer back. ``rlconform certify oracle`` must pass
every clause; if it does not, the harness or a clause is wrong, not an implementation.
"""

from __future__ import annotations

from rlconform.adapters.base import Profile, Target
from rlconform.adapters.oracle_target.advantage import AdvantageOps
from rlconform.adapters.oracle_target.aggregate import AggregateOps
from rlconform.adapters.oracle_target.batch import BatchOps
from rlconform.adapters.oracle_target.filter import FilterOps
from rlconform.adapters.oracle_target.kl import KLOps
from rlconform.adapters.oracle_target.layout import LayoutOps
from rlconform.adapters.oracle_target.logprob import LogprobOps
from rlconform.adapters.oracle_target.loss import LossOps
from rlconform.adapters.oracle_target.mask import MaskOps
from rlconform.adapters.oracle_target.metrics import MetricsOps
from rlconform.adapters.oracle_target.offpolicy import OffpolicyOps
from rlconform.adapters.oracle_target.reward import RewardOps
from rlconform.adapters.oracle_target.schema import SchemaOps
from rlconform.adapters.oracle_target.step import StepOps

# The contract itself: every legitimate choice at its default, in float64.
ORACLE_PROFILE = Profile(name="oracle", dtype="float64")


class OracleTarget(
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
    """The float64 oracle behind the padded-layout protocol."""

    name = "oracle"
    version = "contract"

    def __init__(self, device: str = "cpu"):
        self.device = device
        self.profile = ORACLE_PROFILE
        self.deviations = {}

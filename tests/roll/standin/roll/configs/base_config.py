"""Stand-in: the PPOConfig fields the adapter's pipeline config reads."""

import dataclasses


@dataclasses.dataclass
class PPOConfig:
    adv_estimator: str = "gae"
    gamma: float = 1.0
    lambd: float = 0.95
    kl_penalty: str = "kl"
    add_token_level_kl: bool = False
    reward_clip: float = None
    norm_mean_type: str = None
    norm_std_type: str = None
    whiten_advantages: bool = False


@dataclasses.dataclass
class TrainInferISWeightConfig:
    enabled: bool = False
    weight_type: str = "token"
    upper_bound: float = 1.2
    detach: bool = True


@dataclasses.dataclass
class TrainInferFilterConfig:
    enabled: bool = False
    agg_type: str = "token"
    ratio_enabled: bool = True
    ratio_low: float = 0.8
    ratio_high: float = 1.2
    diff_enabled: bool = False
    diff_low: float = -0.2
    diff_high: float = 0.2


@dataclasses.dataclass
class TrainInferCorrectionConfig:
    is_weight: TrainInferISWeightConfig = dataclasses.field(
        default_factory=TrainInferISWeightConfig
    )
    filters: list = dataclasses.field(default_factory=list)

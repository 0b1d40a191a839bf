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

"""Stand-in: RLVRConfig adds nothing the adapter reads."""

import dataclasses

from roll.configs.base_config import PPOConfig


@dataclasses.dataclass
class RLVRConfig(PPOConfig):
    max_len_mask: bool = False

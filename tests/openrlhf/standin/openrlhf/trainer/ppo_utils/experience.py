"""Stand-in for openrlhf.trainer.ppo_utils.experience: the fields the adapter sets."""

from dataclasses import dataclass, field

import torch


@dataclass
class Experience:
    action_mask: torch.Tensor = None
    values: torch.Tensor = None
    returns: torch.Tensor = None
    advantages: torch.Tensor = None
    kl: torch.Tensor = None
    rewards: torch.Tensor = None
    index: list = None
    info: dict = field(default_factory=dict)

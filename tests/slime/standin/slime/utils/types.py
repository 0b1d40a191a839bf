"""Stand-in ``slime.utils.types.Sample``: the fields the adapter sets."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Sample:
    group_index: int | None = None
    index: int | None = None
    tokens: list[int] = field(default_factory=list)
    response_length: int = 0
    reward: float | None = None
    loss_mask: list[int] | None = None
    remove_sample: bool = False
    metadata: dict[str, Any] = field(default_factory=dict)

    def get_reward_value(self, args: Any) -> float:
        return self.reward

"""Stand-in ``slime.utils.types.Sample``: the fields the adapter sets."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any


@dataclass
class Sample:
    group_index: int | None = None
    index: int | None = None
    tokens: list[int] = field(default_factory=list)
    response: str = ""
    response_length: int = 0
    reward: float | dict | None = None
    loss_mask: list[int] | None = None
    rollout_log_probs: list[float] | None = None
    remove_sample: bool = False
    status: Sample.Status | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    class Status(Enum):
        PENDING = "pending"
        COMPLETED = "completed"
        TRUNCATED = "truncated"
        ABORTED = "aborted"
        FAILED = "failed"

    def get_reward_value(self, args: Any) -> float:
        return self.reward if not args.reward_key else self.reward[args.reward_key]

    @property
    def effective_response_length(self) -> int:
        return sum(self.loss_mask) if self.loss_mask is not None else self.response_length

    def _validate_response_metadata_lengths(self) -> None:
        for name in ("loss_mask", "rollout_log_probs"):
            value = getattr(self, name)
            if value is not None and len(value) != self.response_length:
                raise ValueError(f"{name} length {len(value)} != response_length")

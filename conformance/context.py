"""What a clause check receives: the target, its profile, dtype, device and a safe call."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from rlconform.adapters.base import Profile, Target
from rlconform.conformance.compare import Tolerance, tolerance_for
from rlconform.conformance.errors import TargetError
from rlconform.conformance.harness import torch_dtype


@dataclasses.dataclass
class CheckContext:
    """Everything a clause check needs to call the target and compare its output."""

    target: Target
    device: str = "cpu"
    seed: int = 0

    @property
    def profile(self) -> Profile:
        return self.target.profile

    @property
    def dtype(self) -> torch.dtype:
        return torch_dtype(self.profile.dtype)

    @property
    def tolerance(self) -> Tolerance:
        return tolerance_for(self.profile.dtype)

    def call(self, op: str, *args: Any, **kwargs: Any) -> Any:
        """Call the target's ``op``; any exception it raises becomes a TargetError."""
        fn = getattr(self.target, op)
        try:
            return fn(*args, **kwargs)
        except Exception as exc:  # the implementation's failure, whatever its type
            raise TargetError(op, exc) from exc

    def floats(self, rows: Any, *, fill: float = 0.0, width: int | None = None) -> torch.Tensor:
        """Ragged float rows as a right-padded tensor in the target's dtype and device."""
        from rlconform.conformance.harness import pad_right

        return pad_right(rows, width=width, fill=fill, dtype=self.dtype, device=self.device)

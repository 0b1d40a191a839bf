"""Conversion between the contract's padded response layout (CONTRACT §2: (B, T) response
columns, right-padded, ``response_mask`` 1 on action tokens) and SkyRL's.

SkyRL's response-level tensors are right-aligned (``convert_prompts_responses_to_batch_
tensors``): a response of length L fills the last L columns of (B, max_response) and the
padding is in the left columns. Its ``response_mask`` is 1 on every response token, tool
and observation tokens included; ``loss_mask`` is 1 only on the tokens the policy
produced. The advantage estimators receive ``response_mask``; the losses and the KL in the
reward receive ``loss_mask``.

A sample's response length is the position of its last action token + 1 (the canonical
layout does not tell a trailing non-action token from padding); action-mask holes inside
it are tool tokens (``response_mask`` 1, ``loss_mask`` 0). The conversion is a permutation
of each row, right-aligning its first L columns; the canonical padding columns move, values
and all, into the left padding columns, so whatever the caller put in padding is what SkyRL
sees there. Nothing here computes.
"""

from __future__ import annotations

import dataclasses

import torch


def lengths(action_mask: torch.Tensor) -> list[int]:
    """Response length of each row: last action token + 1 (0 without one)."""
    out = []
    for row in action_mask.tolist():
        ones = [j for j, m in enumerate(row) if m]
        out.append(ones[-1] + 1 if ones else 0)
    return out


@dataclasses.dataclass(frozen=True)
class RightAligned:
    """The row permutation of a batch: canonical column j of row i is SkyRL column
    ``(j + width - L_i) % width``."""

    lengths: list[int]
    width: int

    @classmethod
    def of(cls, action_mask: torch.Tensor) -> RightAligned:
        return cls(lengths(action_mask), int(action_mask.shape[-1]))

    def _order(self, length: int) -> list[int]:
        """SkyRL column k holds canonical column order[k]."""
        shift = self.width - length
        return [(k - shift) % self.width for k in range(self.width)]

    def to_skyrl(self, x: torch.Tensor) -> torch.Tensor:
        """Canonical (B, T) -> right-aligned (B, T)."""
        if self.width == 0:
            return x.clone()
        rows = [x[i, self._order(n)] for i, n in enumerate(self.lengths)]
        return torch.stack(rows) if rows else x.clone()

    def to_canonical(self, y: torch.Tensor) -> torch.Tensor:
        """Right-aligned (B, T) -> canonical (B, T) (the inverse permutation)."""
        if self.width == 0:
            return y.clone()
        rows = []
        for i, n in enumerate(self.lengths):
            back = [0] * self.width
            for k, j in enumerate(self._order(n)):
                back[j] = k
            rows.append(y[i, back])
        return torch.stack(rows) if rows else y.clone()

    def response_mask(self, dtype: torch.dtype = torch.int64) -> torch.Tensor:
        """SkyRL's response_mask: 1 on each row's last L_i columns."""
        out = torch.zeros((len(self.lengths), self.width), dtype=dtype)
        for i, n in enumerate(self.lengths):
            if n:
                out[i, self.width - n :] = 1
        return out

    def loss_mask(self, action_mask: torch.Tensor) -> torch.Tensor:
        """SkyRL's loss_mask: the canonical action mask, right-aligned."""
        return self.to_skyrl(action_mask)

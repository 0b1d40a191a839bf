"""Conversion between the contract's padded response layout (CONTRACT §2: (B, T) response
columns, right-padded, ``response_mask`` 1 on action tokens) and AReaL's.

AReaL trains on whole sequences (prompt + response). A rollout batch is right-padded to
its longest sequence (``pad_sequences_to_tensors`` / ``concat_padded_tensors``), with
``attention_mask`` 1 on the sequence and ``loss_mask`` 1 on the response tokens the policy
produced. ``_compute_advantages`` rolls ``loss_mask`` and the inference log-probs by -1:
afterwards column t describes the prediction of token t+1, which is where the reference
log-probs, the critic's values and the losses live. The train engine then packs each
micro-batch into one 1-D sequence with ``cu_seqlens`` (no right padding) before the loss.

Each sample gets a one-token prompt, so response token j is raw column 1 + j and rolled
column j. A sample's response length is the position of its last action token + 1:
trailing mask-0 tokens are right padding (the canonical layout does not tell a trailing
non-action token from padding). Nothing here computes.
"""

from __future__ import annotations

import dataclasses

import torch

PROMPT = 1  # one prompt token per sample


def lengths(response_mask: torch.Tensor) -> list[int]:
    """Response length of each row: last action token + 1 (0 without one)."""
    out = []
    for row in response_mask.tolist():
        ones = [j for j, m in enumerate(row) if m]
        out.append(ones[-1] + 1 if ones else 0)
    return out


@dataclasses.dataclass(frozen=True)
class Padded:
    """A rollout batch as AReaL pads it: width 1 + the longest response."""

    lengths: list[int]
    width: int
    attention_mask: torch.Tensor  # (B, W) bool
    loss_mask: torch.Tensor  # (B, W) int, raw (before the roll)

    @classmethod
    def of(cls, response_mask: torch.Tensor) -> Padded:
        lens = lengths(response_mask)
        batch = response_mask.shape[0]
        width = PROMPT + max(lens, default=0)
        attention = torch.zeros((batch, width), dtype=torch.bool)
        loss = torch.zeros((batch, width), dtype=torch.int64)
        for i, n in enumerate(lens):
            attention[i, : PROMPT + n] = True
            loss[i, PROMPT : PROMPT + n] = response_mask[i, :n].to(torch.int64)
        return cls(lens, width, attention, loss)

    def raw(self, x: torch.Tensor, fill: float = 0.0) -> torch.Tensor:
        """Response-coordinate ``x`` (B, T) at raw columns 1 + j (``fill`` elsewhere)."""
        out = torch.full((x.shape[0], self.width), fill, dtype=x.dtype)
        for i, n in enumerate(self.lengths):
            out[i, PROMPT : PROMPT + n] = x[i, :n]
        return out

    def rolled(self, x: torch.Tensor, fill: float = 0.0) -> torch.Tensor:
        """Response-coordinate ``x`` (B, T) at rolled columns j (``fill`` elsewhere)."""
        out = torch.full((x.shape[0], self.width), fill, dtype=x.dtype)
        for i, n in enumerate(self.lengths):
            out[i, :n] = x[i, :n]
        return out

    def response(self, y: torch.Tensor, columns: int) -> torch.Tensor:
        """Rolled (B, W) ``y`` back in response coordinates (B, T): column j is rolled
        column j; columns the batch does not have are 0."""
        kept = y[:, : min(self.width, columns)]
        pad = columns - kept.shape[1]
        if pad > 0:
            kept = torch.cat([kept, torch.zeros((y.shape[0], pad), dtype=y.dtype)], dim=1)
        return kept


@dataclasses.dataclass(frozen=True)
class Packed:
    """A micro-batch as the train engine packs it: sample i's rolled positions 0 .. L_i
    (its L_i response tokens, then the position after its last token, loss_mask 0)."""

    lengths: list[int]
    offsets: list[int]
    cu_seqlens: torch.Tensor

    @classmethod
    def of(cls, response_mask: torch.Tensor) -> Packed:
        lens = lengths(response_mask)
        offsets, total = [], 0
        for n in lens:
            offsets.append(total)
            total += n + 1
        cu = torch.tensor([*offsets, total], dtype=torch.int32)
        return cls(lens, offsets, cu)

    def pack(self, x: torch.Tensor, after: float) -> torch.Tensor:
        """(B, T) -> 1-D: each sample's L_i values, then ``after`` at the position after
        its last token (a model output there: finite, and never an action)."""
        pieces = []
        for i, n in enumerate(self.lengths):
            pieces.append(x[i, :n])
            pieces.append(torch.full((1,), after, dtype=x.dtype))
        return torch.cat(pieces) if pieces else x.new_zeros((0,))

    def unpack(self, y: torch.Tensor, columns: int) -> torch.Tensor:
        """1-D ``y`` back to (B, T); padding columns are 0 (the engine has none)."""
        rows = []
        for offset, n in zip(self.offsets, self.lengths, strict=True):
            row = y[offset : offset + n]
            rows.append(torch.cat([row, y.new_zeros((columns - n,))]))
        if not rows:
            return y.new_zeros((0, columns))
        return torch.stack(rows)

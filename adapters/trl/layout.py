"""Canonical padded tensors <-> GRPOTrainer's layout. Conversion only, no math.

TRL's completions are right-padded to the longest one; ``completion_mask`` is 1 on the
generated tokens (``t < L_i``) and the optional ``tool_mask`` is 0 on tool-output tokens
inside a completion (TRL pads it with 1). Their product is the canonical action-token
mask, so a canonical ``response_mask`` maps to ``L_i`` = its last 1 + 1, a
``completion_mask`` of ``t < L_i`` and a ``tool_mask`` holding its holes (omitted when a
batch has none, as TRL omits it without tools). Per-sequence quantities (advantages, the
sequence-level IS ratio, the OPSM keep flag) are one value per completion in TRL; the
canonical layout carries them on the sample's action tokens and 0 elsewhere.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import torch

from rlconform.adapters.base import Inexpressible


@dataclasses.dataclass(frozen=True)
class Completions:
    lengths: list[int]
    completion_mask: torch.Tensor  # (B, T) long
    tool_mask: torch.Tensor | None  # (B, T) long, 1 on padding, or None without holes
    tool_masks: list[list[int]] | None  # per completion, its first L_i entries

    @property
    def width(self) -> int:
        return int(self.completion_mask.shape[1])

    @property
    def longest(self) -> int:
        return max(self.lengths, default=0)


def require_micro_batch(shape: Sequence[int], *, tokens: bool = False) -> None:
    """Refuse a (B, T) batch TRL's trainer never builds: no completion in the micro-batch,
    or (``tokens``: where a binding needs a column) completions of no token."""
    if shape[0] == 0:
        raise Inexpressible("TRL's micro-batches hold at least one completion")
    if tokens and shape[1] == 0:
        raise Inexpressible(
            "completions of no token: TRL's generator returns at least the token it stopped on"
        )


def completions(response_mask: torch.Tensor) -> Completions:
    """The TRL masks of a canonical action-token mask (B, T)."""
    action = response_mask.detach().to("cpu").bool()
    batch, width = action.shape
    lengths = []
    for row in action.tolist():
        ones = [t for t, m in enumerate(row) if m]
        lengths.append(ones[-1] + 1 if ones else 0)
    columns = torch.arange(width).expand(batch, width)
    inside = columns < torch.tensor(lengths, dtype=torch.long).reshape(batch, 1)
    completion_mask = inside.long()
    holes = bool((inside & ~action).any())
    if not holes:
        return Completions(lengths, completion_mask, None, None)
    tool_mask = torch.where(inside, action.long(), torch.ones_like(completion_mask))
    tool_masks = [row[:n] for row, n in zip(tool_mask.tolist(), lengths)]
    return Completions(lengths, completion_mask, tool_mask, tool_masks)


def per_sequence(values: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor | None:
    """(B,) the value each sample carries on its action tokens, or None when some sample's
    action tokens carry different values (it is then not one value per sequence). A
    sample without action tokens carries 0 (nothing reads it)."""
    action = response_mask.bool()
    batch, width = action.shape
    if width == 0:
        return torch.zeros(batch, dtype=values.dtype, device=values.device)
    has = action.any(dim=1)
    first = torch.where(has, action.long().argmax(dim=1), torch.zeros(batch, dtype=torch.long))
    picked = values.gather(1, first.reshape(-1, 1)).reshape(-1)
    picked = torch.where(has, picked, torch.zeros_like(picked))
    same = torch.where(action, values == picked.reshape(-1, 1), torch.ones_like(action))
    return picked if bool(same.all()) else None


def on_actions(per_seq: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """A per-sequence value ((B,) or (B, 1)) placed on the sample's action tokens, 0 elsewhere."""
    batch, width = response_mask.shape
    spread = per_seq.reshape(batch, 1).expand(batch, width)
    return torch.where(response_mask.bool(), spread, torch.zeros_like(spread))


def widen(tensor: torch.Tensor, width: int) -> torch.Tensor:
    """TRL's (B, longest) tensor right-padded with zeros to the canonical width."""
    batch, have = tensor.shape
    if have == width:
        return tensor
    if have > width:
        return tensor[:, :width]
    pad = torch.zeros((batch, width - have), dtype=tensor.dtype, device=tensor.device)
    return torch.cat([tensor, pad], dim=1)


def ragged(values: torch.Tensor, lengths: Sequence[int]) -> list[list[float]]:
    """Each row's first L_i values, as the per-completion lists ``_generate`` returns."""
    rows = values.detach().to("cpu", torch.float64).tolist()
    return [row[:n] for row, n in zip(rows, lengths)]


def group_order(index: Sequence[object]) -> tuple[list[int], int] | None:
    """TRL's groups are ``num_generations`` consecutive completions of one prompt: the
    permutation that makes the case's groups consecutive (in order of first appearance,
    members in case order) and the common group size, or None when sizes differ."""
    members: dict[object, list[int]] = {}
    for i, label in enumerate(index):
        members.setdefault(label, []).append(i)
    sizes = {len(m) for m in members.values()}
    if len(sizes) != 1:
        return None
    return [i for group in members.values() for i in group], sizes.pop()


def unpermute(values: torch.Tensor, order: Sequence[int]) -> torch.Tensor:
    """Rows of ``values`` (in ``order``) back in the case's order."""
    inverse = [0] * len(order)
    for position, i in enumerate(order):
        inverse[i] = position
    return values[torch.tensor(inverse, dtype=torch.long)] if order else values

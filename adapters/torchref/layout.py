"""torchref operations for the CONTRACT area `layout` (vectorized torch, any device).

Ragged inputs and outputs are lists of 1-D tensors (one per sample), as a rollout engine
hands them over; padded outputs are (B, width) tensors; packed outputs are (1, N) rows
with ``cu_seqlens``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch


def _lengths(rows: Sequence[torch.Tensor], device: torch.device | str) -> torch.Tensor:
    return torch.tensor([int(row.numel()) for row in rows], dtype=torch.int64, device=device)


def _concat(
    rows: Sequence[torch.Tensor], dtype: torch.dtype, device: torch.device | str
) -> torch.Tensor:
    if not rows:
        return torch.zeros(0, dtype=dtype, device=device)
    return torch.cat([row.reshape(-1) for row in rows]).to(device)


def _scatter_padded(
    rows: Sequence[torch.Tensor],
    width: int,
    fill: float | int,
    *,
    left: bool,
    dtype: torch.dtype,
    device: torch.device | str,
) -> torch.Tensor:
    """(B, width) tensor: row i in its first (right padding) or last (left padding) L_i columns."""
    lengths = _lengths(rows, device)
    if bool((lengths > width).any()):
        raise ValueError(f"a row of {int(lengths.max())} tokens is wider than {width}")
    out = torch.full((len(rows), width), fill, dtype=dtype, device=device)
    flat = _concat(rows, dtype, device)
    sample = torch.repeat_interleave(torch.arange(len(rows), device=device), lengths)
    starts = torch.cumsum(lengths, 0) - lengths
    offset = torch.arange(flat.numel(), device=device) - starts[sample]
    column = offset + (width - lengths[sample]) if left else offset
    out[sample, column] = flat
    return out


class LayoutOps:
    """Vectorized `layout` operations: padded and packed layouts and their inverses."""

    def _ragged_device(self, *groups: Sequence[torch.Tensor]) -> torch.device | str:
        for rows in groups:
            for row in rows:
                return row.device
        return self.device

    def pad_batch(
        self,
        prompts: Sequence[torch.Tensor],
        responses: Sequence[torch.Tensor],
        *,
        pad_token_id: int,
        prompt_width: int | None = None,
        response_width: int | None = None,
        response_fields: Mapping[str, Sequence[torch.Tensor]] | None = None,
    ) -> dict[str, torch.Tensor]:
        """layout.pad: ragged prompts/responses -> the canonical padded batch.

        prompts (B, P) left-padded, responses (B, R) right-padded (both with
        ``pad_token_id``), input_ids, attention_mask, position_ids (0 at the first real
        token, 0 at padding), response_mask (B, R), and each response field (B, R) with 0
        at padding.
        """
        if len(prompts) != len(responses):
            raise ValueError(f"{len(prompts)} prompts but {len(responses)} responses")
        device = self._ragged_device(prompts, responses)
        prompt_lengths = _lengths(prompts, device)
        response_lengths = _lengths(responses, device)
        if prompt_width is None:
            prompt_width = int(prompt_lengths.max()) if len(prompts) else 0
        if response_width is None:
            response_width = int(response_lengths.max()) if len(responses) else 0
        ids = {"dtype": torch.int64, "device": device}
        prompt_ids = _scatter_padded(prompts, prompt_width, pad_token_id, left=True, **ids)
        response_ids = _scatter_padded(responses, response_width, pad_token_id, left=False, **ids)
        prompt_columns = torch.arange(prompt_width, device=device)
        response_columns = torch.arange(response_width, device=device)
        prompt_attention = prompt_columns >= (prompt_width - prompt_lengths).unsqueeze(-1)
        response_mask = response_columns < response_lengths.unsqueeze(-1)
        attention_mask = torch.cat([prompt_attention, response_mask], dim=-1).to(torch.int64)
        position_ids = (attention_mask.cumsum(dim=-1) - 1).clamp(min=0) * attention_mask
        batch = {
            "prompts": prompt_ids,
            "responses": response_ids,
            "input_ids": torch.cat([prompt_ids, response_ids], dim=-1),
            "attention_mask": attention_mask,
            "position_ids": position_ids,
            "response_mask": response_mask.to(torch.int64),
        }
        for name, rows in (response_fields or {}).items():
            if not bool((_lengths(rows, device) == response_lengths).all()):
                raise ValueError(f"response field {name!r} is not aligned with the responses")
            dtype = rows[0].dtype if rows else torch.float32
            batch[name] = _scatter_padded(
                rows, response_width, 0, left=False, dtype=dtype, device=device
            )
        return batch

    def unpad_batch(
        self, batch: Mapping[str, torch.Tensor], *, response_fields: Sequence[str] = ()
    ) -> dict[str, list[torch.Tensor]]:
        """layout.roundtrip: padded batch -> ragged lists, reading only attention_mask 1 positions."""
        prompt_width = batch["prompts"].shape[-1]
        real = batch["attention_mask"].bool()
        prompt_real, response_real = real[:, :prompt_width], real[:, prompt_width:]
        prompt_lengths = prompt_real.sum(dim=-1).tolist()
        response_lengths = response_real.sum(dim=-1).tolist()
        ragged = {
            "prompts": list(batch["prompts"][prompt_real].split(prompt_lengths)),
            "responses": list(batch["responses"][response_real].split(response_lengths)),
        }
        for name in response_fields:
            ragged[name] = list(batch[name][response_real].split(response_lengths))
        return ragged

    def pack_batch(
        self,
        sequences: Sequence[torch.Tensor],
        *,
        fields: Mapping[str, Sequence[torch.Tensor]] | None = None,
    ) -> dict[str, torch.Tensor]:
        """layout.pack: ragged sequences -> (1, N) rows with cu_seqlens (B + 1,) int32.

        position_ids restart at 0 per sample; segment_ids[n] is the sample owning token n
        (token n attends token m only within the same segment).
        """
        device = self._ragged_device(sequences)
        lengths = _lengths(sequences, device)
        input_ids = _concat(sequences, torch.int64, device)
        segment_ids = torch.repeat_interleave(torch.arange(len(sequences), device=device), lengths)
        ends = torch.cumsum(lengths, 0)
        cu_seqlens = torch.cat([torch.zeros(1, dtype=torch.int64, device=device), ends])
        position_ids = torch.arange(input_ids.numel(), device=device) - cu_seqlens[segment_ids]
        packed = {
            "input_ids": input_ids.unsqueeze(0),
            "cu_seqlens": cu_seqlens.to(torch.int32),
            "position_ids": position_ids.unsqueeze(0),
            "segment_ids": segment_ids.unsqueeze(0),
        }
        for name, rows in (fields or {}).items():
            if not bool((_lengths(rows, device) == lengths).all()):
                raise ValueError(f"field {name!r} is not aligned with the sequences")
            dtype = rows[0].dtype if rows else torch.float32
            packed[name] = _concat(rows, dtype, device).unsqueeze(0)
        return packed

    def unpack_batch(
        self, packed: Mapping[str, torch.Tensor], *, fields: Sequence[str] = ()
    ) -> dict[str, list[torch.Tensor]]:
        """layout.roundtrip: packed rows -> ragged lists cut at cu_seqlens (tail ignored)."""
        cu_seqlens = packed["cu_seqlens"].to(torch.int64)
        lengths = (cu_seqlens[1:] - cu_seqlens[:-1]).tolist()
        total = int(cu_seqlens[-1])
        ragged = {"input_ids": list(packed["input_ids"].reshape(-1)[:total].clone().split(lengths))}
        for name in fields:
            ragged[name] = list(packed[name].reshape(-1)[:total].clone().split(lengths))
        return ragged

"""Oracle-target operations for `layout`: tensors -> ragged lists -> oracle -> tensors."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from rlconform.oracle import layout as oracle_layout


def _as_lists(rows: Sequence[torch.Tensor]) -> list[list]:
    return [row.tolist() for row in rows]


def _field_dtype(rows: Sequence[torch.Tensor]) -> torch.dtype:
    return rows[0].dtype if rows else torch.float32


class LayoutOps:
    """`layout` operations that delegate to `rlconform.oracle.layout`."""

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
        fields = dict(response_fields or {})
        prompt_rows, response_rows = _as_lists(prompts), _as_lists(responses)
        if prompt_width is None:
            prompt_width = max((len(r) for r in prompt_rows), default=0)
        if response_width is None:
            response_width = max((len(r) for r in response_rows), default=0)
        padded = oracle_layout.pad_batch(
            prompt_rows,
            response_rows,
            pad_token_id=pad_token_id,
            prompt_width=prompt_width,
            response_width=response_width,
            response_fields={name: _as_lists(rows) for name, rows in fields.items()},
        )
        widths = {
            "prompts": prompt_width,
            "responses": response_width,
            "response_mask": response_width,
        }
        batch = {}
        for name, rows in padded.items():
            dtype = _field_dtype(fields[name]) if name in fields else torch.int64
            width = widths.get(
                name, response_width if name in fields else prompt_width + response_width
            )
            batch[name] = torch.tensor(rows, dtype=dtype).reshape(len(rows), width).to(self.device)
        return batch

    def unpad_batch(
        self, batch: Mapping[str, torch.Tensor], *, response_fields: Sequence[str] = ()
    ) -> dict[str, list[torch.Tensor]]:
        names = ("prompts", "responses", "attention_mask", *response_fields)
        ragged = oracle_layout.unpad_batch(
            {name: batch[name].tolist() for name in names}, response_fields=response_fields
        )
        return {
            name: [torch.tensor(row, dtype=batch[name].dtype, device=self.device) for row in rows]
            for name, rows in ragged.items()
        }

    def pack_batch(
        self,
        sequences: Sequence[torch.Tensor],
        *,
        fields: Mapping[str, Sequence[torch.Tensor]] | None = None,
    ) -> dict[str, torch.Tensor]:
        named = dict(fields or {})
        packed = oracle_layout.pack_batch(
            _as_lists(sequences), fields={name: _as_lists(rows) for name, rows in named.items()}
        )
        out = {}
        for name, values in packed.items():
            dtype = _field_dtype(named[name]) if name in named else torch.int64
            if name == "cu_seqlens":
                out[name] = torch.tensor(values, dtype=torch.int32, device=self.device)
            else:
                out[name] = torch.tensor(values, dtype=dtype, device=self.device).reshape(1, -1)
        return out

    def unpack_batch(
        self, packed: Mapping[str, torch.Tensor], *, fields: Sequence[str] = ()
    ) -> dict[str, list[torch.Tensor]]:
        names = ("input_ids", "cu_seqlens", *fields)
        flat = {name: packed[name].reshape(-1).tolist() for name in names}
        ragged = oracle_layout.unpack_batch(flat, fields=fields)
        return {
            name: [torch.tensor(row, dtype=packed[name].dtype, device=self.device) for row in rows]
            for name, rows in ragged.items()
        }

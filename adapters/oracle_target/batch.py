"""Oracle-target operations for `batch`: tensors -> plain row lists -> oracle -> tensors.

The container is a ``PlainBatch``: the oracle's plain batch (every field a list of rows)
plus what is needed to rebuild each tensor (dtype, trailing shape, device).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from rlconform.conformance.harness import to_float_list
from rlconform.oracle import batch as oracle_batch


@dataclasses.dataclass
class PlainBatch:
    plain: dict[str, Any]
    layout: dict[str, tuple[torch.dtype, tuple[int, ...], Any]]

    def __len__(self) -> int:
        return oracle_batch.batch_size(self.plain)


class BatchOps:
    """`batch` operations that delegate to `rlconform.oracle.batch`."""

    def batch_make(
        self, tensors: dict[str, torch.Tensor], non_tensors: dict[str, list], meta: dict
    ) -> PlainBatch:
        rows = [len(v) for v in tensors.values()] + [len(v) for v in non_tensors.values()]
        plain = {
            "size": rows[0] if rows else 0,
            "tensors": {
                k: to_float_list(v) if v.is_floating_point() else v.tolist()
                for k, v in tensors.items()
            },
            "non_tensors": {k: list(v) for k, v in non_tensors.items()},
            "meta": dict(meta),
        }
        oracle_batch.batch_size(plain)
        layout = {k: (v.dtype, tuple(v.shape[1:]), v.device) for k, v in tensors.items()}
        return PlainBatch(oracle_batch.take_rows(plain, list(range(plain["size"]))), layout)

    def batch_read(
        self, batch: PlainBatch
    ) -> tuple[dict[str, torch.Tensor], dict[str, list], dict]:
        size = len(batch)
        tensors = {}
        for key, rows in batch.plain["tensors"].items():
            dtype, trailing, device = batch.layout[key]
            values = torch.tensor(rows, dtype=torch.float64 if dtype.is_floating_point else dtype)
            tensors[key] = values.reshape(size, *trailing).to(dtype=dtype, device=device)
        return tensors, dict(batch.plain["non_tensors"]), dict(batch.plain["meta"])

    def _rows(self, batch: PlainBatch, indices: list[int]) -> PlainBatch:
        return PlainBatch(oracle_batch.take_rows(batch.plain, indices), batch.layout)

    def batch_union(self, a: PlainBatch, b: PlainBatch) -> PlainBatch:
        return PlainBatch(oracle_batch.union(a.plain, b.plain), {**a.layout, **b.layout})

    def batch_chunk(self, batch: PlainBatch, chunks: int) -> list[PlainBatch]:
        uneven = self.profile.get("batch_chunk_uneven", "error")
        pieces = oracle_batch.chunk_indices(len(batch), chunks, uneven)
        return [self._rows(batch, piece) for piece in pieces]

    def batch_split(self, batch: PlainBatch, split_size: int) -> list[PlainBatch]:
        return [self._rows(batch, p) for p in oracle_batch.split_indices(len(batch), split_size)]

    def batch_select(self, batch: PlainBatch, indices: list[int]) -> PlainBatch:
        return self._rows(batch, list(indices))

    def batch_reorder(self, batch: PlainBatch, indices: list[int]) -> PlainBatch:
        return self._rows(batch, oracle_batch.reorder_indices(len(batch), list(indices)))

    def batch_repeat(self, batch: PlainBatch, times: int, interleave: bool = True) -> PlainBatch:
        return self._rows(batch, oracle_batch.repeat_indices(len(batch), times, interleave))

    def batch_concat(self, batches: list[PlainBatch]) -> PlainBatch:
        return PlainBatch(oracle_batch.concat([b.plain for b in batches]), batches[0].layout)

    def batch_pad_to_divisor(self, batch: PlainBatch, divisor: int) -> tuple[PlainBatch, int]:
        indices, pad_size = oracle_batch.pad_indices(len(batch), divisor)
        return self._rows(batch, indices), pad_size

    def batch_unpad(self, batch: PlainBatch, pad_size: int) -> PlainBatch:
        return self._rows(batch, oracle_batch.unpad_indices(len(batch), pad_size))

    def batch_sample_mean(self, batch: PlainBatch, key: str, pad_size: int) -> float:
        return oracle_batch.sample_mean_excluding_pad(batch.plain["tensors"][key], pad_size)

    def seqlen_workload(self, seqlens: torch.Tensor) -> torch.Tensor:
        work = [oracle_batch.workload(int(length)) for length in seqlens.tolist()]
        return torch.tensor(work, dtype=torch.int64, device=seqlens.device)

    def seqlen_partitions(self, seqlens: list[int], k: int, equal_size: bool) -> list[list[int]]:
        return oracle_batch.balanced_partitions([int(s) for s in seqlens], k, equal_size)

"""torchref operations for the CONTRACT area `batch` (vectorized torch, any device).

The container is a ``TorchBatch``: a ``TensorDict`` of per-sample tensors, a dict of
per-sample Python lists and a meta dict. Every operation returns a new container (union
and reorder are not in place); row operations gather rows with one index tensor.
"""

from __future__ import annotations

import copy
import dataclasses
import heapq
import math
from typing import Any

import torch
from tensordict import TensorDict

_WORKLOAD_LINEAR = 24576


@dataclasses.dataclass
class TorchBatch:
    """Per-sample tensors (batch dim 0), per-sample Python lists, and per-step meta."""

    tensors: TensorDict
    non_tensors: dict[str, list[Any]]
    meta: dict[str, Any]

    def __len__(self) -> int:
        return int(self.tensors.batch_size[0])


def _same_python(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same_python(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same_python(a[k], b[k]) for k in a)
    return a == b


def _same_tensor(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.is_floating_point() or a.is_complex():
        return bool(((a == b) | (torch.isnan(a) & torch.isnan(b))).all())
    return bool(torch.equal(a, b.to(a.device)))


class BatchOps:
    """Vectorized `batch` operations on ``TorchBatch`` containers."""

    def batch_make(
        self, tensors: dict[str, torch.Tensor], non_tensors: dict[str, list], meta: dict
    ) -> TorchBatch:
        sizes = {len(v) for v in tensors.values()} | {len(v) for v in non_tensors.values()}
        if len(sizes) > 1:
            raise ValueError(f"fields disagree in row count: {sorted(sizes)}")
        size = sizes.pop() if sizes else 0
        return TorchBatch(
            TensorDict({k: v.clone() for k, v in tensors.items()}, batch_size=[size]),
            {k: copy.deepcopy(list(v)) for k, v in non_tensors.items()},
            copy.deepcopy(dict(meta)),
        )

    def batch_read(
        self, batch: TorchBatch
    ) -> tuple[dict[str, torch.Tensor], dict[str, list], dict]:
        return (
            {k: batch.tensors[k] for k in batch.tensors.keys()},
            {k: list(v) for k, v in batch.non_tensors.items()},
            dict(batch.meta),
        )

    def _take(self, batch: TorchBatch, index: torch.Tensor) -> TorchBatch:
        rows = index.tolist()
        return TorchBatch(
            batch.tensors[index].clone(),
            {k: [copy.deepcopy(v[i]) for i in rows] for k, v in batch.non_tensors.items()},
            copy.deepcopy(batch.meta),
        )

    def _index(self, values: Any) -> torch.Tensor:
        return torch.as_tensor(values, dtype=torch.int64).reshape(-1)

    def batch_union(self, a: TorchBatch, b: TorchBatch) -> TorchBatch:
        """batch.union: every check runs before anything is built (no partial result)."""
        if len(a) != len(b):
            raise ValueError(f"batch sizes differ: {len(a)} vs {len(b)}")
        for key in set(a.tensors.keys()) & set(b.tensors.keys()):
            if not _same_tensor(a.tensors[key], b.tensors[key]):
                raise ValueError(f"tensor key {key!r} differs between the two batches")
        for key in a.non_tensors.keys() & b.non_tensors.keys():
            if not _same_python(a.non_tensors[key], b.non_tensors[key]):
                raise ValueError(f"non-tensor key {key!r} differs between the two batches")
        for key in a.meta.keys() & b.meta.keys():
            if not _same_python(a.meta[key], b.meta[key]):
                raise ValueError(f"meta key {key!r} differs between the two batches")
        tensors = {k: a.tensors[k].clone() for k in a.tensors.keys()}
        tensors.update({k: b.tensors[k].clone() for k in b.tensors.keys()})
        return TorchBatch(
            TensorDict(tensors, batch_size=[len(a)]),
            copy.deepcopy({**a.non_tensors, **b.non_tensors}),
            copy.deepcopy({**a.meta, **b.meta}),
        )

    def batch_chunk(self, batch: TorchBatch, chunks: int) -> list[TorchBatch]:
        """batch.row_ops: ``chunks`` equal pieces (profile ``batch_chunk_uneven``: error)."""
        size = len(batch)
        if chunks < 1 or size % chunks:
            raise ValueError(f"{size} rows do not split into {chunks} equal chunks")
        rows = torch.arange(size).reshape(chunks, size // chunks)
        return [self._take(batch, piece) for piece in rows]

    def batch_split(self, batch: TorchBatch, split_size: int) -> list[TorchBatch]:
        if split_size < 1:
            raise ValueError(f"split size must be >= 1, got {split_size}")
        return [self._take(batch, piece) for piece in torch.arange(len(batch)).split(split_size)]

    def batch_select(self, batch: TorchBatch, indices: list[int]) -> TorchBatch:
        return self._take(batch, self._index(indices))

    def batch_reorder(self, batch: TorchBatch, indices: list[int]) -> TorchBatch:
        index = self._index(indices)
        if not torch.equal(index.sort().values, torch.arange(len(batch))):
            raise ValueError(f"{indices} is not a permutation of range({len(batch)})")
        return self._take(batch, index)

    def batch_repeat(self, batch: TorchBatch, times: int, interleave: bool = True) -> TorchBatch:
        rows = torch.arange(len(batch))
        index = rows.repeat_interleave(times) if interleave else rows.repeat(times)
        return self._take(batch, index)

    def batch_concat(self, batches: list[TorchBatch]) -> TorchBatch:
        first = batches[0]
        for part in batches[1:]:
            if set(part.tensors.keys()) != set(first.tensors.keys()):
                raise ValueError("concat parts disagree on tensor keys")
            if part.non_tensors.keys() != first.non_tensors.keys():
                raise ValueError("concat parts disagree on non-tensor keys")
            if not _same_python(part.meta, first.meta):
                raise ValueError("concat parts disagree on meta")
        return TorchBatch(
            torch.cat([part.tensors for part in batches], dim=0),
            {
                k: [copy.deepcopy(v) for part in batches for v in part.non_tensors[k]]
                for k in first.non_tensors
            },
            copy.deepcopy(first.meta),
        )

    def batch_pad_to_divisor(self, batch: TorchBatch, divisor: int) -> tuple[TorchBatch, int]:
        """batch.pad_divisor: rows 0, 1, ... (cycling) appended up to a multiple of divisor."""
        size = len(batch)
        pad_size = (-size) % divisor
        if pad_size and not size:
            raise ValueError("cannot pad an empty batch")
        index = torch.arange(size + pad_size) % max(size, 1)
        return self._take(batch, index), pad_size

    def batch_unpad(self, batch: TorchBatch, pad_size: int) -> TorchBatch:
        return self._take(batch, torch.arange(len(batch) - pad_size))

    def batch_sample_mean(self, batch: TorchBatch, key: str, pad_size: int) -> torch.Tensor:
        """batch.pad_divisor: mean of the (B,) tensor ``key`` over the real (non-pad) rows."""
        values = batch.tensors[key]
        return values[: len(batch) - pad_size].mean()

    def seqlen_workload(self, seqlens: torch.Tensor) -> torch.Tensor:
        """batch.seqlen_balance: 24576 * L + L^2 in int64 (int32 overflows at L = 60000)."""
        lengths = seqlens.to(torch.int64)
        return _WORKLOAD_LINEAR * lengths + lengths * lengths

    def seqlen_partitions(self, seqlens: list[int], k: int, equal_size: bool) -> list[list[int]]:
        """batch.seqlen_balance: heaviest-first onto the lightest open part; keep the input
        order's contiguous parts when they are better."""
        size = len(seqlens)
        if k < 1 or size < k or (equal_size and size % k):
            raise ValueError(f"cannot partition {size} samples into {k} parts (equal={equal_size})")
        work = self.seqlen_workload(torch.as_tensor(seqlens, dtype=torch.int64))
        order = sorted(range(size), key=lambda i: (-int(work[i]), i))
        capacity = size // k if equal_size else size
        parts: list[list[int]] = [[] for _ in range(k)]
        heap = [(0, 0, p) for p in range(k)]
        for i in order:
            load, count, p = heapq.heappop(heap)
            parts[p].append(i)
            if count + 1 < capacity:
                heapq.heappush(heap, (load + int(work[i]), count + 1, p))
        greedy_max = max(int(work[part].sum()) for part in parts)
        bounds = [size // k + (1 if p < size % k else 0) for p in range(k)]
        contiguous = [chunk.tolist() for chunk in torch.arange(size).split(bounds)]
        if max(int(work[part].sum()) for part in contiguous) < greedy_max:
            return contiguous
        return [sorted(part) for part in parts]

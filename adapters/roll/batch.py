"""ROLL bindings for the CONTRACT area `batch`: ROLL's own ``DataProto`` container
(``roll.distributed.scheduler.protocol``, a fork of verl's)."""

from __future__ import annotations

from typing import Any

import torch

from rlconform.adapters.roll.common import RollCommon


class BatchBindings(RollCommon):
    """Container operations, each one ``DataProto`` method (or module function)."""

    def _data_proto(self) -> type:
        if self.data_proto is None:
            raise RuntimeError(f"ROLL's DataProto is unavailable: {self.data_proto_error}")
        return self.data_proto

    def batch_make(
        self, tensors: dict[str, torch.Tensor], non_tensors: dict[str, list], meta: dict
    ) -> Any:
        """-> ``DataProto.from_dict(tensors, non_tensors, meta_info)``."""
        return self._data_proto().from_dict(
            tensors=dict(tensors),
            non_tensors={k: list(v) for k, v in non_tensors.items()},
            meta_info=dict(meta),
        )

    def batch_read(self, batch: Any) -> tuple[dict[str, torch.Tensor], dict[str, list], dict]:
        """The container's tensors, non-tensor rows (numpy object arrays, as lists) and meta."""
        tensors = {k: batch.batch[k] for k in batch.batch.keys()}
        non_tensors = {k: list(batch.non_tensor_batch[k]) for k in batch.non_tensor_batch.keys()}
        return tensors, non_tensors, dict(batch.meta_info)

    def batch_union(self, a: Any, b: Any) -> Any:
        """-> ``a.union(b)`` (in place on ``a``, which it returns, as in ROLL)."""
        return a.union(b)

    def batch_chunk(self, batch: Any, chunks: int) -> list[Any]:
        """-> ``DataProto.chunk(chunks)``."""
        return batch.chunk(chunks)

    def batch_split(self, batch: Any, split_size: int) -> list[Any]:
        """ROLL's DataProto has no ``split``: consecutive ``slice(start, end)`` calls."""
        if split_size < 1:
            raise ValueError(f"split size must be >= 1, got {split_size}")
        return [
            batch.slice(start, start + split_size) for start in range(0, len(batch), split_size)
        ]

    def batch_select(self, batch: Any, indices: list[int]) -> Any:
        """-> ``DataProto.select_idxs(indices)``."""
        return batch.select_idxs(list(indices))

    def batch_reorder(self, batch: Any, indices: list[int]) -> Any:
        """-> ``DataProto.reorder(indices)``, which works in place (returned for chaining)."""
        batch.reorder(torch.as_tensor(list(indices), dtype=torch.int64))
        return batch

    def batch_repeat(self, batch: Any, times: int, interleave: bool = True) -> Any:
        """-> ``DataProto.repeat(repeat_times, interleave)``."""
        return batch.repeat(repeat_times=times, interleave=interleave)

    def batch_concat(self, batches: list[Any]) -> Any:
        """-> ``DataProto.concat(batches)``."""
        return self._data_proto().concat(list(batches))

    def batch_pad_to_divisor(self, batch: Any, divisor: int) -> tuple[Any, int]:
        """-> ``pad_dataproto_to_divisor(data, size_divisor)``."""
        return self.runtime.protocol.pad_dataproto_to_divisor(batch, divisor)

    def batch_unpad(self, batch: Any, pad_size: int) -> Any:
        """-> ``unpad_dataproto(data, pad_size)``."""
        return self.runtime.protocol.unpad_dataproto(batch, pad_size)

    # ------------------------------------------------------------------ seqlen balance

    def seqlen_workload(self, seqlens: torch.Tensor) -> torch.Tensor:
        """batch.seqlen_balance (workload) -> ``calculate_workload``, the function
        ``batch_balance`` defines inside itself (compiled from ROLL's source: it cannot be
        reached from outside ``batch_balance``)."""
        return self.sources.get("balance_workload")(seqlens)

    def seqlen_partitions(self, seqlens: list[int], k: int, equal_size: bool) -> list[list[int]]:
        """batch.seqlen_balance (partitions) -> ``batch_balance``'s partitioning: the
        workloads of ``calculate_workload`` on the int64 lengths, then
        ``get_seqlen_balanced_partitions(workloads, k_partitions, equal_size)``
        (``batch_balance`` passes ``equal_size=True``, dynamic batching ``False``)."""
        workloads = self.seqlen_workload(torch.tensor(list(seqlens), dtype=torch.int64))
        return self.F.get_seqlen_balanced_partitions(workloads.tolist(), k, equal_size)

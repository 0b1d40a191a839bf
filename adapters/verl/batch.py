"""verl bindings for the CONTRACT area `batch`: ``verl.protocol.DataProto`` and
``verl.utils.seqlen_balancing``.

The container is verl's ``DataProto``; every row operation is the DataProto method of the
same name, so in-place behaviour (union, reorder) and views (split, unpad) are verl's own.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch


class BatchOps:
    """`batch` operations on verl ``DataProto`` containers."""

    def batch_make(
        self, tensors: dict[str, torch.Tensor], non_tensors: dict[str, list], meta: dict
    ) -> Any:
        from verl import DataProto

        return DataProto.from_dict(
            tensors=dict(tensors),
            non_tensors={k: np.array(v, dtype=object) for k, v in non_tensors.items()},
            meta_info=dict(meta),
        )

    def batch_read(self, batch: Any) -> tuple[dict[str, torch.Tensor], dict[str, list], dict]:
        tensors = {} if batch.batch is None else {k: batch.batch[k] for k in batch.batch.keys()}
        non_tensors = {k: list(v) for k, v in batch.non_tensor_batch.items()}
        return tensors, non_tensors, dict(batch.meta_info)

    def batch_union(self, a: Any, b: Any) -> Any:
        """batch.union: ``DataProto.union`` (in place on ``a``, which it returns)."""
        return a.union(b)

    def batch_chunk(self, batch: Any, chunks: int) -> list[Any]:
        return batch.chunk(chunks)

    def batch_split(self, batch: Any, split_size: int) -> list[Any]:
        return batch.split(split_size)

    def batch_select(self, batch: Any, indices: list[int]) -> Any:
        return batch.select_idxs(list(indices))

    def batch_reorder(self, batch: Any, indices: list[int]) -> Any:
        """batch.row_ops: ``DataProto.reorder`` reorders in place and returns None."""
        return batch.reorder(torch.tensor(list(indices), dtype=torch.int64))

    def batch_repeat(self, batch: Any, times: int, interleave: bool = True) -> Any:
        return batch.repeat(repeat_times=times, interleave=interleave)

    def batch_concat(self, batches: list[Any]) -> Any:
        from verl import DataProto

        return DataProto.concat(list(batches))

    def batch_pad_to_divisor(self, batch: Any, divisor: int) -> tuple[Any, int]:
        from verl.protocol import pad_dataproto_to_divisor

        return pad_dataproto_to_divisor(batch, divisor)

    def batch_unpad(self, batch: Any, pad_size: int) -> Any:
        from verl.protocol import unpad_dataproto

        return unpad_dataproto(batch, pad_size)

    def batch_sample_mean(self, batch: Any, key: str, pad_size: int) -> torch.Tensor:
        """batch.pad_divisor: verl drops pad rows with ``unpad_dataproto`` before any
        per-sample statistic (as its validation loop does); the statistic is the plain mean."""
        return self.batch_unpad(batch, pad_size).batch[key].mean()

    def seqlen_workload(self, seqlens: torch.Tensor) -> torch.Tensor:
        """batch.seqlen_balance: ``seqlen_balancing.calculate_workload``."""
        from verl.utils.seqlen_balancing import calculate_workload

        return calculate_workload(seqlens)

    def seqlen_partitions(self, seqlens: list[int], k: int, equal_size: bool) -> list[list[int]]:
        """batch.seqlen_balance: the trainer's ``_balance_batch`` partitioning: workloads from
        ``calculate_workload`` on int64 lengths, then ``get_seqlen_balanced_partitions``."""
        from verl.utils.seqlen_balancing import calculate_workload, get_seqlen_balanced_partitions

        workloads = calculate_workload(torch.tensor(list(seqlens), dtype=torch.int64))
        return get_seqlen_balanced_partitions(workloads.tolist(), k, equal_size=equal_size)

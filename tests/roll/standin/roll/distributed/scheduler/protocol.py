"""Stand-in DataProto: ROLL's method names over rlconform torchref's batch operations."""

from __future__ import annotations

import torch
from tensordict import TensorDict

from rlconform.adapters.roll.manifest import PROFILE
from rlconform.adapters.torchref import TorchRef
from rlconform.adapters.torchref.batch import TorchBatch

_REF = TorchRef()
_REF.profile = PROFILE


class DataProto:
    def __init__(self, batch=None, non_tensor_batch=None, meta_info=None):
        self.batch = batch
        self.non_tensor_batch = non_tensor_batch if non_tensor_batch is not None else {}
        self.meta_info = meta_info if meta_info is not None else {}

    @classmethod
    def from_dict(cls, tensors, non_tensors=None, meta_info=None, num_batch_dims=1):
        sizes = {t.shape[0] for t in tensors.values()}
        size = sizes.pop() if sizes else 0
        non_tensors = {k: list(v) for k, v in (non_tensors or {}).items()}
        return cls(TensorDict(dict(tensors), batch_size=[size]), non_tensors, dict(meta_info or {}))

    def __len__(self):
        return self.batch.batch_size[0]

    def rename(self, old_keys=None, new_keys=None):
        old = [old_keys] if isinstance(old_keys, str) else list(old_keys)
        new = [new_keys] if isinstance(new_keys, str) else list(new_keys)
        for a, b in zip(old, new):
            self.batch[b] = self.batch.pop(a)
        return self

    # torchref round trip --------------------------------------------------------------

    def _torch(self):
        return TorchBatch(self.batch, self.non_tensor_batch, self.meta_info)

    @classmethod
    def _wrap(cls, batch):
        return cls(batch.tensors, batch.non_tensors, batch.meta)

    def union(self, other):
        merged = _REF.batch_union(self._torch(), other._torch())
        self.batch, self.non_tensor_batch, self.meta_info = (
            merged.tensors,
            merged.non_tensors,
            merged.meta,
        )
        return self

    def chunk(self, chunks):
        """Pieces of ceil(n / chunks) rows (the adapter profile's batch_chunk_uneven)."""
        n = len(self)
        size = max(-(-n // chunks), 1)
        return [self.slice(start, start + size) for start in range(0, n, size)]

    def slice(self, start=None, end=None, step=None):
        rows = list(range(len(self)))[start:end:step]
        return self._wrap(_REF.batch_select(self._torch(), rows))

    def select_idxs(self, idxs):
        return self._wrap(_REF.batch_select(self._torch(), torch.as_tensor(idxs).tolist()))

    def reorder(self, indices):
        moved = _REF.batch_reorder(self._torch(), indices.tolist())
        self.batch, self.non_tensor_batch = moved.tensors, moved.non_tensors

    def repeat(self, repeat_times=2, interleave=True):
        return self._wrap(_REF.batch_repeat(self._torch(), repeat_times, interleave))

    @staticmethod
    def concat(data):
        return DataProto._wrap(_REF.batch_concat([d._torch() for d in data]))


def pad_dataproto_to_divisor(data, size_divisor):
    padded, pad_size = _REF.batch_pad_to_divisor(data._torch(), size_divisor)
    return DataProto._wrap(padded), pad_size


def unpad_dataproto(data, pad_size):
    return DataProto._wrap(_REF.batch_unpad(data._torch(), pad_size))

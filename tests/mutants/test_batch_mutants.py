"""Broken batch implementations must fail on their batch.* clause."""

from __future__ import annotations

import copy
import dataclasses

import torch
from tensordict import TensorDict

from rlconform.adapters.base import with_overrides
from rlconform.adapters.torchref.batch import TorchBatch, _same_tensor
from tests.conftest import assert_caught, assert_graded, certify_one


def _with_profile(target, **extra):
    target.profile = dataclasses.replace(target.profile, extra={**target.profile.extra, **extra})
    return target


def union_overwriting(self, a, b):
    tensors = {k: a.tensors[k] for k in a.tensors.keys()}
    tensors.update({k: b.tensors[k] for k in b.tensors.keys()})
    return TorchBatch(
        TensorDict(tensors, batch_size=[len(b)]),
        {**a.non_tensors, **b.non_tensors},
        {**a.meta, **b.meta},
    )


def union_in_place_partial(self, a, b):
    """verl's order: new tensor keys go into ``a`` before the non-tensor check runs."""
    for key in b.tensors.keys():
        if key in a.tensors.keys():
            if not _same_tensor(a.tensors[key], b.tensors[key]):
                raise ValueError(f"{key} differs")
        else:
            a.tensors[key] = b.tensors[key].clone()
    for key in b.non_tensors.keys() & a.non_tensors.keys():
        if a.non_tensors[key] != b.non_tensors[key]:
            raise ValueError(f"{key} differs")
    a.non_tensors.update(b.non_tensors)
    a.meta.update(b.meta)
    return a


def union_in_place_checked(self, a, b):
    merged = self.batch_union(a, b)
    a.tensors, a.non_tensors, a.meta = merged.tensors, merged.non_tensors, merged.meta
    return a


def reorder_tensors_only(self, batch, indices):
    return TorchBatch(
        batch.tensors[torch.as_tensor(indices, dtype=torch.int64)].clone(),
        copy.deepcopy(batch.non_tensors),
        copy.deepcopy(batch.meta),
    )


def chunk_splitting_meta(self, batch, chunks):
    pieces = self.batch_chunk(batch, chunks)
    size = len(batch) // chunks
    for p, piece in enumerate(pieces):
        for key, value in batch.meta.items():
            if isinstance(value, list) and len(value) == len(batch):
                piece.meta[key] = value[p * size : (p + 1) * size]
    return pieces


def pad_from_tail(self, batch, divisor):
    size = len(batch)
    pad_size = (-size) % divisor
    tail = [size - 1 - (j % size) for j in range(pad_size)]
    index = torch.tensor(list(range(size)) + tail, dtype=torch.int64)
    return self._take(batch, index), pad_size


def pad_with_zeros(self, batch, divisor):
    padded, pad_size = self.batch_pad_to_divisor(batch, divisor)
    if pad_size:
        for key in padded.tensors.keys():
            padded.tensors[key][len(batch) :] = 0
    return padded, pad_size


def unpad_one_row_short(self, batch, pad_size):
    return self.batch_unpad(batch, max(pad_size - 1, 0))


def sample_mean_with_pad_rows(self, batch, key, pad_size):
    return batch.tensors[key].mean()


def partitions_with_duplicate(self, seqlens, k, equal_size):
    parts = self.seqlen_partitions(seqlens, k, equal_size)
    if len(seqlens) > 1:
        first = parts[0][0]
        for part in parts:
            for j, i in enumerate(part):
                if i != first:
                    part[j] = first
                    return parts
    return parts


def workload_int32(self, seqlens):
    lengths = seqlens.to(torch.int32)
    return 24576 * lengths + lengths * lengths


def partitions_in_input_order_reversed(self, seqlens, k, equal_size):
    """Heavy samples grouped together: worse than the input order on sorted inputs."""
    order = sorted(range(len(seqlens)), key=lambda i: -seqlens[i])
    base, extra = divmod(len(seqlens), k)
    sizes = [base + (1 if p < extra else 0) for p in range(k)]
    parts, start = [], 0
    for size in sizes:
        parts.append(order[start : start + size])
        start += size
    return parts


def test_union_silent_overwrite_is_caught(torchref):
    result = assert_caught(with_overrides(torchref, batch_union=union_overwriting), "batch.union")
    assert "silent overwrite" in result.message and result.check == "conflict_raises"


def test_union_partial_mutation_is_caught(torchref):
    broken = _with_profile(
        with_overrides(torchref, batch_union=union_in_place_partial), batch_union_in_place=True
    )
    result = assert_caught(broken, "batch.union")
    assert "failed union" in result.message and result.check == "no_partial_merge"


def test_declared_in_place_union_passes(torchref):
    in_place = _with_profile(
        with_overrides(torchref, batch_union=union_in_place_checked), batch_union_in_place=True
    )
    assert certify_one(in_place, "batch.union").status == "pass"


def test_in_place_union_undeclared_is_caught(torchref):
    broken = with_overrides(torchref, batch_union=union_in_place_checked)
    assert assert_caught(broken, "batch.union").check == "no_mutation"


def test_reorder_leaving_non_tensors_is_caught(torchref):
    result = assert_caught(
        with_overrides(torchref, batch_reorder=reorder_tensors_only), "batch.row_ops"
    )
    assert "reorder" in result.message and "uid=" in result.message
    assert result.check == "reorder"


def test_chunk_splitting_meta_is_caught(torchref):
    result = assert_caught(
        with_overrides(torchref, batch_chunk=chunk_splitting_meta), "batch.row_ops"
    )
    assert "global_token_num" in result.message and result.check == "chunk"


def test_pad_from_tail_is_caught(torchref):
    broken = with_overrides(torchref, batch_pad_to_divisor=pad_from_tail)
    assert assert_caught(broken, "batch.pad_divisor").check == "padded_rows"


def test_pad_with_zeros_is_caught(torchref):
    assert_caught(
        with_overrides(torchref, batch_pad_to_divisor=pad_with_zeros), "batch.pad_divisor"
    )


def test_unpad_leaving_a_pad_row_is_caught(torchref):
    broken = with_overrides(torchref, batch_unpad=unpad_one_row_short)
    assert assert_caught(broken, "batch.pad_divisor").check == "unpad"


def test_sample_mean_counting_pad_rows_is_caught(torchref):
    result = assert_caught(
        with_overrides(torchref, batch_sample_mean=sample_mean_with_pad_rows), "batch.pad_divisor"
    )
    assert "real rows" in result.message and result.check == "sample_mean"


def test_balance_duplicating_an_index_is_caught(torchref):
    result = assert_caught(
        with_overrides(torchref, seqlen_partitions=partitions_with_duplicate),
        "batch.seqlen_balance",
    )
    assert "repeated" in result.message and result.check == "partition"


def test_workload_in_int32_is_caught(torchref):
    result = assert_caught(
        with_overrides(torchref, seqlen_workload=workload_int32), "batch.seqlen_balance"
    )
    assert "L=" in result.message and result.check == "workload"


def test_balance_worse_than_input_order_is_caught(torchref):
    result = assert_caught(
        with_overrides(torchref, seqlen_partitions=partitions_in_input_order_reversed),
        "batch.seqlen_balance",
    )
    assert "worse than" in result.message and result.check == "balance"


def union_with_torch_equal(self, a, b):
    """verl's comparison: torch.equal, under which a NaN-holding tensor never equals itself."""
    for key in set(a.tensors.keys()) & set(b.tensors.keys()):
        if not torch.equal(a.tensors[key], b.tensors[key]):
            raise ValueError(f"{key} differs")
    return self.batch_union(a, b)


def reorder_in_place(self, batch, indices):
    """verl's DataProto.reorder: the input container's rows are reordered; returns None."""
    reordered = self.batch_reorder(batch, indices)
    batch.tensors, batch.non_tensors = reordered.tensors, reordered.non_tensors


def test_union_comparing_with_torch_equal_is_caught_on_nan_padding(torchref):
    result = assert_graded(
        with_overrides(torchref, batch_union=union_with_torch_equal), "batch.union"
    )
    assert result.check == "accepts_equal" and result.severity == "hardening"
    assert "padding_nonfinite" in result.features


def test_declared_in_place_reorder_passes(torchref):
    in_place = _with_profile(
        with_overrides(torchref, batch_reorder=reorder_in_place), batch_reorder_in_place=True
    )
    result = certify_one(in_place, "batch.row_ops")
    assert result.status == "pass", result.message


def test_in_place_reorder_undeclared_is_caught(torchref):
    result = assert_caught(
        with_overrides(torchref, batch_reorder=reorder_in_place), "batch.row_ops"
    )
    assert result.check == "no_mutation", result.message

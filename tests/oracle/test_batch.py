"""The batch oracle against hand-computed values (CONTRACT batch.* and verl's measured examples)."""

from __future__ import annotations

import math

import pytest

from rlconform.oracle import batch as oracle
from rlconform.oracle.errors import ContractError


def _batch(n: int, meta: dict | None = None) -> dict:
    return {
        "size": n,
        "tensors": {"x": [float(i) for i in range(n)]},
        "non_tensors": {"uid": [f"u{i}" for i in range(n)]},
        "meta": meta if meta is not None else {"k": 1},
    }


def test_union_merges_disjoint_and_equal_keys():
    a = _batch(2)
    b = {"size": 2, "tensors": {"x": [0.0, 1.0], "y": [5, 6]}, "non_tensors": {}, "meta": {"m": 2}}
    merged = oracle.union(a, b)
    assert merged["tensors"] == {"x": [0.0, 1.0], "y": [5, 6]}
    assert merged["non_tensors"] == {"uid": ["u0", "u1"]}
    assert merged["meta"] == {"k": 1, "m": 2}


def test_union_nan_equals_nan():
    a = {"size": 1, "tensors": {"x": [math.nan]}, "non_tensors": {}, "meta": {}}
    assert math.isnan(oracle.union(a, a)["tensors"]["x"][0])


@pytest.mark.parametrize(
    "b",
    [
        {"size": 2, "tensors": {"x": [0.0, 9.0]}, "non_tensors": {}, "meta": {}},
        {"size": 2, "tensors": {}, "non_tensors": {"uid": ["u0", "other"]}, "meta": {}},
        {"size": 2, "tensors": {}, "non_tensors": {"uid": ["u0", "u1"]}, "meta": {"k": 2}},
        {"size": 3, "tensors": {"z": [1, 2, 3]}, "non_tensors": {}, "meta": {}},
    ],
)
def test_union_conflicts_raise_and_leave_inputs(b):
    a = _batch(2)
    before = repr(a), repr(b)
    with pytest.raises(ContractError, match="batch.union"):
        oracle.union(a, b)
    assert (repr(a), repr(b)) == before


def test_chunk_split_repeat_indices():
    assert oracle.chunk_indices(6, 3) == [[0, 1], [2, 3], [4, 5]]
    with pytest.raises(ContractError):
        oracle.chunk_indices(5, 2)
    assert oracle.chunk_indices(5, 2, uneven="ceil") == [[0, 1, 2], [3, 4]]
    assert oracle.split_indices(5, 2) == [[0, 1], [2, 3], [4]]
    assert oracle.repeat_indices(3, 2, interleave=True) == [0, 0, 1, 1, 2, 2]
    assert oracle.repeat_indices(3, 2, interleave=False) == [0, 1, 2, 0, 1, 2]


def test_reorder_must_be_a_permutation():
    assert oracle.reorder_indices(3, [2, 0, 1]) == [2, 0, 1]
    with pytest.raises(ContractError):
        oracle.reorder_indices(3, [0, 0, 1])


def test_take_rows_keeps_fields_aligned_and_meta_whole():
    batch = _batch(5, meta={"lens": [1, 2, 3, 4, 5]})
    picked = oracle.take_rows(batch, [4, 0, 0])
    assert picked["tensors"]["x"] == [4.0, 0.0, 0.0]
    assert picked["non_tensors"]["uid"] == ["u4", "u0", "u0"]
    assert picked["meta"] == {"lens": [1, 2, 3, 4, 5]}


def test_concat_of_chunks_is_identity():
    batch = _batch(4)
    pieces = [oracle.take_rows(batch, idx) for idx in oracle.chunk_indices(4, 2)]
    assert oracle.concat(pieces) == batch


@pytest.mark.parametrize(
    ("n", "k", "rows", "pad"),
    [
        (3, 8, [0, 1, 2, 0, 1, 2, 0, 1], 5),  # verl: cycles the head
        (5, 4, [0, 1, 2, 3, 4, 0, 1, 2], 3),
        (4, 4, [0, 1, 2, 3], 0),
        (2, 5, [0, 1, 0, 1, 0], 3),
    ],
)
def test_pad_to_divisor_repeats_head(n, k, rows, pad):
    assert oracle.pad_indices(n, k) == (rows, pad)
    assert oracle.unpad_indices(len(rows), pad) == list(range(n))


def test_sample_mean_excludes_pad_rows():
    # rows [1, 2, 6] padded to 8 with [1, 2, 6, 1, 2]: real mean 3, padded mean 21/8.
    assert oracle.sample_mean_excluding_pad([1.0, 2.0, 6.0, 1.0, 2.0, 6.0, 1.0, 2.0], 5) == 3.0


def test_workload_exact_beyond_int32():
    assert oracle.workload(1) == 24577
    assert oracle.workload(100) == 2_467_600
    assert oracle.workload(60_000) == 5_074_560_000  # int32 arithmetic gives 779,592,704
    assert oracle.workload(60_000) > 2**31


def test_partition_checks():
    oracle.check_partitions([[2, 7], [5, 6], [0, 4], [1, 3]], 8, 4, equal_size=True)
    with pytest.raises(ContractError, match="repeated"):
        oracle.check_partitions([[0, 0], [1, 2]], 4, 2, equal_size=False)
    with pytest.raises(ContractError, match="empty"):
        oracle.check_partitions([[0, 1, 2], []], 3, 2, equal_size=False)
    with pytest.raises(ContractError, match="expected 2"):
        oracle.check_partitions([[0], [1, 2, 3]], 4, 2, equal_size=True)


def test_contiguous_reference_and_balanced_partitions():
    assert oracle.contiguous_partitions(5, 2) == [[0, 1, 2], [3, 4]]
    # verl's example lengths, equal size, k = 4: part sums 13, 11, 11, 11 are reachable.
    seqlens = [10, 3, 7, 8, 1, 9, 2, 6]
    parts = oracle.balanced_partitions(seqlens, 4, equal_size=True)
    oracle.check_partitions(parts, 8, 4, equal_size=True)
    sums = sorted(sum(seqlens[i] for i in p) for p in parts)
    assert sums[-1] <= 13
    # Input order already optimal: contiguous parts {2, 2, 2} | {3, 3} weigh 3 w(2) = 147,468
    # and 2 w(3) = 147,474; greedy alone would give w(3) + 2 w(2) = 172,049. Not made worse.
    optimal = [2, 2, 2, 3, 3]
    assert oracle.contiguous_partitions(5, 2) == [[0, 1, 2], [3, 4]]
    parts = oracle.balanced_partitions(optimal, 2, equal_size=False)
    assert oracle.max_partition_workload(optimal, parts) == 147_474

"""Oracle for the CONTRACT area `batch` (standard library only, ragged lists, float64).

A batch is plain data: ``{"tensors": {key: [row, ...]}, "non_tensors": {key: [row, ...]},
"meta": {key: value}}``. A tensor row is a number or a nested list; a non-tensor row is any
Python value; meta belongs to the whole batch. Every row operation is an index map: the
oracle says which input row each output row is, and copies rows by that map.
"""

from __future__ import annotations

import copy
import math
from typing import Any

from rlconform.oracle.errors import ContractError

ROW_SECTIONS = ("tensors", "non_tensors")
SECTIONS = ("tensors", "non_tensors", "meta")

WORKLOAD_LINEAR = 24576


def same_value(a: Any, b: Any) -> bool:
    """Equality of row values and meta values where NaN equals NaN (same content)."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_value(a[k], b[k]) for k in a)
    return a == b


def batch_size(batch: dict[str, Any], clause: str = "batch.row_ops") -> int:
    """The number of rows; every tensor and non-tensor field must have that many."""
    sizes = {
        (section, key): len(rows)
        for section in ROW_SECTIONS
        for key, rows in batch[section].items()
    }
    if len(set(sizes.values())) > 1:
        detail = ", ".join(f"{key}: {n}" for (_, key), n in sizes.items())
        raise ContractError(clause, f"fields disagree in row count ({detail})")
    return next(iter(sizes.values()), batch.get("size", 0))


def take_rows(batch: dict[str, Any], indices: list[int]) -> dict[str, Any]:
    """Output row r is input row ``indices[r]`` in every field; meta is passed whole."""
    out: dict[str, Any] = {"size": len(indices)}
    for section in ROW_SECTIONS:
        out[section] = {
            key: [copy.deepcopy(rows[i]) for i in indices] for key, rows in batch[section].items()
        }
    out["meta"] = copy.deepcopy(batch["meta"])
    return out


def union(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """batch.union: keys of both batches; a key present in both must hold equal content.

    Equal means same rows (tensors, non-tensors) or same value (meta), NaN equal to NaN.
    Any difference, or a different row count, is an error: never a silent overwrite.
    """
    n_a, n_b = batch_size(a, "batch.union"), batch_size(b, "batch.union")
    if n_a != n_b:
        raise ContractError("batch.union", f"batch sizes differ: {n_a} vs {n_b}")
    for section in SECTIONS:
        for key in a[section]:
            if key in b[section] and not same_value(a[section][key], b[section][key]):
                raise ContractError(
                    "batch.union",
                    f"{section} key present on both sides with different values",
                    field=key,
                )
    out: dict[str, Any] = {"size": n_a}
    for section in SECTIONS:
        out[section] = copy.deepcopy({**a[section], **b[section]})
    return out


def chunk_indices(n: int, chunks: int, uneven: str = "error") -> list[list[int]]:
    """batch.row_ops: ``chunks`` consecutive pieces.

    ``uneven`` (profile ``batch_chunk_uneven``): when ``n % chunks != 0``, ``"error"``
    (verl without auto-padding) refuses; ``"ceil"`` cuts pieces of ceil(n / chunks) rows,
    the last one shorter (``torch.chunk``; possibly fewer than ``chunks`` pieces).
    """
    if chunks < 1:
        raise ContractError("batch.row_ops", f"chunk count must be >= 1, got {chunks}")
    if n % chunks == 0:
        size = n // chunks
        return [list(range(c * size, (c + 1) * size)) for c in range(chunks)]
    if uneven == "error":
        raise ContractError("batch.row_ops", f"{n} rows do not split into {chunks} equal chunks")
    if uneven != "ceil":
        raise ContractError("batch.row_ops", f"unknown batch_chunk_uneven {uneven!r}")
    size = -(-n // chunks)
    return [list(range(start, min(start + size, n))) for start in range(0, n, size)]


def split_indices(n: int, size: int) -> list[list[int]]:
    """batch.row_ops: consecutive pieces of ``size`` rows; the last one may be shorter."""
    if size < 1:
        raise ContractError("batch.row_ops", f"split size must be >= 1, got {size}")
    return [list(range(start, min(start + size, n))) for start in range(0, n, size)]


def reorder_indices(n: int, indices: list[int]) -> list[int]:
    """batch.row_ops: a reorder is a permutation of 0..n-1 (nothing lost or duplicated)."""
    if sorted(indices) != list(range(n)):
        raise ContractError("batch.row_ops", f"{indices} is not a permutation of range({n})")
    return list(indices)


def repeat_indices(n: int, times: int, interleave: bool) -> list[int]:
    """batch.row_ops: interleaved ``a a b b`` or tiled ``a b a b``."""
    if interleave:
        return [i for i in range(n) for _ in range(times)]
    return [i for _ in range(times) for i in range(n)]


def concat(batches: list[dict[str, Any]]) -> dict[str, Any]:
    """batch.row_ops: rows one after another; key sets and meta must agree."""
    if not batches:
        raise ContractError("batch.row_ops", "concat of no batches")
    first = batches[0]
    out: dict[str, Any] = {"size": 0, "meta": copy.deepcopy(first["meta"])}
    for section in ROW_SECTIONS:
        out[section] = {key: [] for key in first[section]}
    for part in batches:
        for section in ROW_SECTIONS:
            if part[section].keys() != first[section].keys():
                raise ContractError("batch.row_ops", f"concat parts disagree on {section} keys")
            for key, rows in part[section].items():
                out[section][key].extend(copy.deepcopy(rows))
        if not same_value(part["meta"], first["meta"]):
            raise ContractError("batch.row_ops", "concat parts disagree on meta")
        out["size"] += batch_size(part)
    return out


def pad_indices(n: int, divisor: int) -> tuple[list[int], int]:
    """batch.pad_divisor: append rows from the head (cycling) up to a multiple of ``divisor``.

    pad_size = (divisor - n % divisor) % divisor; padded row n + j is input row j % n.
    """
    if divisor < 1:
        raise ContractError("batch.pad_divisor", f"divisor must be >= 1, got {divisor}")
    pad_size = (divisor - n % divisor) % divisor
    if pad_size and n == 0:
        raise ContractError("batch.pad_divisor", "cannot pad an empty batch")
    return list(range(n)) + [j % n for j in range(pad_size)], pad_size


def unpad_indices(n_padded: int, pad_size: int) -> list[int]:
    """batch.pad_divisor: drop the last ``pad_size`` rows (none when pad_size is 0)."""
    if not 0 <= pad_size <= n_padded:
        raise ContractError("batch.pad_divisor", f"pad_size {pad_size} outside 0..{n_padded}")
    return list(range(n_padded - pad_size))


def sample_mean_excluding_pad(values: list[float], pad_size: int) -> float:
    """batch.pad_divisor: mean of a per-sample statistic over the real rows of a padded batch."""
    real = values[: len(values) - pad_size]
    if not real:
        raise ContractError("batch.pad_divisor", "no real rows to average")
    return math.fsum(float(v) for v in real) / len(real)


def workload(seqlen: int) -> int:
    """batch.seqlen_balance: cost of one sequence, 24576 * L + L^2 (verl), exact integer."""
    if seqlen < 0:
        raise ContractError("batch.seqlen_balance", f"negative sequence length {seqlen}")
    return WORKLOAD_LINEAR * seqlen + seqlen * seqlen


def contiguous_partitions(n: int, k: int) -> list[list[int]]:
    """batch.seqlen_balance: the input order cut into k consecutive parts of near-equal size.

    The first n % k parts hold one row more (equal sizes when k divides n).
    """
    base, extra = divmod(n, k)
    parts, start = [], 0
    for p in range(k):
        size = base + (1 if p < extra else 0)
        parts.append(list(range(start, start + size)))
        start += size
    return parts


def max_partition_workload(seqlens: list[int], partitions: list[list[int]]) -> int:
    """batch.seqlen_balance: the largest summed workload over the partitions."""
    return max(sum(workload(seqlens[i]) for i in part) for part in partitions)


def check_partitions(partitions: list[list[int]], n: int, k: int, equal_size: bool) -> None:
    """batch.seqlen_balance: k non-empty parts covering every index exactly once.

    With ``equal_size`` every part holds n / k indices.
    """
    if len(partitions) != k:
        raise ContractError("batch.seqlen_balance", f"{len(partitions)} partitions, expected {k}")
    seen = sorted(i for part in partitions for i in part)
    if seen != list(range(n)):
        missing = sorted(set(range(n)) - set(seen))
        repeated = sorted({i for i in seen if seen.count(i) > 1})
        raise ContractError(
            "batch.seqlen_balance",
            f"not a permutation of range({n}): missing {missing}, repeated {repeated}, "
            f"unknown {sorted(set(seen) - set(range(n)))}",
        )
    for p, part in enumerate(partitions):
        if not part:
            raise ContractError("batch.seqlen_balance", f"partition {p} is empty")
        if equal_size and len(part) != n // k:
            raise ContractError(
                "batch.seqlen_balance", f"partition {p} has {len(part)} indices, expected {n // k}"
            )


def balanced_partitions(seqlens: list[int], k: int, equal_size: bool) -> list[list[int]]:
    """batch.seqlen_balance: greedy longest-workload-first, never worse than the input order.

    Each sample, heaviest first, goes to the lightest part that still has room (fewest
    members on ties); the contiguous input-order partition is kept when it is better.
    """
    n = len(seqlens)
    if k < 1 or n < k:
        raise ContractError(
            "batch.seqlen_balance", f"cannot make {k} non-empty parts of {n} samples"
        )
    if equal_size and n % k:
        raise ContractError(
            "batch.seqlen_balance", f"{n} samples do not split into {k} equal parts"
        )
    capacity = n // k if equal_size else n
    parts: list[list[int]] = [[] for _ in range(k)]
    loads = [0] * k
    for i in sorted(range(n), key=lambda i: (-workload(seqlens[i]), i)):
        open_parts = [p for p in range(k) if len(parts[p]) < capacity]
        target = min(open_parts, key=lambda p: (loads[p], len(parts[p]), p))
        parts[target].append(i)
        loads[target] += workload(seqlens[i])
    contiguous = contiguous_partitions(n, k)
    if max_partition_workload(seqlens, contiguous) < max(loads):
        return contiguous
    return [sorted(part) for part in parts]

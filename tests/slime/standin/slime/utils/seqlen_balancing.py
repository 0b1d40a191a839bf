"""Stand-in ``get_seqlen_balanced_partitions``: the contract's balancing (the oracle's)."""

from rlconform.oracle import batch as oracle


def get_seqlen_balanced_partitions(seqlen_list, k_partitions, equal_size):
    """Balances the given workloads: heaviest first onto the lightest open part, or the
    input order's contiguous parts when those are no worse."""
    n = len(seqlen_list)
    capacity = n // k_partitions if equal_size else n
    parts = [[] for _ in range(k_partitions)]
    loads = [0] * k_partitions
    for i in sorted(range(n), key=lambda i: (-seqlen_list[i], i)):
        open_parts = [p for p in range(k_partitions) if len(parts[p]) < capacity]
        p = min(open_parts, key=lambda p: (loads[p], len(parts[p]), p))
        parts[p].append(i)
        loads[p] += seqlen_list[i]
    contiguous = oracle.contiguous_partitions(n, k_partitions)

    def worst(partition):
        return max(sum(seqlen_list[i] for i in part) for part in partition)

    if not all(parts) or worst(contiguous) <= worst(parts):
        return contiguous
    return [sorted(part) for part in parts]

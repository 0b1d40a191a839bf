"""Oracle for the CONTRACT area `agg`: loss aggregation (standard library only, float64).

A shard (one micro-batch on one data-parallel rank) is given as ragged per-sample rows of
per-token losses and 0/1 loss masks. Only action tokens (mask 1) are read: whatever sits
at a mask-0 position (NaN, inf, garbage) is never touched. The global denominators
(``num_tokens``, ``num_sequences``) count the whole mini-batch over every rank and
micro-batch; left out, they default to this shard's own counts (the single-call form).
``dp_size`` multiplies the value so that DDP's gradient averaging turns into a sum.
A denominator of 0 means there is no action token at all: the value is 0, not 0/0.
"""

from __future__ import annotations

import math

from rlconform.oracle.errors import ContractError, require_same_length

MODES = (
    "token-mean",
    "token-sum",
    "seq-mean-token-sum",
    "seq-mean-token-mean",
    "seq-mean-token-sum-norm",
)

_CLAUSE_OF_MODE = {
    "token-mean": "agg.token_mean",
    "token-sum": "agg.token_sum",
    "seq-mean-token-sum": "agg.seq_mean_token_sum",
    "seq-mean-token-mean": "agg.seq_mean_token_mean",
    "seq-mean-token-sum-norm": "agg.seq_mean_token_sum_norm",
}


def action_losses(
    losses: list[list[float]], masks: list[list[int]], clause: str
) -> list[list[float]]:
    """Per sample, the losses at action tokens only (mask 1), after checking the shapes."""
    if len(losses) != len(masks):
        raise ContractError(clause, f"{len(losses)} loss rows but {len(masks)} mask rows")
    check_masks(masks, clause)
    rows = []
    for i, (loss_row, mask_row) in enumerate(zip(losses, masks)):
        require_same_length(clause, i, loss=loss_row, loss_mask=mask_row)
        rows.append([float(x) for x, m in zip(loss_row, mask_row) if m == 1])
    return rows


def check_masks(masks: list[list[int]], clause: str) -> None:
    """Raise ContractError unless every loss-mask value is 0 or 1 (the uid is the row index)."""
    for i, mask_row in enumerate(masks):
        if any(m not in (0, 1) for m in mask_row):
            raise ContractError(clause, "loss mask values must be 0 or 1", uid=i, field="loss_mask")


def action_token_count(masks: list[list[int]]) -> int:
    """Number of action tokens (mask 1) in the shard."""
    return sum(1 for row in masks for m in row if m == 1)


def sequence_count(masks: list[list[int]]) -> int:
    """Number of sequences with at least one action token (the seq-mean denominator)."""
    return sum(1 for row in masks if any(m == 1 for m in row))


def _check_dp_size(clause: str, dp_size: int) -> None:
    if isinstance(dp_size, bool) or not isinstance(dp_size, int) or dp_size < 1:
        raise ContractError(clause, f"dp_size must be an integer >= 1, got {dp_size!r}")


def _global_count(clause: str, name: str, given: int | None, local: int, dp_size: int) -> int:
    """The global denominator: ``given`` (whole mini-batch) or, on a single shard, ``local``."""
    _check_dp_size(clause, dp_size)
    if given is None:
        if dp_size > 1:
            raise ContractError(clause, f"dp_size {dp_size} > 1 needs the global {name}")
        return local
    if given < local:
        raise ContractError(
            clause, f"global {name} {given} is smaller than this shard's own count {local}"
        )
    return given


def _ratio(numerator: float, denominator: float) -> float:
    return 0.0 if denominator == 0 else numerator / denominator


def token_mean(
    losses: list[list[float]],
    masks: list[list[int]],
    *,
    dp_size: int = 1,
    num_tokens: int | None = None,
) -> float:
    """agg.token_mean: dp_size * sum(l * m) / N, N = action tokens of the whole mini-batch."""
    rows = action_losses(losses, masks, "agg.token_mean")
    n = _global_count(
        "agg.token_mean", "num_tokens", num_tokens, action_token_count(masks), dp_size
    )
    return dp_size * _ratio(math.fsum(x for row in rows for x in row), n)


def token_sum(losses: list[list[float]], masks: list[list[int]], *, dp_size: int = 1) -> float:
    """agg.token_sum: dp_size * sum(l * m)."""
    rows = action_losses(losses, masks, "agg.token_sum")
    _check_dp_size("agg.token_sum", dp_size)
    return dp_size * math.fsum(x for row in rows for x in row)


def seq_mean_token_sum(
    losses: list[list[float]],
    masks: list[list[int]],
    *,
    dp_size: int = 1,
    num_sequences: int | None = None,
) -> float:
    """agg.seq_mean_token_sum: dp_size * sum_i (sum_t l m) / S, S = sequences with an action token."""
    rows = action_losses(losses, masks, "agg.seq_mean_token_sum")
    s = _global_count(
        "agg.seq_mean_token_sum", "num_sequences", num_sequences, sequence_count(masks), dp_size
    )
    return dp_size * _ratio(math.fsum(math.fsum(row) for row in rows), s)


def seq_mean_token_mean(
    losses: list[list[float]],
    masks: list[list[int]],
    *,
    dp_size: int = 1,
    num_sequences: int | None = None,
) -> float:
    """agg.seq_mean_token_mean: dp_size * sum_i (sum_t l m / sum_t m) / S (empty rows add 0)."""
    rows = action_losses(losses, masks, "agg.seq_mean_token_mean")
    s = _global_count(
        "agg.seq_mean_token_mean", "num_sequences", num_sequences, sequence_count(masks), dp_size
    )
    row_means = [math.fsum(row) / len(row) for row in rows if row]
    return dp_size * _ratio(math.fsum(row_means), s)


def seq_mean_token_sum_norm(
    losses: list[list[float]],
    masks: list[list[int]],
    *,
    norm_length: float,
    dp_size: int = 1,
    num_sequences: int | None = None,
) -> float:
    """agg.seq_mean_token_sum_norm: dp_size * sum(l m) / (S * C), C a constant length (Dr. GRPO)."""
    clause = "agg.seq_mean_token_sum_norm"
    rows = action_losses(losses, masks, clause)
    _check_norm_length(norm_length)
    s = _global_count(clause, "num_sequences", num_sequences, sequence_count(masks), dp_size)
    return dp_size * _ratio(math.fsum(x for row in rows for x in row), s * norm_length)


def _check_norm_length(norm_length: float | None) -> None:
    if norm_length is None or not norm_length > 0 or math.isinf(norm_length):
        raise ContractError(
            "agg.seq_mean_token_sum_norm",
            f"norm_length must be a finite constant > 0, got {norm_length!r}",
        )


def aggregate(
    losses: list[list[float]],
    masks: list[list[int]],
    mode: str,
    *,
    dp_size: int = 1,
    num_tokens: int | None = None,
    num_sequences: int | None = None,
    norm_length: float | None = None,
) -> float:
    """The aggregation named by ``mode`` (verl names); arguments a mode does not use are ignored."""
    if mode == "token-mean":
        return token_mean(losses, masks, dp_size=dp_size, num_tokens=num_tokens)
    if mode == "token-sum":
        return token_sum(losses, masks, dp_size=dp_size)
    if mode == "seq-mean-token-sum":
        return seq_mean_token_sum(losses, masks, dp_size=dp_size, num_sequences=num_sequences)
    if mode == "seq-mean-token-mean":
        return seq_mean_token_mean(losses, masks, dp_size=dp_size, num_sequences=num_sequences)
    if mode == "seq-mean-token-sum-norm":
        return seq_mean_token_sum_norm(
            losses, masks, norm_length=norm_length, dp_size=dp_size, num_sequences=num_sequences
        )
    raise ContractError(
        "agg", f"unknown aggregation mode {mode!r}; expected one of {', '.join(MODES)}"
    )


def aggregate_gradient(
    masks: list[list[int]],
    mode: str,
    *,
    dp_size: int = 1,
    num_tokens: int | None = None,
    num_sequences: int | None = None,
    norm_length: float | None = None,
) -> list[list[float]]:
    """d aggregate / d l[i][t]: the weight of each token (the value is linear in the losses).

    0 at every mask-0 position; at an action token of sample i (n_i action tokens):
    token-mean dp/N; token-sum dp; seq-mean-token-sum dp/S; seq-mean-token-mean dp/(n_i S);
    seq-mean-token-sum-norm dp/(S C). A zero denominator gives weight 0 (no action token).
    """
    if mode not in MODES:
        raise ContractError(
            "agg", f"unknown aggregation mode {mode!r}; expected one of {', '.join(MODES)}"
        )
    clause = _CLAUSE_OF_MODE[mode]
    check_masks(masks, clause)
    if mode == "token-mean":
        n = _global_count(clause, "num_tokens", num_tokens, action_token_count(masks), dp_size)
        row_weight = [_ratio(dp_size, n) for _ in masks]
    elif mode == "token-sum":
        _check_dp_size(clause, dp_size)
        row_weight = [float(dp_size) for _ in masks]
    else:
        s = _global_count(clause, "num_sequences", num_sequences, sequence_count(masks), dp_size)
        if mode == "seq-mean-token-sum":
            row_weight = [_ratio(dp_size, s) for _ in masks]
        elif mode == "seq-mean-token-mean":
            row_weight = [_ratio(dp_size, s * sum(row)) for row in masks]
        else:
            _check_norm_length(norm_length)
            row_weight = [_ratio(dp_size, s * norm_length) for _ in masks]
    return [[w if m == 1 else 0.0 for m in row] for w, row in zip(row_weight, masks)]

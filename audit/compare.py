"""Recorded (B, R) tensors against the oracle's expectation, one Violation per bad sample.

Same rule as ``conformance.compare`` (CONTRACT §4): an element passes when
``|expected - recorded| <= atol + rtol |expected| + k eps scale`` (``scale`` the clause's
conditioning term, in the recorded tensor's dtype), or when both are the same NaN/inf;
exact comparisons (placement, zeros off the action tokens) allow nothing. Vectorised: the
oracle's ragged rows are padded into float64 tensors first, so a million tokens compare in
milliseconds and only the violating samples become Python objects.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from rlconform.audit.batch import AuditBatch
from rlconform.audit.results import Violation
from rlconform.conformance.compare import Tolerance


def padded(batch: AuditBatch, rows: Sequence[Sequence[float]], start: int = 0) -> torch.Tensor:
    """Ragged rows of samples ``start:start + len(rows)`` as a (len, R) float64 tensor, 0 after."""
    out = torch.zeros((len(rows), batch.width), dtype=torch.float64)
    for i, row in enumerate(rows):
        if len(row):
            out[i, : len(row)] = torch.tensor(row, dtype=torch.float64)
    return out


def _same(expected: torch.Tensor, recorded: torch.Tensor) -> torch.Tensor:
    both_nan = torch.isnan(expected) & torch.isnan(recorded)
    same_inf = torch.isinf(expected) & (expected == recorded)
    return both_nan | same_inf


def _violations(
    batch: AuditBatch,
    clause: str,
    check: str,
    what: str,
    expected: torch.Tensor,
    recorded: torch.Tensor,
    bad: torch.Tensor,
    positions: torch.Tensor,
    badness: torch.Tensor,
    allowed: torch.Tensor | None,
    features: Sequence[frozenset[str]],
    rows: Sequence[int],
    note: str = "",
) -> list[Violation]:
    out = []
    counts = bad.sum(dim=1).tolist()
    totals = positions.sum(dim=1).tolist()
    worst = torch.where(bad, badness, torch.full_like(badness, -1.0)).argmax(dim=1).tolist()
    for i, count in enumerate(counts):
        if not count:
            continue
        t = worst[i]
        row = rows[i]
        out.append(
            Violation(
                clause=clause,
                check=check,
                row=row,
                sample=batch.name(row),
                what=what,
                token=t,
                expected=float(expected[i, t]),
                recorded=float(recorded[i, t]),
                allowed=None if allowed is None else float(allowed[i, t]),
                mismatched=int(count),
                positions=int(totals[i]),
                features=features[row],
                note=note,
            )
        )
    return out


def close(
    batch: AuditBatch,
    clause: str,
    check: str,
    what: str,
    expected: torch.Tensor,
    recorded: torch.Tensor,
    positions: torch.Tensor,
    *,
    tolerance: Tolerance,
    scale: torch.Tensor | None,
    k: float,
    features: Sequence[frozenset[str]],
    rows: Sequence[int] | None = None,
) -> list[Violation]:
    """Float comparison at ``positions`` with the clause's conditioning ``scale``."""
    rows = list(range(expected.shape[0])) if rows is None else list(rows)
    recorded = recorded.to(torch.float64)
    diff = (expected - recorded).abs()
    allowed = tolerance.atol + tolerance.rtol * expected.abs()
    if scale is not None:
        allowed = allowed + k * tolerance.eps * scale.abs()
    ok = _same(expected, recorded) | (diff <= allowed)
    bad = positions & ~ok
    badness = torch.where(torch.isnan(diff), torch.full_like(diff, float("inf")), diff / allowed)
    return _violations(
        batch,
        clause,
        check,
        what,
        expected,
        recorded,
        bad,
        positions,
        badness,
        allowed,
        features,
        rows,
    )


def exact(
    batch: AuditBatch,
    clause: str,
    check: str,
    what: str,
    expected: torch.Tensor,
    recorded: torch.Tensor,
    positions: torch.Tensor,
    *,
    features: Sequence[frozenset[str]],
    rows: Sequence[int] | None = None,
    note: str = "",
) -> list[Violation]:
    """Exact comparison at ``positions`` (placement, zeros off the action tokens)."""
    rows = list(range(expected.shape[0])) if rows is None else list(rows)
    recorded = recorded.to(torch.float64)
    bad = positions & ~((expected == recorded) | _same(expected, recorded))
    badness = (expected - recorded).abs().nan_to_num(nan=float("inf"))
    return _violations(
        batch,
        clause,
        check,
        what,
        expected,
        recorded,
        bad,
        positions,
        badness,
        None,
        features,
        rows,
        note,
    )

"""Audit mode (CONTRACT §5): check a batch recorded from a real training step with the oracle.

``record(batch, path, config=...)`` writes a verl ``DataProto``, a ``TensorDict`` or a plain
dict in a safe container; ``audit(path_or_batch, profile=...)`` reads it back without
unpickling anything, recomputes every clause the recorded keys allow with the oracle and
returns an ``AuditReport`` (``rlconform audit PATH`` on the command line).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch

from rlconform.audit.batch import build
from rlconform.audit.clauses import AUDITS
from rlconform.audit.config import (
    PROFILES,
    check_keys,
    get_profile,
    parse_config,
    read_config_file,
)
from rlconform.audit.load import AuditInputError, Recorded, from_object, load
from rlconform.audit.record import record
from rlconform.audit.results import AuditReport, ClauseAudit, Violation
from rlconform.oracle.errors import ContractError

__all__ = [
    "PROFILES",
    "AuditInputError",
    "AuditReport",
    "ClauseAudit",
    "Violation",
    "audit",
    "record",
]


def _recorded(source: Any, allow_unsafe_pickle: bool) -> Recorded:
    if isinstance(source, (str, Path)):
        return load(source, allow_unsafe_pickle=allow_unsafe_pickle)
    return from_object(Path("<in memory>"), "in memory", source)


def audit(
    source: str | Path | Any,
    *,
    profile: str = "torchref",
    config: Mapping[str, Any] | str | Path | None = None,
    fail_on: str = "hardening",
    allow_unsafe_pickle: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> AuditReport:
    """Audit a recorded batch: a path (see ``rlconform.audit.load``) or an in-memory batch.

    ``config`` (a mapping or a JSON/TOML/YAML file) is merged over the recorded ``config``.
    ``progress(done, total)`` is called as samples are checked. Raises ``AuditInputError``
    (one line) for an unreadable or unsupported input. Runs torch on one thread (restored
    after): the work is interpreter-bound, and intra-op threads on a busy machine only
    contend.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _audit(source, profile, config, fail_on, allow_unsafe_pickle, progress)
    finally:
        torch.set_num_threads(threads)


def _audit(
    source: Any,
    profile: str,
    config: Mapping[str, Any] | str | Path | None,
    fail_on: str,
    allow_unsafe_pickle: bool,
    progress: Callable[[int, int], None] | None,
) -> AuditReport:
    started = time.perf_counter()
    chosen = get_profile(profile)
    recorded = _recorded(source, allow_unsafe_pickle)
    raw = dict(recorded.config)
    if config is not None:
        given = config if isinstance(config, Mapping) else read_config_file(config)
        check_keys(given, "config" if isinstance(config, Mapping) else f"--config {config}")
        raw.update(given)
    parsed, notes = parse_config(raw)
    notes = [*recorded.notes, *notes]
    batch = build(recorded, parsed, notes)
    total = len(AUDITS) * batch.size
    done = 0
    clauses: list[ClauseAudit] = []
    for step, run in enumerate(AUDITS):

        def advance(n: int, step: int = step) -> None:
            nonlocal done
            done = min(done + n, (step + 1) * batch.size)
            if progress is not None:
                progress(done, total)

        try:
            clauses.extend(run(batch, chosen, advance))
        except ContractError as reason:
            clauses.append(ClauseAudit(run.__name__.removeprefix("audit_"), "error", str(reason)))
        except (ValueError, TypeError, RuntimeError, IndexError, KeyError) as exc:
            # an input this audit does not foresee: that area is unchecked, the rest goes on
            first = (str(exc).splitlines() or [""])[0]
            clauses.append(
                ClauseAudit(
                    run.__name__.removeprefix("audit_"),
                    "error",
                    f"could not be checked: {type(exc).__name__}: {first}",
                )
            )
        done = (step + 1) * batch.size
        if progress is not None:
            progress(done, total)
    keys = sorted(batch.fields) + sorted(batch.scalars) + sorted(batch.per_sample)
    keys += ["uid"] if batch.groups is not None else []
    keys += ["sample_id"] if batch.sample_ids is not None else []
    return AuditReport(
        source=recorded.source,
        container=recorded.container,
        profile=chosen.name,
        samples=batch.size,
        tokens=batch.tokens,
        width=batch.width,
        config=parsed.summary(),
        keys=keys,
        ignored=batch.ignored,
        notes=batch.notes,
        clauses=clauses,
        seconds=time.perf_counter() - started,
        fail_on=fail_on,
    )

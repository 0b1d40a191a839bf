"""Replay one counterexample printed in a report: ``replay(clause_id, target, case=...)``."""

from __future__ import annotations

from typing import Any

from rlconform.adapters.base import Target
from rlconform.adapters.registry import load_target
from rlconform.conformance.context import CheckContext
from rlconform.conformance.registry import get


def replay(
    clause_id: str,
    target: str | Target,
    case: Any,
    *,
    device: str = "cpu",
    framework_path: str | None = None,
) -> None:
    """Run the clause's check once on ``case``; raises the same mismatch as in the report.
    ``target`` is the spec ``certify`` was given (a name or ``module:attribute``), with the
    same ``framework_path``."""
    if isinstance(target, str):
        resolved = load_target(target, device=device, framework_path=framework_path)
    else:
        resolved = target
    get(clause_id).check(CheckContext(target=resolved, device=device), case)


def report_case(report: dict[str, Any], clause_id: str) -> tuple[Any, str]:
    """The minimal case a JSON report holds for ``clause_id`` (its counterexample, else the
    first observed deviation entry's case) and where it came from; SetupError otherwise."""
    from rlconform.adapters.base import SetupError
    from rlconform.conformance.literal import from_jsonable

    clauses = {c.get("id"): c for c in report.get("clauses", [])}
    clause = clauses.get(clause_id)
    if clause is None:
        raise SetupError(f"the report has no clause {clause_id!r} (it ran {len(clauses)} clauses)")
    counter = clause.get("counterexample") or {}
    if counter.get("case") is not None:
        return from_jsonable(counter["case"]), "counterexample"
    for entry in clause.get("deviations") or []:
        if entry.get("observed") and entry.get("case") is not None:
            return from_jsonable(entry["case"]), "declared deviation: " + str(
                entry.get("rationale", "")
            )[:80]
    raise SetupError(
        f"{clause_id} is {clause.get('status')!r} in the report, with no minimal case to replay"
    )


def replay_report(path: str, clause_id: str, device: str = "cpu") -> tuple[str, str | None]:
    """``rlconform replay REPORT.json CLAUSE``: (the call that replays it, the mismatch it
    raises now, or None when the case passes now)."""
    import json

    from rlconform.adapters.base import SetupError
    from rlconform.conformance.errors import ClauseMismatch, TargetError
    from rlconform.conformance.runner import reproducer

    try:
        with open(path, encoding="utf-8") as handle:
            report = json.load(handle)
    except (OSError, ValueError) as exc:
        raise SetupError(f"cannot read the report {path!r}: {exc}") from None
    info = report.get("target") or {}
    spec = info.get("spec") or info.get("name")
    if not spec:
        raise SetupError(f"{path}: the report names no target")
    case, _ = report_case(report, clause_id)
    framework_path = info.get("spec_framework_path")
    call = reproducer(clause_id, spec, case)
    if framework_path:
        call = call[:-1] + f", framework_path={framework_path!r})"
    try:
        replay(clause_id, spec, case, device=device, framework_path=framework_path)
    except (ClauseMismatch, TargetError) as failure:
        return call, getattr(failure, "message", None) or str(failure)
    return call, None

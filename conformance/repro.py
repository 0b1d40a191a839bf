"""Replay one counterexample printed in a report: ``replay(clause_id, target, case=...)``."""

from __future__ import annotations

from typing import Any

from rlconform.adapters.base import Target
from rlconform.adapters.registry import load_target
from rlconform.conformance.context import CheckContext
from rlconform.conformance.registry import get


def replay(clause_id: str, target: str | Target, case: Any, *, device: str = "cpu") -> None:
    """Run the clause's check once on ``case``; raises the same mismatch as in the report."""
    resolved = load_target(target, device=device) if isinstance(target, str) else target
    get(clause_id).check(CheckContext(target=resolved, device=device), case)

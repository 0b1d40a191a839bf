"""The error the oracle raises on misaligned or malformed input."""

from __future__ import annotations

from typing import Any


class ContractError(ValueError):
    """Bad input; the message names the clause, the sample uid and the field."""

    def __init__(self, clause: str, message: str, uid: Any = None, field: str | None = None):
        where = []
        if uid is not None:
            where.append(f"sample uid={uid!r}")
        if field is not None:
            where.append(f"field {field!r}")
        prefix = f"[{clause}] " + (", ".join(where) + ": " if where else "")
        super().__init__(prefix + message)
        self.clause = clause
        self.uid = uid
        self.field = field


def require_same_length(clause: str, uid: Any, **fields: list) -> int:
    """Raise ContractError unless every named per-token list has the same length."""
    lengths = {name: len(values) for name, values in fields.items()}
    if len(set(lengths.values())) > 1:
        detail = ", ".join(f"len({name})={n}" for name, n in lengths.items())
        raise ContractError(clause, f"per-token fields disagree in length ({detail})", uid=uid)
    return next(iter(lengths.values()), 0)

"""Exceptions the engine uses to tell a contract failure from an implementation crash."""

from __future__ import annotations

import traceback
from typing import Any

from rlconform.oracle.errors import ContractError

__all__ = ["ClauseMismatch", "ClauseTimeout", "ContractError", "TargetError"]


class ClauseMismatch(AssertionError):
    """The implementation's output differs from the contract (status ``fail``).

    ``detail`` holds the worst mismatch (sample uid, token index, expected, actual) so that
    reports can show it; ``check`` is the name of the assertion that failed (set by the
    enclosing ``ctx.check(name)`` block when not given); the runner attaches the (shrunk)
    case as ``case``.
    """

    def __init__(
        self, message: str, detail: dict[str, Any] | None = None, check: str | None = None
    ):
        super().__init__(message)
        self.message = message
        self.detail = dict(detail or {})
        self.check = check
        self.case: Any = None


class TargetError(Exception):
    """The implementation raised while an operation ran (status ``error``, check ``runs``)."""

    check = "runs"

    def __init__(self, op: str, exc: BaseException):
        summary = f"{op} raised {type(exc).__name__}: {exc}".splitlines()[0]
        super().__init__(summary)
        self.op = op
        self.original = exc
        self.summary = summary
        self.message = summary
        self.traceback = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        self.case: Any = None


class ClauseTimeout(Exception):
    """A clause ran past its time limit (status ``error``)."""

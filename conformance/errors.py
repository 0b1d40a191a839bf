"""Exceptions the engine uses to tell a contract failure from an implementation crash."""

from __future__ import annotations

import traceback
from pathlib import Path
from typing import Any

from rlconform.oracle.errors import ContractError

__all__ = [
    "BindingDefect",
    "ClauseMismatch",
    "ClauseTimeout",
    "ContractError",
    "TargetError",
    "binding_defect",
]


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
        # step.update: the loss differs but every gradient check passed (CONTRACT §0b)
        self.gradient_agrees = False
        # step.update: the loss is NaN or inf where the contract's is finite (a value that by
        # itself says nothing about the gradient, unlike a finite loss off by a factor)
        self.nonfinite_loss = False
        # ... and every gradient the step back-propagated is finite (CONTRACT §0b)
        self.gradient_finite = False


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


class BindingDefect(Exception):
    """An operation raised because rlconform's own binding is broken, not the implementation
    (status ``error``, ungraded, never a finding of the framework and never excusable by a
    baseline): a module the binding imports is missing, or a shipped adapter's own code
    looked up a name or attribute that does not exist (a framework API it was not written
    for)."""

    def __init__(self, op: str, exc: BaseException, why: str):
        summary = f"{op}: {why}: {type(exc).__name__}: {exc}".splitlines()[0]
        super().__init__(summary)
        self.op = op
        self.original = exc
        self.summary = summary


_ADAPTERS = Path(__file__).resolve().parent.parent / "adapters"


def _raised_in_adapter(exc: BaseException) -> bool:
    """The innermost frame of ``exc``'s traceback is in a shipped adapter's module."""
    tb = exc.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    try:
        return Path(tb.tb_frame.f_code.co_filename).resolve().is_relative_to(_ADAPTERS)
    except (OSError, ValueError):
        return False


def binding_defect(exc: BaseException) -> str | None:
    """Why ``exc``, raised by an operation, is a defect of the binding rather than a break of
    the implementation; None when it is the implementation's own failure."""
    if isinstance(exc, ImportError):
        return "a module the binding imports is missing (install the target's extra)"
    if isinstance(exc, AttributeError | NameError) and _raised_in_adapter(exc):
        return "the adapter's own code failed (a framework API it does not know)"
    return None

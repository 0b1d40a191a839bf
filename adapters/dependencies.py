"""A framework module that cannot be imported because a third-party package is missing is a
setup problem (exit 2 naming the package and the extra that brings it), never a clause
``error`` or a silently skipped operation. A missing module of the framework itself (an
older or trimmed fork) still only removes the operations that need it."""

from __future__ import annotations

from rlconform.adapters.base import SetupError


def missing_package(exc: BaseException, own: tuple[str, ...]) -> str | None:
    """The top-level package ``exc`` says is missing, when it is not one of ``own`` (the
    framework's own top-level packages); else None."""
    if not isinstance(exc, ModuleNotFoundError) or not exc.name:
        return None
    top = exc.name.split(".")[0]
    return None if top in own else top


def check_import_error(
    framework: str, module: str, exc: BaseException, own: tuple[str, ...], extra: str
) -> None:
    """Raise SetupError when ``exc`` (raised importing ``module``) is a missing third-party
    package; return otherwise (the caller records the error and skips what needs it)."""
    package = missing_package(exc, own)
    if package is not None:
        raise SetupError(
            f"{framework}: importing {module} needs the package {package!r}, which is not "
            f"installed: pip install 'rlconform[{extra}]' (or pip install {package})"
        ) from exc

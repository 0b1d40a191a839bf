"""Target lookup: a registered adapter name or ``module:attribute``."""

from __future__ import annotations

import importlib
from typing import Any

from rlconform.adapters.base import SetupError, Target

BUILTIN_TARGETS: dict[str, str] = {
    "oracle": "rlconform.adapters.oracle_target:OracleTarget",
    "torchref": "rlconform.adapters.torchref:TorchRef",
    "roll": "rlconform.adapters.roll:load",
    "verl": "rlconform.adapters.verl:load",
    "slime": "rlconform.adapters.slime:load",
    "trl": "rlconform.adapters.trl:load",
    "trl-liger": "rlconform.adapters.trl_liger:load",
    "openrlhf": "rlconform.adapters.openrlhf:load",
    "areal": "rlconform.adapters.areal:load",
    "skyrl": "rlconform.adapters.skyrl:load",
    "unsloth": "rlconform.adapters.unsloth:load",
}


def check_spec(spec: str) -> str:
    """The ``module:attribute`` path of ``spec``; SetupError for a name that is neither a
    registered adapter nor ``module:attribute`` (nothing is imported)."""
    path = BUILTIN_TARGETS.get(spec, spec)
    if ":" not in path:
        import difflib

        known = ", ".join(sorted(BUILTIN_TARGETS))
        close = difflib.get_close_matches(spec, sorted(BUILTIN_TARGETS), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise SetupError(f"unknown target {spec!r}{hint}: use one of {known} or module:attribute")
    return path


def load_target(spec: str, **options: Any) -> Target:
    """Build the target named by ``spec``; raise SetupError with what to do on failure.

    ``spec`` is a registered name (``oracle``, ``torchref``, ...) or ``module:attribute``
    where the attribute is a Target instance, a Target subclass, or a factory returning one.
    Options (``device``, ``framework_path``, ...) go to classes and factories that accept them.
    """
    path = check_spec(spec)
    module_name, _, attribute = path.partition(":")
    if spec not in BUILTIN_TARGETS:
        _cwd_importable()
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise SetupError(f"cannot import {module_name!r} for target {spec!r}: {exc}") from exc
    try:
        obj = getattr(module, attribute)
    except AttributeError as exc:
        raise SetupError(f"module {module_name!r} has no attribute {attribute!r}") from exc
    if isinstance(obj, Target):
        return _remember(obj, spec, options)
    if callable(obj):
        target = _call_with_supported(obj, options)
        if not isinstance(target, Target):
            raise SetupError(f"{path} returned {type(target).__name__}, not an rlconform Target")
        return _remember(target, spec, options)
    raise SetupError(f"{path} is neither a Target nor a factory of one")


def _cwd_importable() -> None:
    """A ``module:attribute`` target is importable from the current directory, as a test
    module is for pytest (the console script does not put it on ``sys.path``)."""
    import os
    import sys

    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)


def _remember(target: Target, spec: str, options: dict[str, Any]) -> Target:
    """Keep how the target was loaded (the spec and the framework path the user passed), so
    that a report's reproducer loads the same target again."""
    target.__dict__.setdefault("load_spec", spec)
    if options.get("framework_path"):
        target.__dict__.setdefault("load_framework_path", str(options["framework_path"]))
    return target


def _call_with_supported(factory: Any, options: dict[str, Any]) -> Any:
    import inspect

    try:
        params = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        return factory()
    accepts_all = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    kwargs = {k: v for k, v in options.items() if v is not None and (accepts_all or k in params)}
    return factory(**kwargs)

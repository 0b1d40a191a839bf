"""Importing verl's modules on a CPU machine without its serving extras.

``verl.trainer.ppo.ray_trainer`` (home of ``compute_response_mask``, ``apply_kl_penalty`` and
``compute_advantage``) imports the rollout router and the reward-loop HTTP router at module
level. Those pull in ``cachetools``, ``fastapi`` and ``uvicorn``, which belong to verl's
serving extra and which none of the postprocess functions bound here ever touches. The v1
trainer's ``v1/utils.py`` (home of ``compute_advantage_for_multi_trajectories``) imports the
replay buffer, which imports ``transfer_queue`` (the TransferQueue client: storage and
transport of samples between workers, never called by that function). When (and only when)
one of exactly those four is not installed, a placeholder module stands in for it while verl
is imported; the placeholders are removed again right after, so nothing else in the process
can mistake them for the real packages.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from collections.abc import Iterator
from typing import Any

# The only modules ever stubbed: imported at module level by verl's trainer, never called
# by the postprocess functions (router classes, HTTP app and server, TransferQueue client).
OPTIONAL_SERVICES = ("cachetools", "fastapi", "uvicorn", "transfer_queue")


class _Unavailable:
    """Stands in for any name imported from a missing optional service; unusable."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError(
            "this verl feature needs its serving extra (cachetools/fastapi/uvicorn/"
            "transfer_queue), which rlconform does not install"
        )

    def __class_getitem__(cls, item: Any) -> type:
        return cls


def _placeholder_attribute(attr: str) -> type:
    """A name imported from the placeholder is ``_Unavailable``; a dunder the module does
    not set (``__file__``, ``__version__``) is missing, as on a real module: code that
    walks ``sys.modules`` while verl imports (``inspect.getmodule``, which torch's
    ``library.register_fake`` calls, e.g. from peft 0.22's import) must not take the
    placeholder for a string."""
    if attr.startswith("__") and attr.endswith("__"):
        raise AttributeError(attr)
    return _Unavailable


def _placeholder_module(name: str) -> types.ModuleType:
    module = types.ModuleType(name, "rlconform placeholder for a missing optional verl service")
    module.__path__ = []  # a package, so `from fastapi.responses import ...` resolves
    module.__getattr__ = _placeholder_attribute  # type: ignore[method-assign]
    return module


class _PlaceholderFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, roots: tuple[str, ...]):
        self.roots = roots

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname.split(".", 1)[0] in self.roots:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec: Any) -> types.ModuleType:
        return _placeholder_module(spec.name)

    def exec_module(self, module: types.ModuleType) -> None:
        return None


def _installed(name: str) -> bool:
    if name in sys.modules:
        return sys.modules[name] is not None
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a module in sys.modules without a __spec__
        return False


def missing_services() -> tuple[str, ...]:
    """The optional services that are not installed (only these are ever stubbed)."""
    return tuple(name for name in OPTIONAL_SERVICES if not _installed(name))


def _other_adapters_shims() -> dict[str, types.ModuleType]:
    """Optional services another adapter shimmed in this process (ROLL's bare
    ``transfer_queue``): set aside while verl imports, so verl gets its own placeholder."""
    return {
        name: sys.modules[name]
        for name in OPTIONAL_SERVICES
        if getattr(sys.modules.get(name), "__rlconform_shim__", False)
    }


@contextlib.contextmanager
def optional_services_stubbed() -> Iterator[tuple[str, ...]]:
    """Placeholders for the missing optional services while the block imports verl."""
    set_aside = _other_adapters_shims()
    for name in set_aside:
        del sys.modules[name]
    roots = missing_services()
    finder = _PlaceholderFinder(roots)
    if roots:
        sys.meta_path.insert(0, finder)
    try:
        yield roots
    finally:
        if roots:
            sys.meta_path.remove(finder)
        for name in [m for m in sys.modules if m.split(".", 1)[0] in roots]:
            spec = getattr(sys.modules[name], "__spec__", None)
            if isinstance(getattr(spec, "loader", None), _PlaceholderFinder):
                del sys.modules[name]
        sys.modules.update(set_aside)


def import_verl_module(name: str) -> types.ModuleType:
    """Import a verl module, stubbing the missing optional services during the import."""
    if name in sys.modules:
        return sys.modules[name]
    with optional_services_stubbed():
        return importlib.import_module(name)

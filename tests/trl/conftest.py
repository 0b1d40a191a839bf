"""Fixtures for the TRL adapter tests: a loaded target, with sys.modules restored after.

The stand-in (``standin/trl``, TRL's module paths, contract math) is loaded with
``--framework-path``; real TRL (``pip install 'rlconform[trl]'``) is tested when it is
importable. Loading either puts a ``trl`` package into ``sys.modules``; the fixtures take it
out again (and restore a real one that was there) so no other test sees the other.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

STANDIN = Path(__file__).parent / "standin"


@pytest.fixture()
def isolated_imports() -> Iterator[None]:
    saved = {n: m for n, m in sys.modules.items() if n == "trl" or n.startswith("trl.")}
    path = list(sys.path)
    yield
    for name in [n for n in sys.modules if n == "trl" or n.startswith("trl.")]:
        del sys.modules[name]
    sys.modules.update(saved)
    sys.path[:] = path


@pytest.fixture()
def standin_target(isolated_imports):
    from rlconform.adapters.trl import load

    return load(framework_path=str(STANDIN))


def real_trl_skip_reason() -> str | None:
    try:
        spec = importlib.util.find_spec("trl")
    except (ImportError, ValueError):
        spec = None
    if spec is None or spec.origin is None:
        return "TRL is not installed (pip install 'rlconform[trl]')"
    if str(STANDIN) in str(spec.origin):
        return "only the stand-in is importable"
    from importlib.metadata import PackageNotFoundError, version

    from rlconform.adapters.base import SetupError
    from rlconform.adapters.trl.releases import bindings_for

    try:
        bindings_for(version("trl"))
    except (PackageNotFoundError, SetupError) as exc:
        return f"the installed TRL is not certifiable here: {exc}"
    return None


@pytest.fixture()
def real_target(isolated_imports):
    from rlconform.adapters.trl import load

    return load()

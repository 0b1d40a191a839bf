"""Fixtures for the slime adapter tests: a loaded target, with sys.modules restored after.

Loading slime (the stand-in or a real checkout) puts a ``slime`` package, the checkout's
``examples`` package and, where the real packages are absent, the adapter's shims
(megatron, httpx) into ``sys.modules``; the fixtures take them out again so no other test
sees them.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

STANDIN = Path(__file__).parent / "standin"


@pytest.fixture()
def isolated_imports() -> Iterator[None]:
    owned = ("slime", "examples", "megatron", "httpx", "transformers")
    saved = {n: m for n, m in sys.modules.items() if n.split(".")[0] in owned}
    path = list(sys.path)
    yield
    for name in [n for n in sys.modules if n.split(".")[0] in owned]:
        del sys.modules[name]
    sys.modules.update(saved)
    sys.path[:] = path


@pytest.fixture()
def standin_target(isolated_imports):
    from rlconform.adapters.slime import load

    return load(framework_path=str(STANDIN))


def real_slime_path() -> str | None:
    """RLCONFORM_SLIME_PATH, or None when slime is to be found as an installed package."""
    return os.environ.get("RLCONFORM_SLIME_PATH") or None


def real_slime_skip_reason() -> str | None:
    import importlib.util

    if real_slime_path():
        return None
    try:
        if importlib.util.find_spec("slime") is not None:
            return None
    except (ImportError, ValueError):
        pass
    return "slime is not installed and RLCONFORM_SLIME_PATH is not set (a slime checkout)"

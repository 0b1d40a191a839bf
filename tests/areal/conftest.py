"""Fixtures for the AReaL tests: the target, when AReaL 1.0.4 and what its modules import
are installed (``pip install --no-deps areal==1.0.4 && pip install -e '.[areal]'``, the
environment ``.ci/run`` builds for it); otherwise the tests that need it skip, saying why."""

from __future__ import annotations

import functools

import pytest


@functools.lru_cache(maxsize=1)
def areal_skip_reason() -> str | None:
    from rlconform.adapters.base import SetupError

    try:
        from rlconform.adapters.areal import load

        load()
    except SetupError as exc:
        return f"areal cannot load here: {exc}"
    return None


needs_areal = pytest.mark.skipif(areal_skip_reason() is not None, reason=str(areal_skip_reason()))


@pytest.fixture(scope="module")
def areal():
    from rlconform.adapters.areal import load

    return load()

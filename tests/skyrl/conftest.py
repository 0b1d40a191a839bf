"""Fixtures for the SkyRL tests: the target, when skyrl 0.4.0 and what its modules import
are installed on Python >= 3.12 (``pip install -e '.[dev,skyrl]'``, the environment
``.ci/run`` builds for it); otherwise the tests that need it skip, saying why."""

from __future__ import annotations

import functools

import pytest


@functools.lru_cache(maxsize=1)
def skyrl_skip_reason() -> str | None:
    from rlconform.adapters.base import SetupError

    try:
        from rlconform.adapters.skyrl import load

        load()
    except SetupError as exc:
        return f"skyrl cannot load here: {exc}"
    return None


needs_skyrl = pytest.mark.skipif(skyrl_skip_reason() is not None, reason=str(skyrl_skip_reason()))


@pytest.fixture(scope="module")
def skyrl():
    from rlconform.adapters.skyrl import load

    return load()

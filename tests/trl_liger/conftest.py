"""Fixtures for the trl-liger tests: the target, when TRL 1.9 .. 1.12 and liger-kernel 0.8.5
are installed (``pip install 'rlconform[trl-liger]'``, the environment ``.ci/run`` builds
for them); otherwise the tests that need them skip, saying why."""

from __future__ import annotations

import functools

import pytest


@functools.lru_cache(maxsize=1)
def liger_skip_reason() -> str | None:
    from rlconform.adapters.base import SetupError

    try:
        from rlconform.adapters.trl_liger import load

        load()
    except SetupError as exc:
        return f"trl-liger cannot load here: {exc}"
    return None


needs_liger = pytest.mark.skipif(liger_skip_reason() is not None, reason=str(liger_skip_reason()))


@pytest.fixture(scope="module")
def liger():
    from rlconform.adapters.trl_liger import load

    return load()

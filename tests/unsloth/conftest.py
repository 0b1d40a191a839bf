"""Fixtures for the Unsloth tests: the target, when unsloth-zoo 2026.10.9 and TRL 1.15.0 are
installed (``pip install --no-deps unsloth==2026.10.9 && pip install -e '.[dev,unsloth]'``,
the environment ``.ci/run`` builds for it); otherwise the tests that need it skip, saying
why."""

from __future__ import annotations

import functools

import pytest


@functools.lru_cache(maxsize=1)
def unsloth_skip_reason() -> str | None:
    from rlconform.adapters.base import SetupError

    try:
        from rlconform.adapters.unsloth import load

        load()
    except SetupError as exc:
        return f"unsloth cannot load here: {exc}"
    return None


needs_unsloth = pytest.mark.skipif(
    unsloth_skip_reason() is not None, reason=str(unsloth_skip_reason())
)


@pytest.fixture(scope="module")
def unsloth():
    from rlconform.adapters.unsloth import load

    return load()

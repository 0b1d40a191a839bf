"""Generation does not depend on which local modules happen to be imported (hypothesis >=
6.131 mixes their literal constants into what it draws): the same run gives the same cases
before and after a module full of distinctive constants is imported."""

from __future__ import annotations

import contextlib
import importlib

import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from rlconform.conformance import generation


def _draws(context) -> list[float]:
    seen: list[float] = []

    @settings(derandomize=True, database=None, max_examples=300, phases=[Phase.generate])
    @given(st.floats(-1e6, 1e6, allow_nan=False))
    def prop(x: float) -> None:
        seen.append(x)

    with context():
        prop()
    return seen


def test_generation_is_independent_of_imported_modules(tmp_path, monkeypatch):
    before = _draws(generation.independent_of_imports)
    probe = tmp_path / "rlc_constants_probe.py"
    values = ", ".join(repr(123456.0 + i / 7) for i in range(200))
    probe.write_text(f"VALUES = [{values}]\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.import_module("rlc_constants_probe")
    assert _draws(generation.independent_of_imports) == before


@pytest.mark.skipif(
    generation._providers is None or not hasattr(generation._providers, "_get_local_constants"),
    reason="this hypothesis release mixes no local constants into generation",
)
def test_the_context_removes_a_local_constant_pool_that_changes_plain_generation(monkeypatch):
    """The hazard the context removes, made deterministic: whether hypothesis counts a given
    file as local depends on the machine's paths, so the pool it would find is installed
    directly (as hypothesis' own scan would return it)."""
    providers = generation._providers
    before = _draws(generation.independent_of_imports)
    plain_before = _draws(contextlib.nullcontext)
    pool = providers.Constants(floats={123456.0 + i / 7 for i in range(200)})
    monkeypatch.setattr(providers, "_get_local_constants", lambda: pool)
    providers.CONSTANTS_CACHE.cache.clear()
    try:
        assert _draws(contextlib.nullcontext) != plain_before
        assert _draws(generation.independent_of_imports) == before
    finally:
        providers.CONSTANTS_CACHE.cache.clear()

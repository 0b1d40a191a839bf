"""Reproducible generation: hypothesis draws nothing from the source code that happens to be
imported.

Hypothesis (>= 6.131) mixes into generation the literal constants of every *local* module in
``sys.modules`` (a module whose file is outside site-packages and the standard library). A
verdict then depends on which modules were imported before the run (a test file, a clause
module added to the package, the user's own trainer code) and on how rlconform is installed
(editable: local; a wheel in site-packages: not). Observed here: importing one new clause
module turned another clause's verdict from fail to pass. ``independent_of_imports()`` runs
a block with that pool empty, so that the same command gives the same cases on every
machine, install and working directory. The strategies reach the boundary values they need
by construction (pinned examples, ``sampled_from`` of the contract's boundaries).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

try:  # the private hook hypothesis uses; absent in releases without the feature
    from hypothesis.internal.conjecture import providers as _providers
except ImportError:  # pragma: no cover
    _providers = None


def _no_local_constants():  # type: ignore[no-untyped-def]
    return _providers.Constants()


@contextlib.contextmanager
def independent_of_imports() -> Iterator[None]:
    """Generate inside the block without the constants of imported local modules."""
    original = getattr(_providers, "_get_local_constants", None)
    if original is None:
        yield
        return
    _providers._get_local_constants = _no_local_constants
    _providers.CONSTANTS_CACHE.cache.clear()
    try:
        yield
    finally:
        _providers._get_local_constants = original
        _providers.CONSTANTS_CACHE.cache.clear()

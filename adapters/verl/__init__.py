"""verl: certify a verl release (installed, or a source tree) by calling its own functions.

``rlconform certify verl`` loads this adapter through ``load``; ``--framework-path TREE``
certifies the verl package of a checkout that is not installed (``source.py``). Every
operation converts the canonical padded layout into what verl's trainer holds (DataProto,
TensorDict, nested tensors, configs, numpy uid arrays), calls verl on the path its trainer
runs, and converts back; the adapter holds no math of its own. The release line decides
those paths (``releases.py``, the one place where verl's APIs differ); the profile is in
``profile.py``, the declared breaks in ``baselines/verl-<version>.toml``.

``rlconform certify rlconform.adapters.verl:alternates`` certifies the other real choice
of the trainer settings that swap a function (vectorized estimators, chunked entropy, the
colocated reward model), with only the operations they change.
"""

from __future__ import annotations

from rlconform.adapters.base import SetupError, Target, with_overrides
from rlconform.adapters.verl.releases import (
    ALTERNATES,
    DEFAULTS,
    RELEASES,
    SUPPORTED_RANGE,
    Settings,
    release_for,
)
from rlconform.adapters.verl.source import MISSING, import_verl

__all__ = ["MISSING", "RELEASES", "SUPPORTED_RANGE", "alternates", "load"]


def _target(device: str, framework_path: str | None, settings: Settings) -> Target:
    source = import_verl(framework_path)
    release = release_for(source.version)
    try:
        from rlconform.adapters.verl.target import VerlTarget
    except (ImportError, AttributeError) as exc:
        raise SetupError(
            f"verl {source.version}: its API does not match the adapter: {exc}"
        ) from None
    return VerlTarget(source, release, settings, device=device)


def load(device: str = "cpu", framework_path: str | None = None) -> Target:
    """The verl target on the trainer's default settings; SetupError (exit 2) when verl is
    missing or outside the supported release lines."""
    return _target(device, framework_path, DEFAULTS)


def alternates(device: str = "cpu", framework_path: str | None = None) -> Target:
    """The verl target on the alternate settings, reduced to the operations they change."""
    target = _target(device, framework_path, ALTERNATES)
    changed = set(ALTERNATES.changed_ops(target.release))
    dropped = {
        op: None
        for op in dir(type(target))
        if op not in changed and not op.startswith("_") and op in target.bindings
    }
    variant = with_overrides(target, "verl", **dropped)
    variant.bindings = {op: b for op, b in target.bindings.items() if op in changed}
    return variant

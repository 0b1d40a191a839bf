"""verl: certify the installed verl package by calling its own functions.

``rlconform certify verl`` loads this adapter through ``load``. Every operation converts the
canonical padded layout into what verl expects (DataProto, TensorDict, configs, numpy uid
arrays), calls verl, and converts back; the adapter holds no math of its own. verl's
legitimate parameters and its declared deviations live in ``manifest.py``.
"""

from __future__ import annotations

from rlconform.adapters.base import SetupError, Target

SUPPORTED_VERSIONS = ("0.9.1",)
MISSING = "verl is not installed: pip install -e '.[verl]'"


def installed_version() -> str:
    """verl's ``__version__``; SetupError (one line) when verl cannot be imported."""
    try:
        import verl
    except ImportError as exc:
        if getattr(exc, "name", None) in (None, "verl"):
            raise SetupError(MISSING) from None
        raise SetupError(f"verl is installed but does not import: {exc}") from None
    return str(getattr(verl, "__version__", "unknown"))


def load(device: str = "cpu") -> Target:
    """The verl target; SetupError when verl is missing or its version is not supported."""
    version = installed_version()
    if version not in SUPPORTED_VERSIONS:
        supported = ", ".join(SUPPORTED_VERSIONS)
        raise SetupError(
            f"verl {version} is not supported by this adapter (supported: {supported}); "
            f"pip install 'verl=={SUPPORTED_VERSIONS[-1]}'"
        )
    try:
        from rlconform.adapters.verl.target import VerlTarget
    except (ImportError, AttributeError) as exc:
        raise SetupError(f"verl {version}: its API does not match the adapter: {exc}") from None
    return VerlTarget(device=device, version=version)

"""Finding and importing SkyRL (github.com/NovaSky-AI/SkyRL) for the adapter.

SkyRL needs Python >= 3.12 (its config module uses ``typing.TypedDict`` the way pydantic
accepts only from 3.12). ``pip install skyrl==0.4.0`` brings its base dependencies; the
modules the adapter calls also import ray, loguru, jaxtyping, omegaconf, tensordict,
skyrl-gym, torchdata, aiohttp, orjson and pybase64 (the ``skyrl`` extra), all of which
install and import on a CPU machine, so nothing is shimmed. vLLM is absent: SkyRL's own
vLLM patch logs that it skips itself. A source checkout of a fork is named with
``--framework-path`` instead.
"""

from __future__ import annotations

import dataclasses
import importlib
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

from rlconform.adapters.base import SetupError
from rlconform.adapters.skyrl.releases import PYTHON, RELEASES, missing, supported_range

INSTALL = "pip install -e '.[skyrl]' (skyrl=={latest}, Python >= 3.12)"

MODULES = (
    ("ppo_utils", "skyrl.backends.skyrl_train.utils.ppo_utils"),
    ("training_batch", "skyrl.backends.skyrl_train.training_batch"),
    ("config", "skyrl.train.config"),
    ("trainer", "skyrl.train.trainer"),
    ("worker", "skyrl.backends.skyrl_train.workers.worker"),
    ("dispatch", "skyrl.backends.skyrl_train.distributed.dispatch"),
)


@dataclasses.dataclass
class SkyRLRuntime:
    version: str
    root: Path
    ppo_utils: Any
    training_batch: Any
    config: Any
    trainer: Any
    worker: Any
    dispatch: Any


def _version(framework_path: str | None) -> str | None:
    if framework_path:
        text = Path(framework_path, "skyrl", "__init__.py")
        if text.is_file():
            for line in text.read_text().splitlines():
                if line.startswith("__version__"):
                    return line.split("=", 1)[1].strip().strip("\"'")
        return None
    try:
        return metadata.version("skyrl")
    except metadata.PackageNotFoundError:
        return None


def _quiet() -> None:
    """SkyRL logs through loguru on import and on every singleton group the estimators
    see; the adapter silences the ``skyrl`` modules' messages only (loguru's
    ``disable``: other loggers' configuration is untouched)."""
    try:
        from loguru import logger
    except ImportError:
        return
    logger.disable("skyrl")


def load_runtime(framework_path: str | None = None) -> SkyRLRuntime:
    """Import SkyRL (installed, or the checkout at ``framework_path``); SetupError (CLI
    exit 2) with what to do when it is missing, outside the supported releases, on a
    Python it does not run on, or lacks a function the bindings call."""
    if framework_path and not Path(framework_path, "skyrl").is_dir():
        raise SetupError(f"--framework-path {framework_path}: no skyrl/ package there")
    version = _version(framework_path)
    if version is None:
        if framework_path:
            raise SetupError(f"{framework_path}: cannot read skyrl/__init__.py's __version__")
        raise SetupError("SkyRL is not installed: " + INSTALL.format(latest=RELEASES[0]))
    if version not in RELEASES:
        raise SetupError(
            f"SkyRL {version} is not supported: the adapter binds {supported_range()} "
            f"({INSTALL.format(latest=RELEASES[0])})"
        )
    if sys.version_info[:2] < PYTHON:
        raise SetupError(
            f"SkyRL {version} needs Python >= {PYTHON[0]}.{PYTHON[1]}; this is "
            f"{sys.version_info[0]}.{sys.version_info[1]} (make a python3.12 environment)"
        )
    if framework_path:
        sys.path.insert(0, str(Path(framework_path).resolve()))
    modules: dict[str, Any] = {}
    for key, name in MODULES:
        try:
            modules[key] = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            raise SetupError(
                f"SkyRL {version}: importing {name} needs the missing module {exc.name!r}: "
                f"pip install -e '.[skyrl]' (or install {exc.name})"
            ) from None
        except Exception as exc:  # noqa: BLE001 - any import-time failure is a setup problem
            raise SetupError(
                f"SkyRL {version}: importing {name} failed: {type(exc).__name__}: {exc}"
            ) from None
        if key == "ppo_utils":
            _quiet()
    absent = missing(modules)
    if absent:
        raise SetupError(
            f"SkyRL {version} lacks {', '.join(absent)}, which the bindings call: is this a "
            f"modified fork? supported: {supported_range()}"
        )
    root = Path(modules["ppo_utils"].__file__).resolve().parents[4]
    return SkyRLRuntime(version=version, root=root, **modules)

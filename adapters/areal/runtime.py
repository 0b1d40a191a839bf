"""Finding and importing AReaL (github.com/inclusionAI/AReaL) for the adapter.

AReaL's declared dependencies include GPU-only and service packages (vLLM/SGLang clients,
flash-attn builds, the agent SDKs). The modules the adapter calls import, on the way,
``areal/__init__`` (its infra: aiohttp, httpx, ray, the stats loggers wandb / swanlab /
trackio / tensorboardX, hydra and omegaconf for ``cli_args``, transformers, datasets); all
of them install and import on a CPU machine, so nothing is shimmed.
``pip install --no-deps areal==1.0.4 && pip install -e '.[areal]'`` is the CPU install; a
source checkout of a fork is named with ``--framework-path`` instead. AReaL pins
``torch < 2.11``; the math the adapter calls is plain torch and runs on the CPU wheel the
project pins (2.13.0).
"""

from __future__ import annotations

import dataclasses
import importlib
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

from rlconform.adapters.areal.releases import RELEASES, missing, supported_range
from rlconform.adapters.base import SetupError

INSTALL = "pip install --no-deps 'areal=={latest}' && pip install -e '.[areal]'"

MODULES = (
    ("actor", "areal.trainer.ppo.actor"),
    ("critic", "areal.trainer.ppo.critic"),
    ("functional", "areal.utils.functional.functional"),
    ("data", "areal.utils.data"),
    ("cli_args", "areal.api.cli_args"),
    ("stats_tracker", "areal.utils.stats_tracker"),
)


@dataclasses.dataclass
class ArealRuntime:
    version: str
    root: Path
    actor: Any
    critic: Any
    functional: Any
    data: Any
    cli_args: Any
    stats_tracker: Any


def _version(framework_path: str | None) -> str | None:
    if framework_path:
        text = Path(framework_path, "areal", "version.py")
        if text.is_file():
            for line in text.read_text().splitlines():
                if line.startswith("__version__"):
                    return line.split("=", 1)[1].strip().strip("\"'")
        return None
    try:
        return metadata.version("areal")
    except metadata.PackageNotFoundError:
        return None


def load_runtime(framework_path: str | None = None) -> ArealRuntime:
    """Import AReaL (installed, or the checkout at ``framework_path``); SetupError (CLI
    exit 2) with what to do when it is missing, outside the supported releases, or lacks
    a function the bindings call."""
    if framework_path:
        if not Path(framework_path, "areal").is_dir():
            raise SetupError(f"--framework-path {framework_path}: no areal/ package there")
    version = _version(framework_path)
    if version is None:
        if framework_path:
            raise SetupError(f"{framework_path}: cannot read areal/version.py's __version__")
        raise SetupError("AReaL is not installed: " + INSTALL.format(latest=RELEASES[0]))
    if version not in RELEASES:
        raise SetupError(
            f"AReaL {version} is not supported: the adapter binds {supported_range()} "
            f"({INSTALL.format(latest=RELEASES[0])})"
        )
    if framework_path:
        sys.path.insert(0, str(Path(framework_path).resolve()))
    modules: dict[str, Any] = {}
    for key, name in MODULES:
        try:
            modules[key] = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            raise SetupError(
                f"AReaL {version}: importing {name} needs the missing module {exc.name!r}: "
                f"pip install -e '.[areal]' (or install {exc.name})"
            ) from None
        except Exception as exc:  # noqa: BLE001 - any import-time failure is a setup problem
            raise SetupError(
                f"AReaL {version}: importing {name} failed: {type(exc).__name__}: {exc}"
            ) from None
    absent = missing(modules)
    if absent:
        raise SetupError(
            f"AReaL {version} lacks {', '.join(absent)}, which the bindings call: is this a "
            f"modified fork? supported: {supported_range()}"
        )
    root = Path(modules["actor"].__file__).resolve().parents[3]
    return ArealRuntime(version=version, root=root, **modules)

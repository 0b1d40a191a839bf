"""Finding TRL: an installed ``trl`` or the package directory at ``--framework-path``."""

from __future__ import annotations

import dataclasses
import importlib
import sys
from pathlib import Path
from typing import Any

from rlconform.adapters.base import SetupError
from rlconform.adapters.trl.releases import Bindings, bindings_for, release_of, supported_range


@dataclasses.dataclass(frozen=True)
class TrlRuntime:
    version: str
    release: str
    root: str
    bindings: Bindings
    trainer_cls: Any
    config_cls: Any


def load_runtime(framework_path: str | None = None) -> TrlRuntime:
    """Import TRL's GRPO trainer and config; SetupError (exit 2) saying what to do."""
    if framework_path is not None:
        root = Path(framework_path).resolve()
        if not (root / "trl" / "__init__.py").exists():
            raise SetupError(f"--framework-path {framework_path}: no trl/__init__.py under it")
        for name in [n for n in sys.modules if n == "trl" or n.startswith("trl.")]:
            del sys.modules[name]
        sys.path.insert(0, str(root))
    try:
        trl = importlib.import_module("trl")
    except ImportError as exc:
        raise SetupError(
            f"cannot import TRL ({exc}); install a supported release "
            f"({supported_range()}): pip install 'rlconform[trl]'"
        ) from None
    version = str(getattr(trl, "__version__", "unknown"))
    bindings = bindings_for(version)  # before importing the trainer: refuse unknown internals
    try:
        trainer_cls = importlib.import_module("trl.trainer.grpo_trainer").GRPOTrainer
        config_cls = importlib.import_module("trl.trainer.grpo_config").GRPOConfig
    except (ImportError, AttributeError) as exc:
        raise SetupError(f"trl {version}: cannot import GRPOTrainer / GRPOConfig: {exc}") from None
    return TrlRuntime(
        version=version,
        release=release_of(version),
        root=str(Path(trl.__file__).resolve().parent),
        bindings=bindings,
        trainer_cls=trainer_cls,
        config_cls=config_cls,
    )

"""Finding and importing ROLL (github.com/alibaba/ROLL) for the adapter.

ROLL is not on PyPI (the PyPI name ``roll`` belongs to an unrelated async HTTP framework),
so it is either installed from a checkout (``pip install -e``) or named with
``--framework-path PATH`` (a source checkout, put on ``sys.path``). ROLL is recognised by a
module it must have, ``roll.utils.functionals``.

The math the adapter calls lives in ``roll.utils.functionals`` and
``roll.utils.kl_controller`` (torch, numpy and tensordict only). ROLL's batch container
``DataProto`` (``roll.distributed.scheduler.protocol``) imports runtime modules that the
math never touches; each is shimmed ONLY when it is not installed, and only as far as
importing ``protocol`` needs it (see ``SHIMS``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import importlib.machinery
import importlib.util
import io
import logging
import os
import re
import subprocess
import sys
import tempfile
import types
from pathlib import Path
from typing import Any

from rlconform.adapters.base import SetupError
from rlconform.adapters.dependencies import check_import_error

# ROLL's own top-level package: a missing module under it is a fork's choice, any other
# missing module is a package to install (exit 2: pip install 'rlconform[roll]')
OWN = ("roll",)

MARKER = "roll.utils.functionals"
ROLL_URL = "https://github.com/alibaba/ROLL"


# ---------------------------------------------------------------------------- shims


def _shim_ray() -> types.ModuleType:
    """ray: the distributed runtime. ``protocol``/``transfer_backend``/``storage`` use it at
    import time only for ``@ray.remote`` (an actor class) and ``ray.ObjectRef`` (a type
    annotation); remote calls are never made by the math."""
    module = types.ModuleType("ray")

    class ObjectRef:  # annotation target only
        pass

    def remote(*args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and callable(args[0]) and not kwargs:
            return args[0]
        return lambda fn: fn

    def _unavailable(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("ray is shimmed by rlconform (not installed): no remote calls")

    module.remote = remote
    module.ObjectRef = ObjectRef
    module.get = module.put = module.get_actor = _unavailable
    return module


def _shim_codetiming() -> types.ModuleType:
    """codetiming: ``Timer`` context managers around remote-batch transfers (timing only)."""
    module = types.ModuleType("codetiming")

    class Timer(contextlib.ContextDecorator):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            self.last = 0.0

        def __enter__(self) -> Timer:
            return self

        def __exit__(self, *exc: Any) -> bool:
            return False

    module.Timer = Timer
    return module


def _shim_omegaconf() -> types.ModuleType:
    """omegaconf: imported by ``transfer_backend`` to build a TransferQueue server config."""
    module = types.ModuleType("omegaconf")

    class OmegaConf:
        @staticmethod
        def create(*args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("omegaconf is shimmed by rlconform (not installed)")

    module.OmegaConf = OmegaConf
    module.DictConfig = dict
    return module


def _shim_transfer_queue() -> types.ModuleType:
    """transfer_queue (PyPI TransferQueue): the optional remote batch store behind
    ``transfer_backend``; imported unconditionally on Python < 3.13, never called here."""
    module = types.ModuleType("transfer_queue")
    module.__spec__ = importlib.machinery.ModuleSpec("transfer_queue", None)
    return module


def _shim_imageio() -> types.ModuleType:
    """imageio: GIF/video dumps of agentic rollouts in ``roll.pipeline.agentic.utils``,
    which ``roll.utils.train_infer_corrections`` imports for one segment-mean helper."""
    module = types.ModuleType("imageio")

    def _unavailable(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("imageio is shimmed by rlconform (not installed)")

    module.mimsave = module.imwrite = module.get_writer = _unavailable
    return module


SHIMS = {
    "ray": _shim_ray,
    "codetiming": _shim_codetiming,
    "omegaconf": _shim_omegaconf,
    "transfer_queue": _shim_transfer_queue,
    "imageio": _shim_imageio,
}


def _importable(name: str) -> bool:
    if name in sys.modules:
        return sys.modules[name] is not None
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def install_shims() -> list[str]:
    """Install the shims of ``SHIMS`` that are missing; return the names shimmed."""
    installed = []
    for name, factory in SHIMS.items():
        if getattr(sys.modules.get(name), "__rlconform_shim__", False):
            installed.append(name)
            continue
        if not _importable(name):
            module = factory()
            module.__rlconform_shim__ = True
            sys.modules[name] = module
            installed.append(name)
    return installed


# ---------------------------------------------------------------------------- import


@dataclasses.dataclass
class RollRuntime:
    """The imported ROLL modules and where they came from."""

    functionals: types.ModuleType
    kl_controller: types.ModuleType
    data_proto: type | None
    data_proto_error: str | None
    protocol: types.ModuleType | None
    corrections: types.ModuleType | None
    corrections_error: str | None
    agentic: types.ModuleType | None
    agentic_error: str | None
    root: Path
    version: str
    commit: str | None
    shims: list[str]

    @property
    def version_string(self) -> str:
        if self.commit:
            return f"{self.version}+g{self.commit[:12]}"
        return self.version


def _missing_message(framework_path: str | None) -> str:
    where = (
        f"--framework-path {framework_path!r} does not hold roll/utils/functionals.py"
        if framework_path
        else "ROLL is not importable (no module roll.utils.functionals)"
    )
    return (
        f"{where}. ROLL ({ROLL_URL}) is not on PyPI: clone it and pass "
        "--framework-path /path/to/ROLL (the folder holding setup.py and roll/), or "
        "'pip install -e' the checkout. Note: the PyPI package named 'roll' is an unrelated "
        "HTTP framework and cannot be certified."
    )


def _purge(prefix: str) -> None:
    for name in [n for n in sys.modules if n == prefix or n.startswith(prefix + ".")]:
        del sys.modules[name]


def _use_path(framework_path: str) -> Path:
    root = Path(framework_path).expanduser().resolve()
    if not (root / "roll" / "utils" / "functionals.py").is_file():
        raise SetupError(_missing_message(framework_path))
    loaded = sys.modules.get("roll")
    loaded_file = getattr(loaded, "__file__", None) if loaded is not None else None
    if loaded is not None and (
        loaded_file is None or not Path(loaded_file).resolve().is_relative_to(root)
    ):
        _purge("roll")  # another roll (an installed one, or another checkout) was imported
    if str(root) in sys.path:
        sys.path.remove(str(root))
    sys.path.insert(0, str(root))
    importlib.invalidate_caches()
    return root


def _setup_version(root: Path) -> str | None:
    setup = root / "setup.py"
    if setup.is_file():
        found = re.search(r"version\s*=\s*[\"']([^\"']+)[\"']", setup.read_text(errors="replace"))
        if found:
            return found.group(1)
    return None


def _git_commit(root: Path) -> str | None:
    if not (root / ".git").exists():
        return None
    try:
        out = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    commit = out.stdout.strip()
    return commit if re.fullmatch(r"[0-9a-f]{40}", commit) else None


def _installed_version() -> str:
    try:
        from importlib.metadata import version

        return version("roll")
    except Exception:
        return "unknown"


def _quiet_roll_logger() -> None:
    """ROLL's logger streams INFO and WARNING records (e.g. "whitening disabled") to
    stdout, into the certification's console output; they still reach its log file under
    ROLL_LOG_DIR. Only its stream handlers are raised to ERROR."""
    module = sys.modules.get("roll.utils.logging")
    if module is None or not hasattr(module, "get_logger"):
        return
    for handler in module.get_logger().handlers:
        if isinstance(handler, logging.StreamHandler) and not isinstance(
            handler, logging.FileHandler
        ):
            handler.setLevel(logging.ERROR)


def load_runtime(framework_path: str | None = None) -> RollRuntime:
    """Import ROLL (installed, or from ``framework_path``); SetupError with what to do."""
    if framework_path:
        _use_path(framework_path)
    elif not _importable("roll"):
        raise SetupError(_missing_message(None))
    # ROLL's logger writes a log file under ./output/logs unless ROLL_LOG_DIR is set.
    os.environ.setdefault("ROLL_LOG_DIR", str(Path(tempfile.gettempdir()) / "rlconform-roll-logs"))
    shims = install_shims()
    try:
        # ROLL's logger prints "add logger: ..." to stdout when it is created.
        with contextlib.redirect_stdout(io.StringIO()):
            functionals = importlib.import_module(MARKER)
    except ModuleNotFoundError as exc:
        if exc.name and (exc.name == "roll" or exc.name.startswith("roll.")):
            other = sys.modules.get("roll")
            where = getattr(other, "__file__", None)
            if where and not framework_path:
                raise SetupError(
                    f"the importable 'roll' ({where}) is not ROLL: it has no {MARKER}. "
                    + _missing_message(None)
                ) from exc
            raise SetupError(_missing_message(framework_path)) from exc
        check_import_error("ROLL", MARKER, exc, OWN, "roll")
        raise SetupError(
            f"ROLL was found but importing {MARKER} needs the missing module {exc.name!r}: "
            f"install it (ROLL's requirements_common.txt) and retry"
        ) from exc
    except Exception as exc:  # noqa: BLE001 - any import-time failure is a setup problem
        raise SetupError(f"importing {MARKER} failed: {type(exc).__name__}: {exc}") from exc
    _quiet_roll_logger()
    try:
        kl_controller = importlib.import_module("roll.utils.kl_controller")
    except Exception as exc:  # noqa: BLE001
        raise SetupError(f"importing roll.utils.kl_controller failed: {exc}") from exc
    protocol = data_proto = error = None
    try:
        protocol = importlib.import_module("roll.distributed.scheduler.protocol")
        data_proto = protocol.DataProto
    except Exception as exc:  # noqa: BLE001 - the ops that need DataProto are then skipped
        check_import_error("ROLL", "roll.distributed.scheduler.protocol", exc, OWN, "roll")
        error = f"{type(exc).__name__}: {exc}"
    corrections = corrections_error = None
    try:
        corrections = importlib.import_module("roll.utils.train_infer_corrections")
    except Exception as exc:  # noqa: BLE001 - the off-policy ops are then unavailable
        check_import_error("ROLL", "roll.utils.train_infer_corrections", exc, OWN, "roll")
        corrections_error = f"{type(exc).__name__}: {exc}"
    agentic = agentic_error = None
    try:
        agentic = importlib.import_module("roll.pipeline.agentic.utils")
    except Exception as exc:  # noqa: BLE001 - the agentic-path ops then raise with this reason
        check_import_error("ROLL", "roll.pipeline.agentic.utils", exc, OWN, "roll")
        agentic_error = f"{type(exc).__name__}: {exc}"
    root = Path(functionals.__file__).resolve().parents[2]
    version = _setup_version(root) or _installed_version()
    return RollRuntime(
        functionals=functionals,
        kl_controller=kl_controller,
        data_proto=data_proto,
        data_proto_error=error,
        protocol=protocol,
        corrections=corrections,
        corrections_error=corrections_error,
        agentic=agentic,
        agentic_error=agentic_error,
        root=root,
        version=version,
        commit=_git_commit(root),
        shims=[
            name for name in shims if getattr(sys.modules.get(name), "__rlconform_shim__", False)
        ],
    )

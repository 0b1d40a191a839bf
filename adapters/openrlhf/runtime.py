"""Finding and importing OpenRLHF (github.com/OpenRLHF/OpenRLHF) for the adapter.

OpenRLHF installs from the package registry, but its declared dependencies include
``flash-attn`` (source-only, needs CUDA to build), ``deepspeed``, ``vllm`` and ``ray``. The
postprocess math the adapter calls (``openrlhf.models.utils``, ``openrlhf.models.loss``,
``openrlhf.trainer.ppo_utils``, ``openrlhf.utils.loss_utils``) needs only torch and numpy;
the modules below are imported on the way to it but never used by it. Each is shimmed ONLY
when it is not installed (``SHIMS``), and only as far as those imports need:

- ``flash_attn``: ``openrlhf/models/__init__`` -> ``actor`` -> ``ring_attn_utils`` imports
  its padding helpers for ring attention in the model forward.
- ``deepspeed``: ``openrlhf/models/utils`` imports it for ``set_z3_leaf_modules`` (ZeRO-3
  module marking at model load).
- ``ray``: ``experience_maker`` imports it for the remote model calls of
  ``make_experience``; ``compute_advantages_and_returns`` never calls it.
- ``openrlhf.trainer.ray.launcher``: its package ``openrlhf.trainer.ray`` imports ``vllm``
  (the rollout engines); ``experience_maker`` imports only the ``RayActorGroup`` type
  from it, for annotations.

``pip install --no-deps openrlhf==<release>`` and ``pip install -e '.[openrlhf]'`` (which
brings transformers, peft, pylatexenc, sympy and tqdm, imported by ``openrlhf.models`` and
``openrlhf.utils``) is the CPU install. A source checkout of a fork is named with
``--framework-path`` instead.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.machinery
import importlib.util
import re
import sys
import types
from pathlib import Path
from typing import Any

from rlconform.adapters.base import SetupError
from rlconform.adapters.openrlhf.releases import RELEASES, Release, supported_range

MARKER = "openrlhf.models.loss"
INSTALL = (
    "pip install --no-deps 'openrlhf=={latest}' && pip install -e '.[openrlhf]' (OpenRLHF's own "
    "dependency list includes flash-attn and vllm, which do not install on a CPU machine)"
)


# ---------------------------------------------------------------------------- shims


def _module(name: str, package: bool = False) -> types.ModuleType:
    """An empty module with a real spec (transformers probes optional packages with
    ``importlib.util.find_spec``, which fails on a module whose ``__spec__`` is None)."""
    module = types.ModuleType(name)
    module.__spec__ = importlib.machinery.ModuleSpec(name, loader=None, is_package=package)
    if package:
        module.__path__ = []
    module.__rlconform_shim__ = True
    return module


def _unavailable(what: str) -> Any:
    def call(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"{what} is shimmed by rlconform (not installed): not callable here")

    return call


def _shim_flash_attn() -> dict[str, types.ModuleType]:
    """flash_attn: ring-attention padding helpers of the model forward (``ring_attn_utils``)."""
    root = _module("flash_attn", package=True)
    padding = _module("flash_attn.bert_padding")
    for name in ("index_first_axis", "pad_input", "rearrange", "unpad_input"):
        setattr(padding, name, _unavailable(f"flash_attn.bert_padding.{name}"))
    utils = _module("flash_attn.utils", package=True)
    distributed = _module("flash_attn.utils.distributed")
    distributed.all_gather = _unavailable("flash_attn.utils.distributed.all_gather")
    root.bert_padding, root.utils, utils.distributed = padding, utils, distributed
    return {
        "flash_attn": root,
        "flash_attn.bert_padding": padding,
        "flash_attn.utils": utils,
        "flash_attn.utils.distributed": distributed,
    }


def _shim_deepspeed() -> dict[str, types.ModuleType]:
    """deepspeed: ``set_z3_leaf_modules`` (ZeRO-3 module marking when a model is loaded)."""
    root = _module("deepspeed", package=True)
    utils = _module("deepspeed.utils")
    utils.set_z3_leaf_modules = _unavailable("deepspeed.utils.set_z3_leaf_modules")
    root.utils = utils
    return {"deepspeed": root, "deepspeed.utils": utils}


def _shim_ray() -> dict[str, types.ModuleType]:
    """ray: the remote model calls of ``make_experience`` (``ray.put`` / ``ray.get``)."""
    root = _module("ray", package=True)
    for name in ("put", "get", "remote", "wait"):
        setattr(root, name, _unavailable(f"ray.{name}"))
    return {"ray": root}


def _shim_launcher() -> dict[str, types.ModuleType]:
    """openrlhf.trainer.ray.launcher: the ``RayActorGroup`` annotation of the experience
    maker (the real package ``openrlhf.trainer.ray`` imports vllm's rollout engines)."""
    launcher = _module("openrlhf.trainer.ray.launcher")
    launcher.RayActorGroup = type("RayActorGroup", (), {"__rlconform_shim__": True})
    return {"openrlhf.trainer.ray.launcher": launcher}


SHIMS = {
    "flash_attn": _shim_flash_attn,
    "deepspeed": _shim_deepspeed,
    "ray": _shim_ray,
}


def _importable(name: str) -> bool:
    if name in sys.modules:
        return sys.modules[name] is not None
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _launcher_importable() -> bool:
    """The real launcher imports only when vllm does (``openrlhf/trainer/ray/__init__``)."""
    return _importable("vllm") and _importable("ray")


def install_shims() -> list[str]:
    """Install the shims of the modules that are missing; return the names shimmed."""
    shimmed = []
    for name, factory in SHIMS.items():
        if getattr(sys.modules.get(name), "__rlconform_shim__", False):
            shimmed.append(name)
        elif not _importable(name):
            sys.modules.update(factory())
            shimmed.append(name)
    launcher = "openrlhf.trainer.ray.launcher"
    if getattr(sys.modules.get(launcher), "__rlconform_shim__", False):
        shimmed.append(launcher)
    elif launcher not in sys.modules and not _launcher_importable():
        sys.modules.update(_shim_launcher())
        shimmed.append(launcher)
    return shimmed


# ---------------------------------------------------------------------------- import


@dataclasses.dataclass
class OpenRLHFRuntime:
    """The imported OpenRLHF modules, the release's binding table and where they came from."""

    utils: types.ModuleType
    loss: types.ModuleType
    loss_utils: types.ModuleType
    kl_controller: types.ModuleType
    experience: types.ModuleType
    experience_maker: types.ModuleType
    release: Release
    version: str
    root: Path
    shims: list[str]


def _purge(prefix: str) -> None:
    for name in [n for n in sys.modules if n == prefix or n.startswith(prefix + ".")]:
        if not getattr(sys.modules[name], "__rlconform_shim__", False):
            del sys.modules[name]


_ADDED_PATHS: list[str] = []


def _drop_added_paths() -> None:
    """Forget checkouts an earlier ``--framework-path`` load put first on ``sys.path``."""
    if not _ADDED_PATHS:
        return
    for path in _ADDED_PATHS:
        while path in sys.path:
            sys.path.remove(path)
    _ADDED_PATHS.clear()
    _purge("openrlhf")
    importlib.invalidate_caches()


def _use_path(framework_path: str) -> Path:
    root = Path(framework_path).expanduser().resolve()
    if not (root / "openrlhf" / "models" / "loss.py").is_file():
        raise SetupError(
            f"--framework-path {framework_path!r} does not hold openrlhf/models/loss.py: pass "
            "the folder that holds the openrlhf package (an OpenRLHF checkout)"
        )
    loaded = sys.modules.get("openrlhf")
    loaded_file = getattr(loaded, "__file__", None) if loaded is not None else None
    if loaded is not None and (
        loaded_file is None or not Path(loaded_file).resolve().is_relative_to(root)
    ):
        _purge("openrlhf")  # another OpenRLHF (installed, or another checkout) was imported
    if str(root) in sys.path:
        sys.path.remove(str(root))
    sys.path.insert(0, str(root))
    _ADDED_PATHS.append(str(root))
    importlib.invalidate_caches()
    return root


def _source_version(root: Path) -> str | None:
    """The release a checkout declares (``version.txt`` or ``setup.py``), if it says."""
    for name in ("version.txt", "openrlhf/version.txt"):
        path = root / name
        if path.is_file():
            text = path.read_text(errors="replace").strip()
            if text:
                return text.lstrip("v")
    setup = root / "setup.py"
    if setup.is_file():
        found = re.search(
            r"version\s*=\s*[\"']([0-9][^\"']*)[\"']", setup.read_text(errors="replace")
        )
        if found:
            return found.group(1)
    return None


def _installed_version() -> str | None:
    try:
        from importlib.metadata import PackageNotFoundError, version

        return version("openrlhf")
    except PackageNotFoundError:
        return None


def _base_release(version: str) -> str:
    """``0.11.2`` of ``0.11.2``, ``0.11.2.post1``, ``0.11.2+fork`` or ``0.11.2rc1``."""
    found = re.match(r"(\d+\.\d+\.\d+)", version)
    return found.group(1) if found else version


def _release_of(version: str) -> Release:
    release = RELEASES.get(_base_release(version))
    if release is None:
        raise SetupError(
            f"OpenRLHF {version} is not supported by this adapter (supported: "
            f"{supported_range()}); install one of those: "
            + INSTALL.format(latest=next(iter(RELEASES)))
        )
    return release


def load_runtime(framework_path: str | None = None) -> OpenRLHFRuntime:
    """Import OpenRLHF (installed, or the checkout at ``framework_path``) and pick the
    binding table of its release; SetupError (CLI exit 2) with what to do otherwise."""
    if not framework_path:
        _drop_added_paths()
    root_hint = _use_path(framework_path) if framework_path else None
    if root_hint is None and not _importable("openrlhf"):
        raise SetupError(
            "OpenRLHF is not installed: " + INSTALL.format(latest=next(iter(RELEASES)))
        )
    version = (_source_version(root_hint) if root_hint else None) or _installed_version()
    if version is None:
        raise SetupError(
            "cannot tell which OpenRLHF release this is (no package metadata, no version.txt "
            f"or setup.py version); supported: {supported_range()}"
        )
    release = _release_of(version)
    shims = install_shims()
    modules = {}
    for key, name in (
        ("utils", "openrlhf.models.utils"),
        ("loss", MARKER),
        ("loss_utils", "openrlhf.utils.loss_utils"),
        ("kl_controller", "openrlhf.trainer.ppo_utils.kl_controller"),
        ("experience", "openrlhf.trainer.ppo_utils.experience"),
        ("experience_maker", "openrlhf.trainer.ppo_utils.experience_maker"),
    ):
        try:
            modules[key] = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            raise SetupError(
                f"OpenRLHF {version}: importing {name} needs the missing module {exc.name!r}: "
                f"pip install -e '.[openrlhf]' (or install {exc.name})"
            ) from None
        except Exception as exc:  # noqa: BLE001 - any import-time failure is a setup problem
            raise SetupError(
                f"OpenRLHF {version}: importing {name} failed: {type(exc).__name__}: {exc}"
            ) from None
    missing = release.missing(modules)
    if missing:
        raise SetupError(
            f"OpenRLHF {version} lacks {', '.join(missing)}, which the bindings of release "
            f"{release.name} call: is this a modified fork? supported: {supported_range()}"
        )
    root = Path(modules["loss"].__file__).resolve().parents[2]
    return OpenRLHFRuntime(
        release=release,
        version=version,
        root=root,
        shims=[n for n in shims if getattr(sys.modules.get(n), "__rlconform_shim__", False)],
        **modules,
    )

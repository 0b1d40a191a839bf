"""Finding slime, shimming the runtime modules its math never touches, and its version.

slime (THUDM/slime) is not on the package registry: it is importable either because a
fork installed it, or from a source checkout given as ``--framework-path PATH`` (the
folder that holds ``slime/__init__.py``), which is put first on ``sys.path``.

Shims. The functions bound by this adapter are pure torch, but the modules that hold
them import heavy runtime packages at module level. Each shim below is installed **only
when the real package is absent** (``importlib.util.find_spec`` is None), and exposes
only the names slime's math path reads:

- ``megatron.core.mpu`` (Megatron parallel state): ``cp_utils``/``loss``/``data`` import it
  at module level, ``get_reinforce_plus_plus_returns`` and
  ``get_advantages_and_returns_batch`` import it inside the function. The shim reports a
  single process: context/tensor/data parallel size 1, rank 0, groups None (the default
  group), last pipeline stage (the same approach as slime's own
  ``tests/_cp_dist_helpers.py``). ``train_metric_utils`` also asks for the gloo
  data-parallel group and its source rank when it gathers the logged metrics.
- ``httpx`` (HTTP client): ``slime.utils.types -> misc -> http_utils`` evaluates the
  annotation ``httpx.AsyncClient`` at import; the shim defines the four names it reads.
- ``transformers`` (tokenizers) is not needed: the only module importing it,
  ``slime.utils.mask_utils``, is not bound (its generator needs a real HF tokenizer).
- ``ray`` and ``sglang`` are not shimmed: ``slime/ray/rollout.py`` (which holds the
  reward post-processing) needs far more of them than a shim could honestly provide, so
  when they are absent its ``RolloutManager`` methods for reward post-processing and
  sample conversion are compiled from slime's own source file (``ast``), unchanged.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import importlib.util
import re
import sys
import types
from pathlib import Path
from typing import Any

from rlconform.adapters.base import SetupError

HOW_TO_GET_SLIME = (
    "slime is not importable: install your fork (pip install -e /path/to/slime) or pass "
    "--framework-path /path/to/slime, the source checkout that holds slime/__init__.py "
    "(e.g. git clone https://github.com/THUDM/slime)"
)


def _absent(name: str) -> bool:
    if name in sys.modules:
        return False
    try:
        return importlib.util.find_spec(name) is None
    except (ImportError, ValueError):
        return True


def _install_megatron_shim() -> list[str]:
    """Megatron parallel state for one process (see the module docstring)."""
    if not _absent("megatron"):
        return []
    mpu = types.ModuleType("megatron.core.mpu")
    mpu.__rlconform_shim__ = "Megatron parallel state: one process, CP=TP=DP=1"
    mpu.get_context_parallel_world_size = lambda: 1
    mpu.get_context_parallel_rank = lambda: 0
    mpu.get_context_parallel_group = lambda: None
    mpu.is_pipeline_last_stage = lambda *args, **kwargs: True
    mpu.get_tensor_model_parallel_group = lambda: None
    mpu.get_tensor_model_parallel_rank = lambda: 0
    mpu.get_tensor_model_parallel_world_size = lambda: 1
    mpu.get_data_parallel_world_size = lambda with_context_parallel=False: 1
    mpu.get_data_parallel_rank = lambda with_context_parallel=False: 0
    mpu.get_data_parallel_group = lambda with_context_parallel=False: None
    mpu.get_data_parallel_group_gloo = lambda with_context_parallel=False: None
    mpu.get_data_parallel_src_rank = lambda with_context_parallel=False: 0
    core = types.ModuleType("megatron.core")
    core.mpu = mpu
    megatron = types.ModuleType("megatron")
    megatron.core = core
    megatron.__rlconform_shim__ = mpu.__rlconform_shim__
    sys.modules.update(
        {
            "megatron": megatron,
            "megatron.core": core,
            "megatron.core.mpu": mpu,
        }
    )
    return ["megatron.core.mpu (Megatron parallel state)"]


def _install_httpx_shim() -> list[str]:
    """The HTTP client names ``slime.utils.http_utils`` reads at import."""
    if not _absent("httpx"):
        return []
    httpx = types.ModuleType("httpx")
    httpx.__rlconform_shim__ = "HTTP client, names only"

    class _Unavailable:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            raise RuntimeError("httpx is shimmed by rlconform: no HTTP client in a certification")

    httpx.AsyncClient = type("AsyncClient", (_Unavailable,), {})
    httpx.Limits = type("Limits", (_Unavailable,), {})
    httpx.Timeout = type("Timeout", (_Unavailable,), {})
    httpx.HTTPStatusError = type("HTTPStatusError", (Exception,), {})
    sys.modules["httpx"] = httpx
    return ["httpx (HTTP client)"]


def install_shims() -> list[str]:
    """Install every shim whose real package is absent; return what was shimmed."""
    return _install_megatron_shim() + _install_httpx_shim()


def locate(framework_path: str | None) -> Path | None:
    """Make ``import slime`` resolve to the requested copy; return its checkout root."""
    if framework_path is not None:
        root = Path(framework_path).expanduser().resolve()
        if not (root / "slime" / "__init__.py").is_file():
            raise SetupError(
                f"--framework-path {framework_path}: no slime/__init__.py there; "
                "point it at the root of a slime source checkout"
            )
        _forget_other_slime(root)
        if str(root) not in sys.path:
            sys.path.insert(0, str(root))
        return root
    if _absent("slime"):
        raise SetupError(HOW_TO_GET_SLIME)
    return None


def _forget_other_slime(root: Path) -> None:
    """Drop an already imported ``slime`` (and the checkout's ``examples`` package, which
    holds the MIS hook) that lives elsewhere (tests load two copies)."""
    for package in ("slime", "examples"):
        loaded = sys.modules.get(package)
        if loaded is None:
            continue
        origin = Path(getattr(loaded, "__file__", "") or "").resolve()
        if root in origin.parents:
            continue
        for name in [n for n in sys.modules if n == package or n.startswith(package + ".")]:
            del sys.modules[name]
        sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != origin.parent.parent]


def version(root: Path | None) -> str:
    """The package version, plus the git commit of a checkout (``unknown`` without .git)."""
    package = _package_version(root)
    if root is None:
        return package
    return f"{package}+git.{_git_head(root)}"


def _package_version(root: Path | None) -> str:
    if root is not None:
        setup = root / "setup.py"
        if setup.is_file():
            found = re.search(r"version\s*=\s*[\"']([^\"']+)[\"']", setup.read_text())
            if found:
                return found.group(1)
        return "unknown"
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version("slime")
    except PackageNotFoundError:
        return "unknown"


def _git_head(root: Path) -> str:
    git = root / ".git"
    if git.is_file():  # a worktree: "gitdir: <path>"
        pointer = git.read_text().strip()
        if not pointer.startswith("gitdir:"):
            return "unknown"
        git = (root / pointer.partition(":")[2].strip()).resolve()
    head = git / "HEAD"
    if not head.is_file():
        return "unknown"
    content = head.read_text().strip()
    if not content.startswith("ref:"):
        return content
    ref = content.partition(":")[2].strip()
    for base in (git, _common_dir(git)):
        if (base / ref).is_file():
            return (base / ref).read_text().strip()
        packed = base / "packed-refs"
        if packed.is_file():
            for line in packed.read_text().splitlines():
                parts = line.split()
                if len(parts) == 2 and parts[1] == ref:
                    return parts[0]
    return "unknown"


def _common_dir(git: Path) -> Path:
    common = git / "commondir"
    if common.is_file():
        return (git / common.read_text().strip()).resolve()
    return git


def uncompiled(fn: Any) -> Any:
    """The Python function under ``@torch.compile`` (or ``fn`` itself when not compiled)."""
    return getattr(fn, "__wrapped__", fn)


def source_function(module: str, qualname: str, namespace: dict[str, Any]) -> Any:
    """A function of slime compiled from its own source file, unchanged.

    ``qualname`` is ``function`` or ``Class.method`` (a method comes back as a plain
    function taking ``self`` first). Used for code in modules whose imports need a live
    runtime (``slime.ray.rollout``: ray, sglang; ``slime.utils.data``: ray).
    """
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise SetupError(f"{module} not found in the slime checkout: cannot bind {qualname}")
    tree = ast.parse(Path(spec.origin).read_text(), filename=spec.origin)
    owner, _, name = qualname.rpartition(".")
    body = tree.body
    if owner:
        classes = [n for n in body if isinstance(n, ast.ClassDef) and n.name == owner]
        body = classes[0].body if classes else []
    for node in body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            scope = dict(namespace, __name__=module)
            exec(compile(ast.Module(body=[node], type_ignores=[]), spec.origin, "exec"), scope)
            return scope[name]
    raise SetupError(f"{spec.origin}: {qualname} not found")


def rollout_conversion() -> tuple[Any, Any]:
    """slime's ``RolloutManager._post_process_rewards`` and ``_convert_samples_to_train_data``.

    Imported from ``slime.ray.rollout`` when ray and sglang are installed; otherwise both
    methods are compiled from that file's own source (see ``source_function``), with the
    globals they read: ``torch``, ``Sample`` and ``get_source`` (itself compiled from
    ``slime/utils/data.py``, which imports ray).
    """
    if not (_absent("ray") or _absent("sglang")):
        manager = importlib.import_module("slime.ray.rollout").RolloutManager
        return manager._post_process_rewards, manager._convert_samples_to_train_data
    import torch
    from slime.utils.types import Sample

    get_source = source_function("slime.utils.data", "get_source", {"Sample": Sample})
    namespace = {"torch": torch, "Sample": Sample, "get_source": get_source}
    return (
        source_function("slime.ray.rollout", "RolloutManager._post_process_rewards", namespace),
        source_function(
            "slime.ray.rollout", "RolloutManager._convert_samples_to_train_data", namespace
        ),
    )


# the sglang names ``slime.backends.sglang_utils.arguments`` imports at module level (it
# adds sglang's server and router flags to slime's parser; the step reads none of them)
_SGLANG_NAMES = {
    "sglang.srt.server_args": "ServerArgs",
    "sglang_router.launch_router": "RouterArgs",
}


def argument_defaults() -> argparse.Namespace:
    """slime's own argument defaults: ``get_slime_extra_args_provider()`` on a bare parser,
    parsed with only the one required flag (``--rollout-batch-size 1``).

    ``slime.utils.arguments`` imports sglang's ``ServerArgs`` and the router's ``RouterArgs``
    at module level. Where sglang is absent, both are shimmed **for the import only** (empty
    classes, removed from ``sys.modules`` afterwards, so nothing else sees an sglang): slime's
    own flags, the only ones read here, are added by slime's own code. Megatron's flags
    that slime re-defaults (``--calculate-per-token-loss``, ``--micro-batch-size``) are added
    by slime's ``reset_arg`` when the parser lacks them, as here.
    """
    added: list[str] = []
    try:
        for module, name in _SGLANG_NAMES.items():
            if not _absent(module.split(".")[0]):
                continue
            parts = module.split(".")
            for depth in range(1, len(parts) + 1):
                prefix = ".".join(parts[:depth])
                if prefix not in sys.modules:
                    stub = types.ModuleType(prefix)
                    stub.__rlconform_shim__ = (
                        "sglang argument classes, for importing slime's parser"
                    )
                    sys.modules[prefix] = stub
                    added.append(prefix)
            setattr(sys.modules[module], name, type(name, (), {}))
        try:
            arguments = importlib.import_module("slime.utils.arguments")
        except ImportError as exc:
            raise SetupError(f"cannot import slime.utils.arguments (slime's flags): {exc}") from exc
        parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
        arguments.get_slime_extra_args_provider()(parser)
        return parser.parse_args(["--rollout-batch-size", "1"])
    finally:
        for prefix in added:
            sys.modules.pop(prefix, None)
        if added:
            # the modules that imported the stubs: a later import must see the real absence
            for name in ("slime.utils.arguments", "slime.backends.sglang_utils.arguments"):
                sys.modules.pop(name, None)

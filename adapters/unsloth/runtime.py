"""Importing unsloth-zoo's GRPO loss on a CPU machine.

``unsloth_zoo`` refuses to import unless the ``unsloth`` package can be found
(``find_spec("unsloth")`` in its GPU init) and ``UNSLOTH_IS_PRESENT`` is set (``import unsloth``
sets it). ``unsloth`` is installed with ``--no-deps`` (its own list pins xformers and
bitsandbytes builds) and never imported: the runtime sets the variable, as ``unsloth`` does,
before the first import. It also sets ``UNSLOTH_COMPILE_DISABLE=1`` unless
``RLCONFORM_UNSLOTH_COMPILED=1``:
``UnslothEfficientGRPO`` wraps its per-chunk step in ``torch.compile`` (through
``torch_compile_with_fallback``, which returns the function itself when compilation is
disabled); on a CPU runner the adapter runs it eagerly, the same function, as the Liger
binding runs Liger's loss with ``compiled=False``. Both are read by unsloth-zoo at import,
so they must be set before it; a process that imported unsloth-zoo earlier keeps its own.
``UNSLOTH_GRPO_PREFIX_GROUPER=0``: see ``load_zoo`` (without it the first loss call imports
``unsloth``).
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import os
import tempfile
from importlib import metadata
from typing import Any

from rlconform.adapters.base import SetupError
from rlconform.adapters.unsloth.releases import check_zoo

INSTALL = "pip install --no-deps unsloth==2026.10.9 && pip install 'rlconform[unsloth]'"
COMPILED = os.environ.get("RLCONFORM_UNSLOTH_COMPILED") == "1"
PREFIX_GROUPER = "UNSLOTH_GRPO_PREFIX_GROUPER"


@dataclasses.dataclass(frozen=True)
class ZooRuntime:
    version: str
    release: str
    root: str
    rl: Any  # unsloth_zoo.rl_replacements


def load_zoo() -> ZooRuntime:
    """unsloth-zoo's ``rl_replacements``; SetupError (exit 2) saying what to do."""
    try:
        version = metadata.version("unsloth-zoo")
    except metadata.PackageNotFoundError:
        raise SetupError(f"unsloth-zoo is not installed: {INSTALL}") from None
    release = check_zoo(version)
    if importlib.util.find_spec("unsloth") is None:
        raise SetupError(
            f"unsloth-zoo {version} imports only beside the unsloth package (it checks "
            f"find_spec('unsloth')), which is not installed: {INSTALL}"
        )
    os.environ.setdefault("UNSLOTH_IS_PRESENT", "1")
    # unsloth-zoo writes a compile cache (unsloth_compiled_cache/) into the working directory
    # on import: keep the user's checkout clean
    os.environ.setdefault(
        "UNSLOTH_COMPILE_LOCATION",
        os.path.join(tempfile.gettempdir(), "rlconform-unsloth-compiled-cache"),
    )
    if not COMPILED:
        os.environ.setdefault("UNSLOTH_COMPILE_DISABLE", "1")
    # grpo_accumulated_loss imports unsloth.utils.prefix_grouper on its first call unless
    # this is off, and importing unsloth patches TRL and transformers in this process;
    # PrefixGrouper is a forward of the model (one shared-prompt pass, verified against the
    # per-row one before use), which the stand-in model has none of
    os.environ[PREFIX_GROUPER] = "0"
    try:
        rl = importlib.import_module("unsloth_zoo.rl_replacements")
    except Exception as exc:  # unsloth-zoo raises plain exceptions (no accelerator, ...)
        raise SetupError(f"unsloth-zoo {version}: cannot import its GRPO loss: {exc}") from None
    root = os.path.dirname(os.path.abspath(rl.__file__))
    return ZooRuntime(version=version, release=release, root=root, rl=rl)

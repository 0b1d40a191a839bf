"""Unsloth's generated ``GRPOTrainer.compute_loss``, built from its source (source-level binding).

Unsloth does not ship its GRPO trainer: on ``import unsloth`` it writes one
(``unsloth/models/rl.py``) whose ``compute_loss`` is the source text of the inner function of
``grpo_trainer_compute_loss`` in ``unsloth/models/rl_replacements.py`` (``inspect.getsource``
of it, 2026.10.9), compiled beside the module-level helpers it calls (its ``RL_PRE_ITEMS``).
Importing ``unsloth`` needs an accelerator, so ``build`` does what the generator does on this
one method: it reads that file of the installed ``unsloth`` package (never importing it),
takes the inner ``compute_loss`` and every top-level function of the same file it calls (found
by their free names), and compiles them in one namespace whose other names are the objects the
generated module imports: ``torch``, ``inspect``, unsloth-zoo's ``grpo_accumulated_loss``,
``grpo_compute_loss`` and ``_unsloth_fix_mm_token_type_ids``, ``detect_logit_transforms`` and
TRL's ``nanmin`` / ``nanmax``. ``grpo_compute_loss_slow`` (the branch taken only when a custom
``_get_per_token_logps`` returns log-probs; a source string in unsloth-zoo) is bound to a
function that refuses: the step runs the default, efficient branch.
"""

from __future__ import annotations

import ast
import builtins
import importlib.util
import inspect
import os
import symtable
import textwrap
from collections.abc import Callable
from typing import Any

import torch

from rlconform.adapters.base import SetupError

SOURCE = os.path.join("models", "rl_replacements.py")  # under the unsloth package
OUTER = "grpo_trainer_compute_loss"


def source_path() -> str:
    """The installed ``unsloth/models/rl_replacements.py`` (``unsloth`` is not imported)."""
    spec = importlib.util.find_spec("unsloth")
    locations = list(spec.submodule_search_locations or []) if spec else []
    for root in locations:
        path = os.path.join(root, SOURCE)
        if os.path.exists(path):
            return path
    raise SetupError(
        "the unsloth package (pip install --no-deps unsloth==2026.10.9) is needed for its "
        f"GRPO trainer's compute_loss: no {SOURCE} under {locations or 'any unsloth package'}"
    )


def _free_names(source: str) -> set[str]:
    """Names the functions in ``source`` read from their module (not builtins)."""
    names: set[str] = set()

    def walk(table: symtable.SymbolTable) -> None:
        for symbol in table.get_symbols():
            if symbol.is_global() and not symbol.is_assigned():
                names.add(symbol.get_name())
        for child in table.get_children():
            walk(child)

    for child in symtable.symtable(source, "<unsloth>", "exec").get_children():
        walk(child)
    return {n for n in names if not hasattr(builtins, n)}


def _slow_path(*args: Any, **kwargs: Any) -> Any:
    raise SetupError(
        "Unsloth's compute_loss took its grpo_compute_loss_slow branch (log-probs from a "
        "custom _get_per_token_logps): not bound, the step runs the efficient branch"
    )


def _imports(zoo: Any) -> dict[str, Any]:
    """The generated module's imported names that ``compute_loss`` reads."""
    from trl.trainer.grpo_trainer import nanmax, nanmin

    try:
        from unsloth_zoo.device_map_planner import detect_logit_transforms
    except ImportError:  # the generated module's own guard
        detect_logit_transforms = None
    return {
        "torch": torch,
        "inspect": inspect,
        "grpo_accumulated_loss": zoo.grpo_accumulated_loss,
        "grpo_compute_loss": zoo.grpo_compute_loss,
        "_unsloth_fix_mm_token_type_ids": zoo._unsloth_fix_mm_token_type_ids,
        "detect_logit_transforms": detect_logit_transforms,
        "nanmin": nanmin,
        "nanmax": nanmax,
        "grpo_compute_loss_slow": _slow_path,
    }


def build(zoo: Any, path: str | None = None) -> Callable[..., Any]:
    """``compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None)``
    as Unsloth's generated trainer defines it (module docstring)."""
    path = path or source_path()
    with open(path, encoding="utf-8") as handle:
        text = handle.read()
    tree = ast.parse(text)
    top = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    outer = top.get(OUTER)
    inner = [
        n
        for n in (outer.body if outer else [])
        if isinstance(n, ast.FunctionDef) and n.name == "compute_loss"
    ]
    if not inner:
        raise SetupError(f"{path}: no compute_loss inside {OUTER} (an unsupported unsloth)")
    namespace = _imports(zoo)
    sources = [textwrap.dedent(ast.get_source_segment(text, inner[0]) or "")]
    pending = sorted(_free_names(sources[0]))
    seen: set[str] = set()
    while pending:
        name = pending.pop()
        if name in seen or name in namespace:
            continue
        seen.add(name)
        if name not in top:
            raise SetupError(f"{path}: compute_loss reads {name!r}, which the binding cannot give")
        helper = ast.get_source_segment(text, top[name]) or ""
        sources.append(helper)
        pending.extend(sorted(_free_names(helper)))
    code = compile("\n\n".join(reversed(sources)), f"<unsloth {path}: compute_loss>", "exec")
    exec(code, namespace)  # noqa: S102 - the installed unsloth's own source, as its generator does
    return namespace["compute_loss"]

"""ROLL functions whose modules cannot be imported without a live cluster, compiled from
ROLL's own source files, unchanged.

The actor and critic ``loss_func`` (``roll.pipeline.*.actor_worker`` / ``base_worker``), the
strategies' ``op_compute_log_probs`` / ``op_compute_entropy`` and the token and sample
counters behind ``batch_num_tokens`` / ``global_valid_samples``
(``roll.distributed.strategy.strategy``), and the workload inside ``batch_balance``: their
modules import the distributed runtime (ray actors, Megatron, FSDP, checkpointing,
transformers, peft) at module level. The function bodies only read the globals named in
their ``namespace`` (torch, ROLL's own math from ``roll.utils.functionals``, ...), so each
is compiled from its own file (``ast``) with exactly those globals, as the slime adapter
does for ``slime.ray.rollout``. ``self`` is a stub object holding what the method reads
(``pipeline_config``, ``strategy``, ``worker.rank_info``), documented at each call site.

``torch.distributed`` is replaced, for the counters only, by ``SingleProcessCollective``:
one data-parallel process whose ``all_reduce`` either leaves a tensor as it is (the count
of this one shard) or writes the global total the harness gives (the count every rank would
see after ROLL's all-reduce), and records the local value it was handed (this shard's
share of the all-reduce).
"""

from __future__ import annotations

import ast
import importlib
import types
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import torch

from rlconform.adapters.base import SetupError


def _find(body: Sequence[ast.stmt], name: str) -> ast.stmt | None:
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name == name:
            return node
    return None


def source_function(root: Path, module: str, qualname: str, namespace: dict[str, Any]) -> Any:
    """The function ``qualname`` of ROLL's ``module`` compiled from its source file in the
    checkout ``root``.

    ``qualname`` walks classes and enclosing functions: ``ActorWorker.loss_func`` (a method
    comes back as a plain function taking ``self`` first) or ``batch_balance.calculate_workload``
    (a function nested in another; it must not read the enclosing function's locals).
    """
    origin = root.joinpath(*module.split(".")).with_suffix(".py")
    if not origin.is_file():
        raise SetupError(f"{origin} is not in the ROLL checkout: cannot bind {qualname}")
    tree = ast.parse(origin.read_text(encoding="utf-8"), filename=str(origin))
    body: Sequence[ast.stmt] = tree.body
    node: ast.stmt | None = None
    for part in qualname.split("."):
        node = _find(body, part)
        if node is None:
            raise SetupError(f"{origin}: {qualname} not found (ROLL changed: re-check the binding)")
        body = node.body
    if not isinstance(node, ast.FunctionDef):
        raise SetupError(f"{origin}: {qualname} is not a function")
    node = _undecorated(node)
    scope = dict(namespace, __name__=module)
    code = compile(ast.Module(body=[node], type_ignores=[]), str(origin), "exec")
    exec(code, scope)  # noqa: S102 - ROLL's own source, compiled unchanged
    return scope[node.name]


def _undecorated(node: ast.FunctionDef) -> ast.FunctionDef:
    """Drop decorators that only register a method with ROLL's ray dispatcher
    (``@register(...)``); ``torch.no_grad`` and the like are kept."""
    kept = [
        d
        for d in node.decorator_list
        if not (isinstance(d, ast.Call) and getattr(d.func, "id", None) == "register")
    ]
    node.decorator_list = kept
    return node


class SingleProcessCollective:
    """``torch.distributed`` for ROLL's counters in one data-parallel process.

    ``totals``: the values successive ``all_reduce`` calls write into their tensor (the
    mini-batch totals every rank sees after the all-reduce); None leaves each tensor as it is
    (one rank holding the whole mini-batch). ``shares`` records what each call was handed.
    """

    class ReduceOp:
        SUM = "sum"
        MAX = "max"

    def __init__(self, totals: Sequence[int] | None = None):
        self._totals: Iterator[int] | None = iter(totals) if totals is not None else None
        self.shares: list[int] = []

    def all_reduce(self, tensor: torch.Tensor, op: Any = None, group: Any = None) -> None:
        self.shares.append(int(tensor.item()))
        if self._totals is not None:
            tensor.fill_(next(self._totals))


def rank_info(cp_size: int = 1, dp_size: int = 1) -> types.SimpleNamespace:
    """The ``worker.rank_info`` a strategy method reads (no context parallelism)."""
    return types.SimpleNamespace(cp_size=cp_size, cp_rank=0, dp_size=dp_size, dp_rank=0)


def _functionals() -> types.ModuleType:
    return importlib.import_module("roll.utils.functionals")


def _namespaces() -> dict[str, tuple[str, str, Any]]:
    """key -> (module, qualname, globals factory) of every function compiled from source."""
    import numpy as np

    def actor_globals() -> dict[str, Any]:
        f = _functionals()
        corrections = importlib.import_module("roll.utils.train_infer_corrections")
        return {
            "torch": torch,
            "np": np,
            "masked_mean": f.masked_mean,
            "agg_loss": f.agg_loss,
            "compute_approx_kl": f.compute_approx_kl,
            "compute_train_infer_correction": corrections.compute_train_infer_correction,
            "DataProto": importlib.import_module("roll.distributed.scheduler.protocol").DataProto,
        }

    def agentic_actor_globals() -> dict[str, Any]:
        agentic = importlib.import_module("roll.pipeline.agentic.utils")
        return {
            **actor_globals(),
            "compute_segment_masked_mean": agentic.compute_segment_masked_mean,
        }

    def base_worker_globals() -> dict[str, Any]:
        f = _functionals()
        return {
            "torch": torch,
            "masked_mean": f.masked_mean,
            "agg_loss": f.agg_loss,
            "compute_approx_kl": f.compute_approx_kl,
            "current_platform": importlib.import_module("roll.platforms").current_platform,
            "DataProto": importlib.import_module("roll.distributed.scheduler.protocol").DataProto,
        }

    def strategy_globals() -> dict[str, Any]:
        constants = importlib.import_module("roll.utils.constants")
        return {
            "torch": torch,
            "dist": SingleProcessCollective(),
            "IGNORE_INDEX": constants.IGNORE_INDEX,
            "log_probs_from_logits": _functionals().log_probs_from_logits,
            "entropy_from_logits": _functionals().entropy_from_logits,
            "DataProto": importlib.import_module("roll.distributed.scheduler.protocol").DataProto,
        }

    strategy = "roll.distributed.strategy.strategy"
    fsdp2 = "roll.distributed.strategy.fsdp2_strategy"
    return {
        "batch_num_tokens": (strategy, "InferenceStrategy._get_batch_num_tokens", strategy_globals),
        "global_valid_samples": (
            strategy,
            "InferenceStrategy._get_global_valid_samples",
            strategy_globals,
        ),
        "fsdp2_log_probs": (fsdp2, "FSDP2InferStrategy.op_compute_log_probs", strategy_globals),
        "fsdp2_entropy": (fsdp2, "FSDP2InferStrategy.op_compute_entropy", strategy_globals),
        "rlvr_actor_loss": (
            "roll.pipeline.rlvr.actor_worker",
            "ActorWorker.loss_func",
            actor_globals,
        ),
        "rlvr_sample_weights": (
            "roll.pipeline.rlvr.actor_worker",
            "ActorWorker.compute_sample_weights",
            actor_globals,
        ),
        "agentic_actor_loss": (
            "roll.pipeline.agentic.agentic_actor_worker",
            "ActorWorker.loss_func",
            agentic_actor_globals,
        ),
        "old_log_probs": (
            "roll.pipeline.base_worker",
            "ActorWorker.get_old_log_probs_with_cache",
            base_worker_globals,
        ),
        "critic_loss": ("roll.pipeline.base_worker", "CriticWorker.loss_func", base_worker_globals),
        "critic_values": (
            "roll.pipeline.base_worker",
            "CriticWorker.forward_func_values",
            base_worker_globals,
        ),
        "balance_workload": (
            "roll.utils.functionals",
            "batch_balance.calculate_workload",
            lambda: {"torch": torch},
        ),
    }


#: Qualified ROLL names of the compiled functions, for ``Target.bindings``.
QUALNAMES: dict[str, str] = {key: f"{m}.{q}" for key, (m, q, _) in _namespaces().items()}


class RollSources:
    """The compiled functions of the checkout ``root``, built on first use."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self._cache: dict[str, Any] = {}
        self._errors: dict[str, str] = {}

    def prepare(self) -> None:
        """Compile every function now, against the ROLL modules imported from ``root`` (a
        later import of another checkout must not change what these functions see); one
        that cannot be compiled raises its reason when used."""
        for key, (module, qualname, make_globals) in _namespaces().items():
            try:
                self._cache[key] = source_function(self.root, module, qualname, make_globals())
            except Exception as exc:  # noqa: BLE001 - reported by get()
                self._errors[key] = f"{type(exc).__name__}: {exc}"

    def get(self, key: str) -> Any:
        if key not in self._cache:
            if key not in self._errors:
                self.prepare()
            if key in self._errors:
                raise RuntimeError(f"cannot compile ROLL's {QUALNAMES[key]}: {self._errors[key]}")
        return self._cache[key]

    def counter(self, key: str, collective: SingleProcessCollective) -> Any:
        """A strategy counter (``batch_num_tokens`` / ``global_valid_samples``) whose
        ``torch.distributed`` is ``collective``."""
        fn = self.get(key)
        fn.__globals__["dist"] = collective
        return fn

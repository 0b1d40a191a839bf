"""The implementation protocol: targets, profiles and deviation manifests.

A *target* is any object whose methods are named after contract operations (see
``OPERATIONS``) and work in the canonical padded layout: responses right-padded, prompts
left-padded, batches as ``TensorDict`` or keyword tensors. A target that lacks an
operation gets ``skip`` ("not implemented by target") on every clause that needs it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any


class SetupError(Exception):
    """A usage or setup problem: the CLI prints the message and exits 2."""


class Unsupported(NotImplementedError):
    """Raised by an operation for a variant the framework does not offer (e.g. a loss
    aggregation mode it lacks): the clause is skipped, "not implemented by target"."""


@dataclasses.dataclass(frozen=True)
class Profile:
    """Legitimate parameters a framework chooses (CONTRACT: "profile").

    Every field is a choice the contract allows; the oracle receives it as a keyword.
    ``extra`` holds area-specific choices (documented at the clause that reads them).
    """

    name: str = "default"
    dtype: str = "float32"
    grpo_std_ddof: int = 1
    grpo_eps: float = 1e-6
    grpo_singleton: str = "mean0_std1"
    rloo_singleton: str = "score"
    kl_ref_clamp: float | None = 20.0
    k3_value_clamp: float | None = 10.0
    reward_nonaction_tail: str = "last_token"
    extra: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def get(self, key: str, default: Any = None) -> Any:
        if hasattr(self, key) and key not in ("extra", "get", "as_dict"):
            return getattr(self, key)
        return self.extra.get(key, default)

    def as_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["extra"] = dict(self.extra)
        return data


@dataclasses.dataclass(frozen=True)
class Deviation:
    """A declared deviation limited to the cases its ``scope`` names.

    ``scope`` lists names from ``rlconform.conformance.scopes.SCOPES`` (e.g.
    ``"padding_garbage"``, ``"empty_response"``); the clause must still pass on every case
    outside it. A plain string in a manifest means the whole clause deviates.
    """

    rationale: str
    scope: tuple[str, ...] = ()

    def __str__(self) -> str:
        if not self.scope:
            return self.rationale
        return f"{self.rationale} [scope: {', '.join(self.scope)}]"


class Target:
    """Base class for adapters. Subclasses define methods named after operations.

    Attributes a subclass sets: ``name``, ``version``, ``profile`` (a ``Profile``),
    ``deviations`` (clause id -> one-line rationale) and ``device``.
    """

    name: str = "unnamed"
    version: str = "0"
    profile: Profile = Profile()
    deviations: Mapping[str, str | Deviation] = {}
    device: str = "cpu"

    def implements(self, op: str) -> bool:
        return callable(getattr(self, op, None))

    def describe(self) -> dict[str, str]:
        return {"name": self.name, "version": str(self.version), "profile": self.profile.name}


def with_overrides(target: Target, name: str | None = None, **ops: Callable[..., Any]) -> Target:
    """Return a copy of ``target`` whose listed operations are replaced (used for mutants).

    Each replacement receives the original target as its first argument, so a mutant can
    delegate to the correct operation and break only one thing.
    """
    base_cls = type(target)
    namespace: dict[str, Any] = {}
    for op_name, fn in ops.items():
        if fn is None:
            namespace[op_name] = None
        else:
            namespace[op_name] = _bind_override(fn)
    namespace["__reduce__"] = _reduce_variant
    variant_cls = type(f"{base_cls.__name__}Variant", (base_cls,), namespace)
    variant = object.__new__(variant_cls)
    variant.__dict__.update(target.__dict__)
    variant._original = target
    variant._overrides = (name, dict(ops))
    if name is not None:
        variant.name = name
    return variant


def _bind_override(fn: Callable[..., Any]) -> Callable[..., Any]:
    def method(self: Target, *args: Any, **kwargs: Any) -> Any:
        return fn(self._original, *args, **kwargs)

    method.__name__ = getattr(fn, "__name__", "override")
    return method


def _reduce_variant(self: Target) -> tuple[Any, ...]:
    """Pickle a ``with_overrides`` variant as its recipe (for spawned gloo workers)."""
    name, ops = self._overrides
    return (_rebuild_variant, (self._original, name, ops))


def _rebuild_variant(target: Target, name: str | None, ops: dict[str, Any]) -> Target:
    return with_overrides(target, name, **ops)

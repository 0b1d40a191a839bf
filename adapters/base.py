"""The implementation protocol: targets, profiles and deviation manifests.

A *target* is any object whose methods are named after contract operations (the clause
modules document each operation's signature) and work in the canonical padded layout: responses right-padded, prompts
left-padded, batches as ``TensorDict`` or keyword tensors. A target that lacks an
operation gets ``skip`` ("not implemented by target") on every clause that needs it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

# The policy-loss modes of the ``policy_loss_reduced`` operation (a loss reduced to its
# scalar the way the trainer reduces it): the per-token operation of each, and whether it
# takes ``clip_ratio_c``.
POLICY_LOSS_OPS: dict[str, tuple[str, bool]] = {
    "ppo_clip": ("ppo_clip_loss", False),
    "dual_clip": ("ppo_clip_loss", True),
    "gspo": ("gspo_loss", False),
    "gmpo": ("gmpo_loss", False),
    "cispo": ("cispo_loss", False),
    "dppo_tv": ("dppo_tv_loss", True),
}


class SetupError(Exception):
    """A usage or setup problem: the CLI prints the message and exits 2."""


class Unsupported(NotImplementedError):
    """Raised by an operation for a variant the framework does not offer (e.g. a loss
    aggregation mode it lacks). Every case that asks for it is skipped; when no case of a
    clause is left, the clause is skipped ("not implemented by target")."""


class Inexpressible(ValueError):
    """Raised by an adapter for one input its framework's signature cannot express (e.g.
    unequal groups for an API that takes a ``(groups, n)`` grid, a bootstrap value a GAE
    without one cannot take). That case only is skipped and counted; the clause goes on
    with every other case, so an unrelated break in it still shows. The message says why."""


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
        if hasattr(self, key) and key not in ("extra", "get", "as_dict", "choices"):
            return getattr(self, key)
        return self.extra.get(key, default)

    def as_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["extra"] = dict(self.extra)
        return data

    def choices(self) -> dict[str, Any]:
        """Every choice as one flat mapping (``extra`` merged in): what the oracle's
        composed functions (oracle.step) take as ``choices``."""
        data = self.as_dict()
        extra = data.pop("extra")
        return {**data, **extra}


# Old scope names (before CONTRACT §0a) and the feature ids that replace them.
_LEGACY_SCOPES: dict[str, tuple[str, ...]] = {
    "padding_garbage": ("padding_finite", "padding_nonfinite", "overflow", "padding_rewards"),
    "zero_width_response": ("zero_width",),
    "no_tokens": ("empty_batch", "no_samples"),
    "no_action_sample": ("empty_response", "actionless_sample"),
}


@dataclasses.dataclass(frozen=True)
class Deviation:
    """A declared break: failures of ``checks`` on cases with any of ``features``.

    ``checks`` names assertions of the clause (``rlconform clauses --checks`` lists them;
    every clause also has ``runs``, ``no_mutation`` and ``deterministic``); ``features`` are
    CONTRACT §0a feature ids (empty: any case). A failure of another check, or of a covered
    check on a case without any of the features, is still reported as a new failure; an
    entry that is never observed is stale (``fail``). Without ``checks`` the entry covers the
    whole clause: allowed for a user's own adapter, never in a shipped baseline.
    ``scope`` is the pre-§0a name of ``features`` (old scope names are translated).
    ``configs`` (step clauses) limits the entry to failures under those trainer configs.
    ``model`` (profile key -> value) says what the framework does instead: a covered failure
    is excused only when the same check passes on the same case with the profile so
    overridden (``conformance/baseline.py``). ``fingerprint`` pins an entry without
    features or model to what the target returned on its minimal case. ``composition``
    (step clauses) says the break is in how the trainer composes its operations (a score
    placed where the next stage drops it): no operation's own clause shows it, so a step case
    it covers is not evidence of any operation's finding (``conformance/consequence.py``).
    ``covers`` is the scope test; the runner then asks the entry's features (or model) to
    explain the failing case.
    """

    rationale: str
    checks: tuple[str, ...] = ()
    features: tuple[str, ...] = ()
    scope: dataclasses.InitVar[tuple[str, ...] | None] = None
    configs: tuple[str, ...] = ()
    model: tuple[tuple[str, Any], ...] = ()
    # (case as JSON text, digest of the target's outputs on it): conformance/fingerprint.py
    fingerprint: tuple[str, str] | tuple[()] = ()
    composition: bool = False

    def __post_init__(self, scope: tuple[str, ...] | None) -> None:
        object.__setattr__(self, "checks", tuple(self.checks))
        object.__setattr__(self, "configs", tuple(self.configs))
        model = self.model.items() if isinstance(self.model, Mapping) else self.model
        object.__setattr__(self, "model", tuple(sorted((str(k), v) for k, v in model)))
        object.__setattr__(self, "fingerprint", tuple(self.fingerprint))
        features = list(self.features)
        for name in scope or ():
            for feature in _LEGACY_SCOPES.get(name, (name,)):
                if feature not in features:
                    features.append(feature)
        object.__setattr__(self, "features", tuple(features))

    @property
    def whole_clause(self) -> bool:
        return not self.checks

    def covers(
        self, check: str | None, features: frozenset[str], config: str | None = None
    ) -> bool:
        """True when a failure of ``check`` on a case with ``features`` (under trainer config
        ``config``, for a step clause) is this break."""
        if self.checks and check not in self.checks:
            return False
        if self.configs and config not in self.configs:
            return False
        return not self.features or bool(features & set(self.features))

    def __str__(self) -> str:
        parts = []
        if self.checks:
            parts.append("checks: " + ", ".join(self.checks))
        if self.features:
            parts.append("features: " + ", ".join(self.features))
        if self.model:
            parts.append("model: " + ", ".join(f"{k}={v!r}" for k, v in self.model))
        return f"{self.rationale} [{'; '.join(parts)}]" if parts else self.rationale


def deviation_entries(declared: Any) -> list[Deviation]:
    """A manifest value (a rationale string, a Deviation or a list of them) as entries."""
    if declared is None:
        return []
    if isinstance(declared, str):
        return [Deviation(declared)]
    if isinstance(declared, Deviation):
        return [declared]
    return [entry if isinstance(entry, Deviation) else Deviation(str(entry)) for entry in declared]


class Target:
    """Base class for adapters. Subclasses define methods named after operations.

    Attributes a subclass sets: ``name``, ``version``, ``profile`` (a ``Profile``),
    ``deviations`` (clause id -> a Deviation, a list of them, or a one-line rationale for the
    whole clause) and ``device``. ``bindings`` (optional) maps an operation to the framework
    function(s) it calls and the trainer path that runs them, for the report.
    """

    name: str = "unnamed"
    version: str = "0"
    profile: Profile = Profile()
    deviations: Mapping[str, str | Deviation | Sequence[Deviation]] = {}
    device: str = "cpu"
    bindings: Mapping[str, Any] = {}
    # operations the trainer runs under options (or on passes) no step config covers, whose
    # ``bindings`` path names the option: their findings are unmeasured, not unreached
    # (``conformance.consequence.unbound``; ``step_unbound_ops`` maps an operation to the
    # option where the path does not name it)
    step_unbound: tuple[str, ...] = ()

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

"""What a clause check receives: the target, its profile, dtype, device and a guarded call.

Every call a check makes to the target goes through ``CheckContext.call``, the one place
where the engine checks purity on every operation: the arguments must be bit-identical
after the call (check ``no_mutation``), and on the pinned examples a second call must give
a bit-identical output (check ``deterministic``). ``with ctx.check(name):`` names the
assertions inside a check; a failure a declared deviation covers is recorded there and the
check goes on, so another break in the same clause still shows.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from typing import Any

import torch

from rlconform.adapters.base import Profile, Target
from rlconform.conformance import phases
from rlconform.conformance.compare import Tolerance, tolerance_for
from rlconform.conformance.errors import (
    BindingDefect,
    ClauseMismatch,
    TargetError,
    binding_defect,
)
from rlconform.conformance.harness import torch_dtype
from rlconform.conformance.snapshot import describe, first_difference, snapshot


class Observer:
    """What the runner plugs into a context: decides whether a failure is a declared
    deviation (then records it and returns True)."""

    def tolerate(self, failure: ClauseMismatch | TargetError) -> bool:
        return False


@dataclasses.dataclass
class CheckContext:
    """Everything a clause check needs to call the target and compare its output."""

    target: Target
    device: str = "cpu"
    seed: int = 0
    clause_id: str = ""
    observer: Observer = dataclasses.field(default_factory=Observer)
    case_features: frozenset[str] = frozenset()
    pinned: bool = False
    returned: int = 0  # calls into the target that returned (did not raise)
    trainer_config: str | None = None  # the step config a step clause is checking now
    # profile values that replace the target's (a baseline entry's model, a profile hint)
    profile_overrides: tuple[tuple[str, Any], ...] = ()
    # when a list: every output the target returns is snapshotted into it (fingerprints)
    recorder: list[Any] | None = None
    # when a list: every call into the target, (op, args, kwargs) as it received them
    calls: list[tuple[str, tuple, dict]] | None = None
    _in_place: int = 0

    @property
    def profile(self) -> Profile:
        if not self.profile_overrides:
            return self.target.profile
        return overridden(self.target.profile, dict(self.profile_overrides))

    @property
    def dtype(self) -> torch.dtype:
        return torch_dtype(self.profile.dtype)

    @property
    def tolerance(self) -> Tolerance:
        return tolerance_for(self.profile.dtype)

    @contextlib.contextmanager
    def check(self, name: str) -> Iterator[None]:
        """Name the assertions in the block ``name``; a failure a declared deviation covers
        is recorded and the check continues after the block."""
        try:
            yield
        except ClauseMismatch as failure:
            if failure.check is None:
                failure.check = name
            if self.trainer_config is not None and isinstance(failure.detail, dict):
                failure.detail.setdefault("config", self.trainer_config)
            if not self.observer.tolerate(failure):
                raise

    @contextlib.contextmanager
    def in_place(self) -> Iterator[None]:
        """Calls in the block may modify their arguments: the profile documents the
        operation as working in place (e.g. verl's ``DataProto.union``)."""
        self._in_place += 1
        try:
            yield
        finally:
            self._in_place -= 1

    def call(self, op: str, *args: Any, **kwargs: Any) -> Any:
        """Call the target's ``op``; any exception it raises becomes a TargetError.

        The arguments must be unchanged afterwards (``no_mutation``); on a pinned example a
        second call must return the same output (``deterministic``).
        """
        fn = getattr(self.target, op)
        self._note_call(op, args, kwargs)
        guarded = not self._in_place
        before = snapshot((args, kwargs)) if guarded else None
        output = self._invoke(op, fn, args, kwargs)
        if self.recorder is not None:
            self.recorder.append(snapshot(output))
        if not guarded:
            return output
        self._purity_failure(
            op, "no_mutation", before, snapshot((args, kwargs)), "modified its input"
        )
        if self.pinned:
            first = snapshot(output)
            again = self._invoke(op, fn, args, kwargs)
            self._purity_failure(
                op,
                "deterministic",
                first,
                snapshot(again),
                "returned a different output on a second call",
            )
        return output

    def call_built(self, op: str, build: Any, read: Any) -> Any:
        """Call ``op`` on arguments ``build()`` makes, and return ``read(output, args,
        kwargs)``: for operations whose result lives partly in their arguments (the step's
        gradients in its leaf tensors). Purity as ``call``: the arguments are unchanged after
        the call; on a pinned example a second call on freshly built arguments must read the
        same. A ``state`` keyword is the target's own carried state (its controller
        object), which it may update: it is not an input the purity check guards."""
        fn = getattr(self.target, op)
        args, kwargs = build()
        self._note_call(op, args, kwargs)
        before = snapshot((args, _owned(kwargs)))
        result = read(self._invoke(op, fn, args, kwargs), args, kwargs)
        if self.recorder is not None:
            self.recorder.append(snapshot(result))
        self._purity_failure(
            op, "no_mutation", before, snapshot((args, _owned(kwargs))), "modified its input"
        )
        if self.pinned:
            again_args, again_kwargs = build()
            again = read(self._invoke(op, fn, again_args, again_kwargs), again_args, again_kwargs)
            self._purity_failure(
                op,
                "deterministic",
                snapshot(result),
                snapshot(again),
                "returned a different output on a second call",
            )
        return result

    def _note_call(self, op: str, args: tuple, kwargs: dict) -> None:
        if self.calls is None:
            return
        import copy

        try:
            self.calls.append((op, *copy.deepcopy((args, kwargs))))
        except Exception:  # an argument that cannot be copied: the call is not written out
            self.calls.append((op, (object(),), {}))

    def _invoke(self, op: str, fn: Any, args: tuple, kwargs: dict) -> Any:
        try:
            with phases.phase("target"):
                output = fn(*args, **kwargs)
        except Exception as exc:  # the implementation's failure, whatever its type
            why = binding_defect(exc)
            if why is not None:  # ... unless rlconform's own binding broke
                raise BindingDefect(op, exc, why) from exc
            raise TargetError(op, exc) from exc
        self.returned += 1
        return output

    def _purity_failure(self, op: str, check: str, before: Any, after: Any, verb: str) -> None:
        found = first_difference(before, after)
        if found is None:
            return
        path, expected, actual = found
        where, uid = describe(path, before, call=check == "no_mutation")
        sample = f" (sample uid={uid!r})" if uid is not None else ""
        clause = f"[{self.clause_id}] " if self.clause_id else ""
        contract = "purity.no_mutation" if check == "no_mutation" else "purity.deterministic"
        failure = ClauseMismatch(
            f"{clause}{op} {verb} at {where}{sample}: before {expected!r}, after {actual!r} "
            f"({contract}: every operation)",
            detail={"what": f"{op} {where}", "expected": expected, "actual": actual},
            check=check,
        )
        if not self.observer.tolerate(failure):
            raise failure

    def floats(self, rows: Any, *, fill: float = 0.0, width: int | None = None) -> torch.Tensor:
        """Ragged float rows as a right-padded tensor in the target's dtype and device."""
        from rlconform.conformance.harness import pad_right

        return pad_right(rows, width=width, fill=fill, dtype=self.dtype, device=self.device)


def overridden(profile: Profile, values: dict[str, Any]) -> Profile:
    """``profile`` with ``values`` in place of its own (fields, else ``extra`` keys)."""
    fields = {f.name for f in dataclasses.fields(profile)} - {"extra", "name"}
    direct = {k: v for k, v in values.items() if k in fields}
    extra = {**profile.extra, **{k: v for k, v in values.items() if k not in fields}}
    return dataclasses.replace(profile, **direct, extra=extra)


def _owned(kwargs: dict) -> dict:
    """The keyword arguments without ``state`` (state the target carries and may update)."""
    return {k: v for k, v in kwargs.items() if k != "state"}

"""Clauses of the CONTRACT area `purity`, checked on every operation that has a *probe*.

A probe tells the purity clauses how to call one operation from a drawn ``purity_case``
(see ``purity_case`` for its fields). Any area registers one with a decorated builder::

    from rlconform.conformance.clauses.purity import Call, purity_probe

    @purity_probe("place_reward_last", rows=reward_rows)
    def probe_place_reward_last(ctx, case) -> Call:
        return Call(args=(scores, response_mask, loss_mask), uids=cs.uids_of(case))

``rows(case, output)`` (for purity.order) maps the output to ``{uid: that sample's part}``
(plus any batch-level entries under non-uid keys); ``again(call, output)`` (for
purity.idempotent) is the call that re-applies the operation to its own output, and
``result(output)`` the part of the output that must then be unchanged. A probe of an
operation that takes a seed passes ``case["seed"]``; purity.deterministic calls it twice
with the same one. A probe whose operation the target lacks is not run; a clause with no
runnable probe is skipped ("not implemented by target").
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable
from typing import Any

import torch
from hypothesis import strategies as st

from rlconform.conformance import strategies as cs
from rlconform.conformance.features import allows
from rlconform.conformance.harness import pad_right, right_mask, unpad_right
from rlconform.conformance.registry import clause
from rlconform.conformance.snapshot import assert_same_output, freeze
from rlconform.oracle import schema as oracle_schema
from rlconform.oracle.schema import STATUSES


@dataclasses.dataclass
class Call:
    """One call of an operation: its arguments and the sample uid of each tensor row."""

    args: tuple = ()
    kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    uids: list[Any] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(frozen=True)
class Probe:
    """How the purity clauses call ``op`` (see the module docstring)."""

    op: str
    build: Callable[[Any, dict[str, Any]], Call]
    rows: Callable[[dict[str, Any], Any], dict[Any, Any]] | None = None
    again: Callable[[Call, Any], Call] | None = None
    result: Callable[[Any], Any] | None = None


PROBES: dict[str, Probe] = {}


def purity_probe(
    op: str,
    *,
    rows: Callable[[dict[str, Any], Any], dict[Any, Any]] | None = None,
    again: Callable[[Call, Any], Call] | None = None,
    result: Callable[[Any], Any] | None = None,
) -> Callable[[Callable[[Any, dict[str, Any]], Call]], Callable[[Any, dict[str, Any]], Call]]:
    """Register ``build(ctx, case) -> Call`` as the purity probe of operation ``op``."""

    def register(
        build: Callable[[Any, dict[str, Any]], Call],
    ) -> Callable[[Any, dict[str, Any]], Call]:
        if op in PROBES:
            raise ValueError(f"a purity probe for {op!r} is registered twice")
        PROBES[op] = Probe(op, build, rows, again, result)
        return build

    return register


# ---------------------------------------------------------------------------------------
# The drawn case every probe builds its call from.


# Offsets of old / ref log-probs from logp: equal, small, and (edge) an extreme log-ratio.
_SHIFTS = (0.0, -0.5, 0.25)
_EXTREME_SHIFT = -25.0


@st.composite
def purity_case(draw: Any) -> dict[str, Any]:
    """1-5 samples; each sample has token_batch fields (uid, group, mask, per-token float
    lists values / logp / old / ref, old and ref being logp shifted by a drawn offset, at
    edge up to an extreme log-ratio of 25; a float reward on a 0.25 grid so that batch sums
    are exact in any order) and canonical rollout fields (prompt_ids, response_ids,
    rollout_logprobs, loss_mask, status, weight_version, data_source). The case also has
    pad_value, extra_pad, a seed and a permutation ``perm`` of the sample indices
    (purity.order). Below edge: groups of two or more with distinct rewards, L_i > 0.
    purity.order compares floats within the dtype tolerance without a conditioning scale:
    a probe of an ill-conditioned batch reduction should feed it well-conditioned inputs."""
    n = draw(st.integers(1 if allows("edge") else 2, 5))
    groups = draw(cs.group_labels(n))
    rewards = [draw(st.integers(-12, 12)) / 4 for _ in range(n)]
    if not allows("edge"):
        cs.separate_equal_groups(rewards, groups)
    shifts = st.sampled_from(_SHIFTS + ((_EXTREME_SHIFT,) if allows("edge") else ()))
    samples = []
    for i in range(n):
        length = draw(cs.lengths())
        mask = draw(cs.loss_mask(length))

        def floats(lo: float, hi: float, size: int = length) -> list[float]:
            return draw(st.lists(cs.finite(lo, hi), min_size=size, max_size=size))

        logp = floats(-8.0, 0.0)
        old_shift, ref_shift = draw(shifts), draw(shifts)
        samples.append(
            {
                "uid": f"s{i}",
                "group": groups[i],
                "mask": mask,
                "values": floats(-5.0, 5.0),
                "logp": logp,
                "old": [x + old_shift for x in logp],
                "ref": [x + ref_shift for x in logp],
                "reward": rewards[i],
                "prompt_ids": draw(st.lists(st.integers(0, 9), max_size=3)),
                "response_ids": draw(st.lists(st.integers(0, 9), min_size=length, max_size=length)),
                "rollout_logprobs": [x + ref_shift for x in logp],
                "loss_mask": list(mask),
                "status": draw(st.sampled_from(("completed", "completed") + STATUSES)),
                "weight_version": draw(st.integers(0, 3)),
                "data_source": draw(st.sampled_from(["math", "code"])),
            }
        )
    empty = not any(s["mask"] for s in samples)
    return {
        "samples": samples,
        "pad_value": draw(cs.pad_values()),
        "extra_pad": draw(st.integers(1 if empty and not allows("hardening") else 0, 2)),
        "seed": draw(st.integers(0, 2**16)),
        "perm": draw(st.permutations(range(n))),
    }


# The §0a features of a purity case, read by the walker.
PURITY_FEATURES = (
    "mask_holes",
    "padding_finite",
    "padding_nonfinite",
    "overflow",
    "unequal_groups",
    "singleton_group",
    "equal_scores",
    "empty_response",
    "actionless_sample",
    "extra_padding",
    "extreme_log_ratio",
    "truncated_sample",
    "zero_width",
)


def _pinned_sample(
    uid: str, group: str, mask: list[int], reward: float, status: str, logp: list[float]
) -> dict[str, Any]:
    """A purity_case sample for a pinned example (the case itself stays plain data)."""
    return {
        "uid": uid,
        "group": group,
        "mask": mask,
        "values": [1.0 + 0.00001 * t for t in range(len(mask))],
        "logp": logp,
        "old": [x - 0.5 for x in logp],
        "ref": [x + 1.0 for x in logp],
        "reward": reward,
        "prompt_ids": [4, 5][: len(uid) % 3],
        "response_ids": [int(uid[1:]) + t for t in range(len(mask))],
        "rollout_logprobs": [x - 0.5 for x in logp],
        "loss_mask": list(mask),
        "status": status,
        "weight_version": 1,
        "data_source": "math",
    }


_PURITY_EXAMPLES = (
    # L_i = 0 next to a full row, NaN padding, a group of one and a pair, extreme log-probs.
    {
        "samples": [
            _pinned_sample("s0", "g0", [], 1.0, "aborted", []),
            _pinned_sample("s1", "g1", [1, 0, 1], 2.0, "completed", [-0.1, -2.0, -30.0]),
            _pinned_sample("s2", "g1", [1, 1, 1, 1, 1, 1], -1.5, "truncated", [-100.0] * 6),
        ],
        "pad_value": float("nan"),
        "extra_pad": 2,
        "seed": 3,
        "perm": [2, 0, 1],
    },
    # Two interleaved groups, all kept: a grouping by position instead of by label differs
    # between the two orders.
    {
        "samples": [
            _pinned_sample(f"s{i}", f"g{i % 2}", [1, 1], reward, "completed", [-1.0, -2.0])
            for i, reward in enumerate([0.0, 1.0, -0.5, 2.5])
        ],
        "pad_value": 7.5,
        "extra_pad": 0,
        "seed": 3,
        "perm": [0, 2, 1, 3],
    },
)


def permuted(case: dict[str, Any]) -> dict[str, Any]:
    """The same case with its samples in the order ``case["perm"]``."""
    return {**case, "samples": [case["samples"][i] for i in case["perm"]]}


def _each_probe(ctx: Any, need: str | None, body: Callable[[Probe], None]) -> None:
    """Run ``body`` for every probe of the target. A probe whose call the target cannot make
    for this case (``Unsupported`` / ``Inexpressible``), or whose operation raises on it, is
    left out and the others still run: an operation that raises on a valid input is a
    ``runs`` finding of that operation's own clause, never a purity fault. The case is
    skipped when no probe could run."""
    from rlconform.adapters.base import Inexpressible, Unsupported
    from rlconform.conformance.errors import TargetError

    runnable, skipped = _runnable(ctx.target, need), []
    for probe in runnable:
        try:
            body(probe)
        except TargetError as error:
            skipped.append(error)
    if runnable and len(skipped) == len(runnable):
        last = skipped[-1]
        if isinstance(last.original, (Unsupported, Inexpressible)):
            raise last
        raise TargetError(
            last.op,
            Inexpressible(
                f"every purity probe's operation raised on this case ({last.summary}); "
                "that is reported under the operation's own clause"
            ),
        ) from None


def _runnable(target: Any, need: str | None = None) -> list[Probe]:
    probes = [p for p in PROBES.values() if target.implements(p.op)]
    if need is not None:
        probes = [p for p in probes if getattr(p, need) is not None]
    return probes


def _applies(need: str | None = None) -> Callable[[Any], str | None]:
    def applies(target: Any) -> str | None:
        return None if _runnable(target, need) else "not implemented by target"

    return applies


# ---------------------------------------------------------------------------------------
# Clauses


@clause(
    "purity.no_mutation",
    title="No operation mutates its inputs",
    statement="""Inputs (tensors, lists, dicts, TensorDicts) are bit-identical after the call
    (NaN-aware): every probed operation is called on inputs the engine snapshots before and
    compares afterwards (check no_mutation, made on every call of every clause).""",
    ops=(),
    strategy=purity_case(),
    examples=_PURITY_EXAMPLES,
    applies=_applies(),
    meets=PURITY_FEATURES,
)
def check_no_mutation(ctx: Any, case: dict[str, Any]) -> None:
    def probe_once(probe: Probe) -> None:
        call = probe.build(ctx, case)
        ctx.call(probe.op, *call.args, **call.kwargs)

    _each_probe(ctx, None, probe_once)


@clause(
    "purity.idempotent",
    title="Normalisation and filtering applied twice equal applied once",
    statement="""For every probed normalising or filtering operation, applying it to its own
    output changes nothing: normalize(normalize(x)) == normalize(x), and filtering the kept
    samples again keeps all of them, unchanged and in order (with the optional outlier filter
    off: z-scores change once outliers are gone).""",
    ops=(),
    strategy=purity_case(),
    examples=_PURITY_EXAMPLES,
    applies=_applies("again"),
    checks=("idempotent",),
    meets=PURITY_FEATURES,
)
def check_idempotent(ctx: Any, case: dict[str, Any]) -> None:
    _each_probe(ctx, "again", lambda probe: _idempotent(ctx, case, probe))


def _idempotent(ctx: Any, case: dict[str, Any], probe: Probe) -> None:
    call = probe.build(ctx, case)
    once = ctx.call(probe.op, *call.args, **call.kwargs)
    repeat = probe.again(call, once)
    twice = ctx.call(probe.op, *repeat.args, **repeat.kwargs)
    view = probe.result or (lambda output: output)
    with ctx.check("idempotent"):
        assert_same_output(
            "purity.idempotent",
            f"{probe.op} applied twice vs once",
            view(once),
            view(twice),
            uids=call.uids,
        )


@clause(
    "purity.deterministic",
    title="Same input and seed give bit-identical output",
    statement="""Every probed operation called twice on equal inputs (and the same seed, for
    an operation that takes one) returns bit-identical outputs; randomness only through an
    explicit seed.""",
    ops=(),
    strategy=purity_case(),
    examples=_PURITY_EXAMPLES,
    applies=_applies(),
    checks=("deterministic",),
    meets=PURITY_FEATURES,
)
def check_deterministic(ctx: Any, case: dict[str, Any]) -> None:
    _each_probe(ctx, None, lambda probe: _deterministic(ctx, case, probe))


def _deterministic(ctx: Any, case: dict[str, Any], probe: Probe) -> None:
    first_call, second_call = probe.build(ctx, case), probe.build(ctx, case)
    first = ctx.call(probe.op, *first_call.args, **first_call.kwargs)
    second = ctx.call(probe.op, *second_call.args, **second_call.kwargs)
    with ctx.check("deterministic"):
        assert_same_output(
            "purity.deterministic",
            f"{probe.op} run twice",
            first,
            second,
            uids=first_call.uids,
        )


@clause(
    "purity.order",
    title="Reordering inputs reorders outputs and nothing else",
    statement="""Outputs are traceable to inputs by uid: for every probed operation,
    permuting the input samples gives, for each uid, the same output as before (floats
    within the dtype tolerance, since a batch reduction may sum in another order), and
    the same batch-level values (with duplicate removal off: it keeps the first in input
    order).""",
    ops=(),
    strategy=purity_case(),
    examples=_PURITY_EXAMPLES,
    applies=_applies("rows"),
    checks=("order",),
    meets=PURITY_FEATURES,
)
def check_order(ctx: Any, case: dict[str, Any]) -> None:
    shuffled = permuted(case)
    _each_probe(ctx, "rows", lambda probe: _order(ctx, case, shuffled, probe))


def _order(ctx: Any, case: dict[str, Any], shuffled: dict[str, Any], probe: Probe) -> None:
    call = probe.build(ctx, case)
    call_shuffled = probe.build(ctx, shuffled)
    rows = probe.rows(case, ctx.call(probe.op, *call.args, **call.kwargs))
    rows_shuffled = probe.rows(
        shuffled, ctx.call(probe.op, *call_shuffled.args, **call_shuffled.kwargs)
    )
    with ctx.check("order"):
        assert_same_output(
            "purity.order",
            f"{probe.op} on samples permuted to {case['perm']} (per uid)",
            rows,
            rows_shuffled,
            tolerance=ctx.tolerance,
        )


# ---------------------------------------------------------------------------------------
# Probes for schema, filter and reward operations.

_CANONICAL_KEYS = (
    "uid",
    "group",
    "prompt_ids",
    "response_ids",
    "rollout_logprobs",
    "loss_mask",
    "reward",
    "status",
    "weight_version",
    "data_source",
)


def canonical_samples(case: dict[str, Any]) -> list[dict[str, Any]]:
    """The case's samples as canonical rollout samples (fresh lists)."""
    return [{key: copy.deepcopy(s[key]) for key in _CANONICAL_KEYS} for s in case["samples"]]


def _framework_records(ctx: Any, case: dict[str, Any]) -> Call:
    """Records spelled with framework aliases (and slime's packed tokens), so that a
    normaliser that renames in place is caught; each carries a nested metadata dict."""
    records = []
    for sample in canonical_samples(case):
        variant = _variant(sample, case)
        record: dict[str, Any] = {}
        for key, value in sample.items():
            names = (key,) + oracle_schema.ALIASES.get(key, ())
            record[names[variant % len(names)]] = value
        if variant % 4 == 1:
            for key in ("prompt_ids", "prompts", "response_ids", "responses", "completion_ids"):
                record.pop(key, None)
            record["tokens"] = sample["prompt_ids"] + sample["response_ids"]
            record["response_length"] = len(sample["response_ids"])
        record["metadata"] = {"turns": [1, 2], "tool": {"name": "python"}}
        records.append(record)
    return Call(args=(records,), uids=cs.uids_of(case))


def _records_by_uid(case: dict[str, Any], output: Any) -> dict[Any, Any]:
    return {record["uid"]: record for record in output}


@purity_probe(
    "normalize_samples",
    rows=_records_by_uid,
    again=lambda call, output: Call(args=(output,), uids=call.uids),
)
def probe_normalize_samples(ctx: Any, case: dict[str, Any]) -> Call:
    return _framework_records(ctx, case)


def _variant(sample: dict[str, Any], case: dict[str, Any]) -> int:
    """A per-sample choice that follows the sample (its uid), not its position."""
    return int(str(sample["uid"]).lstrip("s") or 0) + case["seed"]


def _misaligned_samples(case: dict[str, Any]) -> list[dict[str, Any]]:
    samples = canonical_samples(case)
    for sample in samples:
        if _variant(sample, case) % 3 == 0:
            if sample["rollout_logprobs"]:
                sample["rollout_logprobs"].pop()
            else:
                sample["loss_mask"].append(1)
    return samples


@purity_probe(
    "find_misaligned",
    rows=lambda case, output: {s["uid"]: s["uid"] in output for s in case["samples"]},
)
def probe_find_misaligned(ctx: Any, case: dict[str, Any]) -> Call:
    return Call(args=(_misaligned_samples(case),), uids=cs.uids_of(case))


# Duplicates are off: which of two identical responses is kept depends on input order
# (purity.order); the outlier filter is off (its default): z-scores change once the
# outliers are gone (purity.idempotent).
PURITY_FILTER_CONFIG = {
    "truncation_policy": "drop",
    "min_response_length": 1,
    "drop_duplicates": False,
    "drop_zero_variance_groups": True,
}


def _filter_input(case: dict[str, Any]) -> list[dict[str, Any]]:
    samples = canonical_samples(case)
    for sample in samples:
        if _variant(sample, case) % 5 == 2:
            sample["reward"] = None
    return samples


def _filter_rows(case: dict[str, Any], output: Any) -> dict[Any, Any]:
    rows: dict[Any, Any] = {s["uid"]: ("kept", s) for s in output["kept"]}
    rows.update({uid: ("dropped", reason) for uid, reason in output["dropped"].items()})
    rows["<stats>"] = output["stats"]
    return rows


@purity_probe(
    "filter_samples",
    rows=_filter_rows,
    again=lambda call, output: Call(args=(output["kept"], call.args[1]), uids=call.uids),
    result=lambda output: output["kept"],
)
def probe_filter_samples(ctx: Any, case: dict[str, Any]) -> Call:
    return Call(args=(_filter_input(case), dict(PURITY_FILTER_CONFIG)), uids=cs.uids_of(case))


@purity_probe("normalize_kept_rewards", rows=lambda case, output: dict(output))
def probe_normalize_kept_rewards(ctx: Any, case: dict[str, Any]) -> Call:
    scope = "group" if case["seed"] % 2 else "batch"
    config = {"truncation_policy": "drop", "drop_duplicates": False}
    return Call(args=(_filter_input(case), config), kwargs={"scope": scope}, uids=cs.uids_of(case))


def _batch_rows(case: dict[str, Any], output: Any) -> dict[Any, Any]:
    columns = {key: freeze(output.get(key)) for key in sorted(output.keys())}
    uid_column = columns.get("uid", [])
    uids = uid_column["<NonTensor>"] if isinstance(uid_column, dict) else list(uid_column)
    rows: dict[Any, Any] = {}
    for i, uid in enumerate(uids):
        row = {}
        for key, column in columns.items():
            if isinstance(column, torch.Tensor):
                row[key] = column[i].tolist()
            elif isinstance(column, dict) and "<NonTensor>" in column:
                row[key] = column["<NonTensor>"][i]
            else:
                row[key] = column[i]
        rows[uid] = row
    return rows


@purity_probe("build_batch", rows=_batch_rows)
def probe_build_batch(ctx: Any, case: dict[str, Any]) -> Call:
    return Call(args=(canonical_samples(case),), uids=cs.uids_of(case))


@purity_probe(
    "place_reward_last",
    rows=lambda case, output: dict(zip(cs.uids_of(case), unpad_right(output, cs.lengths_of(case)))),
)
def probe_place_reward_last(ctx: Any, case: dict[str, Any]) -> Call:
    samples = case["samples"]
    width = cs.width_of_case(case)
    scores = ctx.floats([[s["reward"]] for s in samples], width=1)[:, 0]
    response_mask = right_mask(cs.lengths_of(case), width, ctx.device)
    loss_mask = pad_right(
        [s["mask"] for s in samples], width=width, dtype=response_mask.dtype, device=ctx.device
    )
    return Call(args=(scores, response_mask, loss_mask), uids=cs.uids_of(case))

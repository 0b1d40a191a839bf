"""Clauses of the CONTRACT area `batch`: container union, row operations, padding to a
divisor, sequence-length balancing.

The target supplies its own container (verl: ``DataProto``) through two operations,
``batch_make(tensors, non_tensors, meta)`` and ``batch_read(container) -> (tensors,
non_tensors, meta)``; every other operation takes and returns containers. A case holds one
plain batch: per row a uid, a float ``score``, a fixed-width int row ``ids``, a ragged
float row ``logp`` (L_i log-probs, right-padded to the width with the batch's
``pad_value``: 0, finite garbage, or NaN/inf at hardening) and a ``source`` string; the
harness adds ``sample_index`` (the row's input position, so every tensor row is distinct)
and meta ``{step, temperature, global_token_num}``, the last a per-sample list that must be
passed whole, never split.
"""

from __future__ import annotations

import contextlib
import math
from typing import Any

import torch
from hypothesis import strategies as st

from rlconform.conformance import strategies as cs
from rlconform.conformance.compare import assert_equal, assert_scalar_close
from rlconform.conformance.errors import ClauseMismatch, TargetError
from rlconform.conformance.features import allows, pad_value_features
from rlconform.conformance.harness import to_float_list
from rlconform.conformance.registry import clause
from rlconform.oracle import batch as oracle
from rlconform.oracle.errors import ContractError

NAN = float("nan")
SOURCES = ("gsm8k", "math", "code")


# ---- cases ---------------------------------------------------------------------------


@st.composite
def batch_spec(draw: Any, min_rows: int = 1, max_rows: int = 5) -> dict:
    """One plain batch: rows with uid, score, ids of a common width, log-probs of L_i <= width
    tokens (padded with the pad value), source. (edge) L_i = 0; (hardening) width 0 and
    NaN/inf/huge padding."""
    n = draw(st.integers(min_rows, max_rows))
    width = draw(st.integers(0 if allows("hardening") else 1, 3))
    rows = []
    for i in range(n):
        length = draw(cs.lengths(width)) if width else 0
        rows.append(
            {
                "uid": f"s{i}",
                "score": draw(cs.finite()),
                "ids": draw(st.lists(st.integers(0, 50_000), min_size=width, max_size=width)),
                "logp": draw(st.lists(cs.finite(-8.0, 0.0), min_size=length, max_size=length)),
                "source": draw(st.sampled_from(SOURCES)),
            }
        )
    meta = {
        "step": draw(st.integers(0, 9)),
        "temperature": draw(st.sampled_from([1.0, 0.7])),
        "global_token_num": draw(st.lists(st.integers(0, 64), min_size=n, max_size=n)),
    }
    return {"rows": rows, "width": width, "pad_value": draw(cs.pad_values()), "meta": meta}


def _spec(scores: list[float], width: int = 2, meta_step: int = 3, pad_value: float = 0.0) -> dict:
    """A pinned batch: uids s0.., the given scores, ids 10*i + column, L_i = width for even
    rows and width - 1 (at least 1) for odd ones, alternating sources."""
    rows = []
    for i, s in enumerate(scores):
        length = max(1, width - i % 2) if width else 0
        rows.append(
            {
                "uid": f"s{i}",
                "score": s,
                "ids": [10 * i + c for c in range(width)],
                "logp": [-0.25 * (i + t + 1) for t in range(length)],
                "source": SOURCES[i % 2],
            }
        )
    meta = {
        "step": meta_step,
        "temperature": 0.7,
        "global_token_num": [i + 2 for i in range(len(scores))],
    }
    return {"rows": rows, "width": width, "pad_value": pad_value, "meta": meta}


# The §0a features a batch can have (its rows' log-probs are the per-token field).
SPEC_FEATURES = (
    "empty_response",
    "extra_padding",
    "padding_finite",
    "padding_nonfinite",
    "overflow",
    "zero_width",
)


def spec_features(spec: dict) -> set[str]:
    """L_i = 0, a width above the longest row, the pad value at the padding of ``logp``, a
    zero-width batch."""
    rows, width = spec["rows"], spec["width"]
    lengths = [len(r["logp"]) for r in rows]
    found = set()
    if rows and width == 0:
        found.add("zero_width")
    if 0 in lengths:
        found.add("empty_response")
    if rows and 0 < max(lengths) < width:
        found.add("extra_padding")
    if any(n < width for n in lengths):
        found |= pad_value_features(spec["pad_value"])
    return found


def _batch_features(case: dict) -> set[str]:
    return spec_features(case["batch"])


# ---- plain batch <-> target container ----------------------------------------------------


def _plain(spec: dict) -> dict:
    rows, width = spec["rows"], spec["width"]
    padding = [spec["pad_value"]] * width
    return {
        "size": len(rows),
        "tensors": {
            "sample_index": list(range(len(rows))),
            "score": [r["score"] for r in rows],
            "ids": [list(r["ids"]) for r in rows],
            "logp": [list(r["logp"]) + padding[len(r["logp"]) :] for r in rows],
        },
        "non_tensors": {"uid": [r["uid"] for r in rows], "source": [r["source"] for r in rows]},
        "meta": {k: (list(v) if isinstance(v, list) else v) for k, v in spec["meta"].items()},
    }


def _layout(ctx: Any, spec: dict) -> dict[str, tuple[torch.dtype, tuple[int, ...]]]:
    return {
        "sample_index": (torch.int64, ()),
        "score": (ctx.dtype, ()),
        "ids": (torch.int64, (spec["width"],)),
        "logp": (ctx.dtype, (spec["width"],)),
    }


def _rounded(ctx: Any, plain: dict, layout: dict) -> dict:
    """The plain batch with its float tensor rows as the target stores them (its dtype): a
    pad value such as -1e30 is not exact in float32."""
    out = dict(plain, tensors=dict(plain["tensors"]))
    for key, rows in plain["tensors"].items():
        dtype, trailing = layout[key]
        if dtype.is_floating_point and rows:
            values = torch.tensor(rows, dtype=torch.float64).reshape(len(rows), *trailing)
            out["tensors"][key] = to_float_list(values.to(dtype))
    return out


def _make(ctx: Any, plain: dict, layout: dict) -> Any:
    tensors = {}
    for key, rows in plain["tensors"].items():
        dtype, trailing = layout[key]
        values = torch.tensor(rows, dtype=torch.float64 if dtype.is_floating_point else dtype)
        tensors[key] = values.reshape(plain["size"], *trailing).to(dtype=dtype, device=ctx.device)
    non_tensors = {k: list(v) for k, v in plain["non_tensors"].items()}
    meta = {k: (list(v) if isinstance(v, list) else v) for k, v in plain["meta"].items()}
    return ctx.call("batch_make", tensors, non_tensors, meta)


def _read(ctx: Any, container: Any) -> tuple[dict, dict[str, torch.dtype]]:
    tensors, non_tensors, meta = ctx.call("batch_read", container)
    plain = {
        "tensors": {
            k: to_float_list(v) if v.is_floating_point() else v.detach().cpu().tolist()
            for k, v in tensors.items()
        },
        "non_tensors": {k: list(v) for k, v in non_tensors.items()},
        "meta": dict(meta),
    }
    return plain, {k: v.dtype for k, v in tensors.items()}


def _mismatch(
    clause_id: str, message: str, check: str | None = None, **detail: Any
) -> ClauseMismatch:
    return ClauseMismatch(f"[{clause_id}] {message}", detail=detail, check=check)


def _row_name(expected: dict, row: int) -> str:
    uids = expected["non_tensors"].get("uid")
    return (
        f"row {row} (uid={uids[row]!r})" if uids is not None and row < len(uids) else f"row {row}"
    )


def assert_batch(
    clause_id: str,
    what: str,
    expected: dict,
    layout: dict,
    actual: tuple[dict, dict],
    check: str | None = None,
) -> None:
    """The container read back holds exactly the expected rows, dtypes and meta (a failure
    is check ``check``)."""
    try:
        _assert_batch(clause_id, what, expected, layout, actual)
    except ClauseMismatch as failure:
        failure.check = failure.check or check
        raise


def _assert_batch(
    clause_id: str, what: str, expected: dict, layout: dict, actual: tuple[dict, dict]
) -> None:
    observed, dtypes = actual
    for section in ("tensors", "non_tensors", "meta"):
        exp_keys, act_keys = sorted(expected[section]), sorted(observed[section])
        if exp_keys != act_keys:
            raise _mismatch(
                clause_id,
                f"{what}: {section} keys expected {exp_keys}, actual {act_keys}",
                what=what,
                expected=exp_keys,
                actual=act_keys,
            )
    for key, dtype in dtypes.items():
        if dtype != layout[key][0]:
            raise _mismatch(
                clause_id,
                f"{what}: tensor {key!r} dtype expected {layout[key][0]}, actual {dtype}",
                what=what,
                expected=str(layout[key][0]),
                actual=str(dtype),
            )
    for section in ("tensors", "non_tensors"):
        for key, exp_rows in expected[section].items():
            act_rows = observed[section][key]
            if len(act_rows) != len(exp_rows):
                raise _mismatch(
                    clause_id,
                    f"{what}: {section[:-1].replace('_', '-')} {key!r} has {len(act_rows)} rows, "
                    f"expected {len(exp_rows)}",
                    what=what,
                    expected=len(exp_rows),
                    actual=len(act_rows),
                )
            for row, (e, a) in enumerate(zip(exp_rows, act_rows, strict=True)):
                if not oracle.same_value(e, a):
                    uids = expected["non_tensors"].get("uid")
                    raise _mismatch(
                        clause_id,
                        f"{what}: {section[:-1].replace('_', '-')} {key!r} at {_row_name(expected, row)}: "
                        f"expected {e!r}, actual {a!r} (rows misaligned?)",
                        what=what,
                        uid=uids[row] if uids else None,
                        token=row,
                        expected=e,
                        actual=a,
                    )
    for key, value in expected["meta"].items():
        if not oracle.same_value(value, observed["meta"][key]):
            raise _mismatch(
                clause_id,
                f"{what}: meta {key!r} expected {value!r}, actual {observed['meta'][key]!r} "
                "(meta is passed whole, never split)",
                what=what,
                expected=value,
                actual=observed["meta"][key],
            )


def _raises(ctx: Any, op: str, *args: Any) -> tuple[Any, BaseException | None]:
    """Call an operation whose failure is an expected outcome; return (result, exception)."""
    try:
        return ctx.call(op, *args), None
    except TargetError as failure:  # the contract asks for an error here, of any type
        return None, failure.original


def _in_place(ctx: Any, key: str) -> Any:
    """Calls the profile documents as in place (``key`` True) may modify their arguments."""
    return ctx.in_place() if ctx.profile.get(key, False) else contextlib.nullcontext()


# ---- batch.union -----------------------------------------------------------------------

_SECTIONS = ("tensors", "non_tensors", "meta")
_KEYS = {
    "tensors": ("sample_index", "score", "ids", "logp"),
    "non_tensors": ("uid", "source"),
    "meta": ("step", "temperature", "global_token_num"),
}
_CONFLICT_KEY = {
    "tensor": ("tensors", "score"),
    "non_tensor": ("non_tensors", "source"),
    "meta": ("meta", "step"),
}


def _subset(plain: dict, keys: dict[str, list[str]]) -> dict:
    out = {"size": plain["size"]}
    for section in _SECTIONS:
        out[section] = {k: v for k, v in plain[section].items() if k in keys.get(section, [])}
    return out


def _different(value: Any) -> Any:
    if isinstance(value, float):
        return 1.0 if math.isnan(value) or value == 0 else -value
    if isinstance(value, str):
        return value + "'"
    return value + 1


def _union_sides(case: dict) -> tuple[dict, dict]:
    """The two batches of a union case, the conflict (if any) written into b."""
    plain = _plain(case["batch"])
    a_keys = {s: list(case["a"].get(s, [])) for s in _SECTIONS}
    b_keys = {s: list(case["b"].get(s, [])) for s in _SECTIONS}
    for keys in (a_keys, b_keys):
        if not keys["tensors"]:
            keys["tensors"].append("sample_index")  # sized by its tensors (verl DataProto)
    kind = case["conflict"]
    if kind in _CONFLICT_KEY:
        section, key = _CONFLICT_KEY[kind]
        for keys in (a_keys, b_keys):
            if key not in keys[section]:
                keys[section].append(key)
    a, b = _subset(plain, a_keys), _subset(plain, b_keys)
    if kind in _CONFLICT_KEY:
        section, key = _CONFLICT_KEY[kind]
        if section == "meta":
            b["meta"][key] = _different(b["meta"][key])
        else:
            rows = list(b[section][key])
            row = case.get("row", 0) % plain["size"]
            rows[row] = _different(rows[row])
            b[section][key] = rows
    elif kind == "size":
        b = oracle.take_rows(b, list(range(plain["size"])) + [0])
    return a, b


@st.composite
def _union_case(draw: Any) -> dict:
    def keys() -> dict:
        return {s: draw(st.lists(st.sampled_from(_KEYS[s]), unique=True)) for s in _SECTIONS}

    return {
        "batch": draw(batch_spec()),
        "a": keys(),
        "b": keys(),
        "conflict": draw(st.sampled_from(["none", "none", "tensor", "non_tensor", "meta", "size"])),
        "row": draw(st.integers(0, 4)),
    }


_UNION_EXAMPLES = (
    # Disjoint keys: plain merge.
    {
        "batch": _spec([0.5, -1.0, 2.0]),
        "a": {"tensors": ["score"], "non_tensors": ["uid"]},
        "b": {"tensors": ["ids"], "meta": ["step"]},
        "conflict": "none",
        "row": 0,
    },
    # A shared key that holds NaN (at its padding) is equal to itself (verl's torch.equal
    # says it is not).
    {
        "batch": _spec([0.5, 1.0], pad_value=NAN),
        "a": {"tensors": ["logp", "sample_index"], "non_tensors": ["uid"]},
        "b": {"tensors": ["logp", "score"], "non_tensors": ["uid", "source"]},
        "conflict": "none",
        "row": 0,
    },
    # Conflicting tensor row: an error, never b's value silently winning.
    {
        "batch": _spec([0.5, -1.0, 2.0]),
        "a": {"tensors": ["score"], "non_tensors": ["uid"]},
        "b": {"tensors": ["score", "ids"]},
        "conflict": "tensor",
        "row": 2,
    },
    # Conflicting non-tensor after a new tensor key: a failed union must not leave a
    # half-merged input behind (verl adds `ids` to a before it checks `source`).
    {
        "batch": _spec([0.5, -1.0]),
        "a": {"tensors": ["score"], "non_tensors": ["uid", "source"]},
        "b": {"tensors": ["score", "ids"], "non_tensors": ["source"], "meta": ["temperature"]},
        "conflict": "non_tensor",
        "row": 1,
    },
    # Conflicting meta value (huge padding in the log-probs of the second row).
    {
        "batch": _spec([0.5, 1.5], pad_value=-1e30),
        "a": {"meta": ["step", "temperature"]},
        "b": {"meta": ["step"]},
        "conflict": "meta",
        "row": 0,
    },
    # Different batch sizes.
    {
        "batch": _spec([0.5, 1.5]),
        "a": {"tensors": ["score"]},
        "b": {"tensors": ["ids"]},
        "conflict": "size",
        "row": 0,
    },
)


@clause(
    "batch.union",
    title="Union of two batches: equal shared keys or an error",
    statement="""The union has every key of both batches. A key present on both sides must
    hold equal content (rows for tensors and non-tensors, NaN equal to NaN; values for meta),
    and both batches must have the same number of rows; otherwise the union raises, never
    silently overwrites, and leaves both inputs exactly as they were (no partial merge).
    Profile `batch_union_in_place` (default False; verl True): when True the result is
    also written into the first batch, otherwise neither input changes.""",
    ops=("batch_make", "batch_read", "batch_union"),
    strategy=_union_case(),
    examples=_UNION_EXAMPLES,
    checks=(
        "conflict_raises",
        "no_partial_merge",
        "accepts_equal",
        "result",
        "first_input",
        "second_input",
    ),
    meets=SPEC_FEATURES,
    case_features=_batch_features,
)
def check_union(ctx: Any, case: dict) -> None:
    in_place = bool(ctx.profile.get("batch_union_in_place", False))
    layout = _layout(ctx, case["batch"])
    a_plain, b_plain = (_rounded(ctx, side, layout) for side in _union_sides(case))
    a, b = _make(ctx, a_plain, layout), _make(ctx, b_plain, layout)
    try:
        expected = oracle.union(a_plain, b_plain)
    except ContractError as conflict:
        expected, reason = None, str(conflict)
    with _in_place(ctx, "batch_union_in_place"):
        result, raised = _raises(ctx, "batch_union", a, b)
    if expected is None:
        if raised is None:
            raise _mismatch(
                "batch.union",
                f"union returned without error although {reason.split('] ', 1)[-1]} "
                "(a silent overwrite)",
                "conflict_raises",
                what="union",
                expected="error",
                actual="no error",
            )
        for what, plain, side in (("first", a_plain, a), ("second", b_plain, b)):
            with ctx.check("no_partial_merge"):
                label = f"{what} input after a failed union"
                assert_batch("batch.union", label, plain, layout, _read(ctx, side))
        return
    if raised is not None:
        raise _mismatch(
            "batch.union",
            f"union raised {type(raised).__name__}: {raised} although every shared key is equal "
            "(NaN equal to NaN)".replace("\n", " "),
            "accepts_equal",
            what="union",
            expected="union",
            actual=f"{type(raised).__name__}",
        )
    with ctx.check("result"):
        assert_batch("batch.union", "union result", expected, layout, _read(ctx, result))
    first = expected if in_place else a_plain
    label = "first input (union in place)" if in_place else "first input (union not in place)"
    with ctx.check("first_input"):
        assert_batch("batch.union", label, first, layout, _read(ctx, a))
    assert_batch(
        "batch.union", "second input", b_plain, layout, _read(ctx, b), check="second_input"
    )


# ---- batch.row_ops ---------------------------------------------------------------------


def _divisors(n: int) -> list[int]:
    return [k for k in range(1, n + 1) if n % k == 0]


@st.composite
def _row_ops_case(draw: Any) -> dict:
    spec = draw(batch_spec())
    n = len(spec["rows"])
    uneven = [k for k in range(2, n + 1) if n % k]
    return {
        "batch": spec,
        "chunks": draw(st.sampled_from(_divisors(n))),
        "uneven_chunks": draw(st.sampled_from(uneven)) if uneven else None,
        "split_size": draw(st.integers(1, n + 1)),
        "select": draw(st.lists(st.integers(0, n - 1), max_size=6)),
        "reorder": draw(st.permutations(list(range(n)))),
        "repeat": draw(st.integers(1, 3)),
        "interleave": draw(st.booleans()),
    }


_ROW_OPS_EXAMPLES = (
    # verl's own example: select with repeats, reversed reorder, uneven chunk of 5 rows.
    {
        "batch": _spec([0.0, 1.0, 2.0, 3.0, 4.0]),
        "chunks": 5,
        "uneven_chunks": 2,
        "split_size": 2,
        "select": [4, 0, 0],
        "reorder": [4, 3, 2, 1, 0],
        "repeat": 2,
        "interleave": True,
    },
    # Tiled repeat, empty selection, split wider than the batch, zero-width ids and logp.
    {
        "batch": _spec([0.5, 1.0, -2.5], width=0),
        "chunks": 3,
        "uneven_chunks": 2,
        "split_size": 4,
        "select": [],
        "reorder": [2, 0, 1],
        "repeat": 2,
        "interleave": False,
    },
    # A single row.
    {
        "batch": _spec([0.25]),
        "chunks": 1,
        "uneven_chunks": None,
        "split_size": 1,
        "select": [0, 0],
        "reorder": [0],
        "repeat": 3,
        "interleave": True,
    },
    # Two equal chunks: meta (with a per-sample list) goes whole to each; NaN padding of
    # the odd rows' log-probs travels with its row.
    {
        "batch": _spec([1.0, 2.0, 3.0, 4.0], pad_value=NAN),
        "chunks": 2,
        "uneven_chunks": 3,
        "split_size": 3,
        "select": [3, 1],
        "reorder": [1, 0, 3, 2],
        "repeat": 1,
        "interleave": False,
    },
)


def _pieces(ctx: Any, what: str, plain: dict, layout: dict, pieces: list, expected: list) -> None:
    pieces = list(pieces)
    assert_equal("batch.row_ops", f"{what}: number of pieces", len(expected), len(pieces))
    for p, (exp, piece) in enumerate(zip(expected, pieces, strict=True)):
        assert_batch("batch.row_ops", f"{what} piece {p}", exp, layout, _read(ctx, piece))
    rejoined = ctx.call("batch_concat", pieces) if pieces else None
    if rejoined is not None:
        with ctx.check("concat"):
            assert_batch(
                "batch.row_ops", f"concat of the {what} pieces", plain, layout, _read(ctx, rejoined)
            )


@clause(
    "batch.row_ops",
    title="chunk / split / select / reorder / repeat keep rows aligned",
    statement="""chunk(k), split(size), select(indices), reorder(permutation) and
    repeat(times, interleaved or tiled) move tensor rows, non-tensor rows and uids
    together, so that output row r is the same input row in every field; meta (including
    per-sample lists stored in meta) is passed whole to every piece, never split; concat
    of the pieces gives the input back; the input is not modified. Profile keys:
    `batch_chunk_uneven` (default "error", verl without auto-padding: chunking n rows into
    k pieces with k not dividing n raises; "ceil": pieces of ceil(n/k) rows) and
    `batch_reorder_in_place` (default False; verl True: the reordered rows are read from
    the input container).""",
    ops=(
        "batch_make",
        "batch_read",
        "batch_chunk",
        "batch_split",
        "batch_select",
        "batch_reorder",
        "batch_repeat",
        "batch_concat",
    ),
    strategy=_row_ops_case(),
    examples=_ROW_OPS_EXAMPLES,
    checks=(
        "chunk",
        "chunk_uneven",
        "split",
        "select",
        "repeat",
        "reorder",
        "concat",
        "input_unchanged",
    ),
    meets=SPEC_FEATURES,
    case_features=_batch_features,
)
def check_row_ops(ctx: Any, case: dict) -> None:
    spec = case["batch"]
    layout = _layout(ctx, spec)
    plain = _rounded(ctx, _plain(spec), layout)
    n = plain["size"]

    def unchanged(source: Any, what: str) -> None:
        with ctx.check("input_unchanged"):
            assert_batch("batch.row_ops", f"input after {what}", plain, layout, _read(ctx, source))

    k = case["chunks"]
    with ctx.check("chunk"):
        source = _make(ctx, plain, layout)
        expected = [oracle.take_rows(plain, idx) for idx in oracle.chunk_indices(n, k)]
        _pieces(ctx, f"chunk({k})", plain, layout, ctx.call("batch_chunk", source, k), expected)
        unchanged(source, f"chunk({k})")

    uneven = case["uneven_chunks"]
    if uneven is not None:
        with ctx.check("chunk_uneven"):
            _check_uneven_chunk(ctx, plain, layout, uneven)

    size = case["split_size"]
    with ctx.check("split"):
        source = _make(ctx, plain, layout)
        expected = [oracle.take_rows(plain, idx) for idx in oracle.split_indices(n, size)]
        pieces = ctx.call("batch_split", source, size)
        _pieces(ctx, f"split({size})", plain, layout, pieces, expected)
        unchanged(source, f"split({size})")

    indices = list(case["select"])
    with ctx.check("select"):
        source = _make(ctx, plain, layout)
        selected = ctx.call("batch_select", source, indices)
        expected_rows = oracle.take_rows(plain, indices)
        what = f"select({indices})"
        assert_batch("batch.row_ops", what, expected_rows, layout, _read(ctx, selected))
        unchanged(source, what)

    times, interleave = case["repeat"], case["interleave"]
    with ctx.check("repeat"):
        source = _make(ctx, plain, layout)
        repeated = ctx.call("batch_repeat", source, times, interleave)
        expected_rows = oracle.take_rows(plain, oracle.repeat_indices(n, times, interleave))
        what = f"repeat({times}, interleave={interleave})"
        assert_batch("batch.row_ops", what, expected_rows, layout, _read(ctx, repeated))
        unchanged(source, what)

    with ctx.check("reorder"):
        _check_reorder(ctx, plain, layout, list(case["reorder"]), unchanged)


def _check_uneven_chunk(ctx: Any, plain: dict, layout: dict, uneven: int) -> None:
    """chunk(k) with k not dividing n: an error, or ceil-sized pieces (profile)."""
    n = plain["size"]
    policy = ctx.profile.get("batch_chunk_uneven", "error")
    source = _make(ctx, plain, layout)
    if policy == "error":
        pieces, raised = _raises(ctx, "batch_chunk", source, uneven)
        if raised is None:
            sizes = [len(_read(ctx, p)[0]["non_tensors"]["uid"]) for p in pieces]
            raise _mismatch(
                "batch.row_ops",
                f"chunk({uneven}) of {n} rows returned pieces of sizes {sizes}; with "
                "batch_chunk_uneven='error' it must raise",
                what="chunk",
                expected="error",
                actual=sizes,
            )
    else:
        indices = oracle.chunk_indices(n, uneven, policy)
        expected = [oracle.take_rows(plain, idx) for idx in indices]
        pieces = ctx.call("batch_chunk", source, uneven)
        _pieces(ctx, f"chunk({uneven})", plain, layout, pieces, expected)
    with ctx.check("input_unchanged"):
        what = f"input after chunk({uneven})"
        assert_batch("batch.row_ops", what, plain, layout, _read(ctx, source))


def _check_reorder(ctx: Any, plain: dict, layout: dict, order: list[int], unchanged: Any) -> None:
    """reorder: a new container, or (profile batch_reorder_in_place) the input reordered."""
    source = _make(ctx, plain, layout)
    with _in_place(ctx, "batch_reorder_in_place"):
        reordered = ctx.call("batch_reorder", source, order)
    expected_rows = oracle.take_rows(plain, oracle.reorder_indices(plain["size"], order))
    if ctx.profile.get("batch_reorder_in_place", False):
        assert_batch(
            "batch.row_ops",
            f"input after in-place reorder({order})",
            expected_rows,
            layout,
            _read(ctx, source),
        )
        if reordered is not None:
            assert_batch(
                "batch.row_ops", f"reorder({order})", expected_rows, layout, _read(ctx, reordered)
            )
    else:
        assert_batch(
            "batch.row_ops", f"reorder({order})", expected_rows, layout, _read(ctx, reordered)
        )
        unchanged(source, f"reorder({order})")


# ---- batch.pad_divisor -----------------------------------------------------------------


@st.composite
def _pad_case(draw: Any) -> dict:
    return {"batch": draw(batch_spec()), "divisor": draw(st.integers(1, 8))}


_PAD_EXAMPLES = (
    # verl: 3 rows to a multiple of 8 cycles the head: 0,1,2,0,1,2,0,1.
    {"batch": _spec([1.0, 2.0, 6.0]), "divisor": 8},
    # 5 rows to a multiple of 4: pad rows 0,1,2; tail rows differ from head rows.
    {"batch": _spec([0.5, -1.0, 2.0, 4.0, -3.0]), "divisor": 4},
    # Already divisible: pad_size 0, and unpad(0) must keep every row (not data[:-0]).
    {"batch": _spec([1.0, 2.0, 3.0, 4.0]), "divisor": 4},
    # Divisor larger than twice the batch.
    {"batch": _spec([-2.0, 5.0]), "divisor": 5},
    # One row, divisor 1.
    {"batch": _spec([3.0], width=0), "divisor": 1},
)


@clause(
    "batch.pad_divisor",
    title="Pad to a divisor from the head, unpad exactly, statistics skip pad rows",
    statement="""Padding n rows to a multiple of k appends pad_size = (k - n % k) % k rows
    that repeat the first rows, cycling (padded row n + j is row j % n), in every field;
    meta is unchanged. Unpadding with pad_size restores exactly the original rows (pad_size
    0 keeps all of them). A per-sample statistic computed on the padded batch given
    pad_size (`batch_sample_mean(padded, key, pad_size)`, the mean of a (B,) tensor) counts
    the real rows only.""",
    ops=("batch_make", "batch_read", "batch_pad_to_divisor", "batch_unpad", "batch_sample_mean"),
    strategy=_pad_case(),
    examples=_PAD_EXAMPLES,
    checks=("pad_size", "padded_rows", "input_unchanged", "sample_mean", "unpad"),
    meets=SPEC_FEATURES,
    case_features=_batch_features,
)
def check_pad_divisor(ctx: Any, case: dict) -> None:
    spec, divisor = case["batch"], case["divisor"]
    layout = _layout(ctx, spec)
    plain = _rounded(ctx, _plain(spec), layout)
    indices, pad_size = oracle.pad_indices(plain["size"], divisor)
    source = _make(ctx, plain, layout)
    padded, actual_pad = ctx.call("batch_pad_to_divisor", source, divisor)
    assert_equal(
        "batch.pad_divisor",
        f"pad_size for {plain['size']} rows and divisor {divisor}",
        pad_size,
        int(actual_pad),
        check="pad_size",
    )
    what = f"pad_to_divisor({divisor}) (pad row j repeats row j % n from the head)"
    with ctx.check("padded_rows"):
        expected_rows = oracle.take_rows(plain, indices)
        assert_batch("batch.pad_divisor", what, expected_rows, layout, _read(ctx, padded))
    with ctx.check("input_unchanged"):
        what = "input after pad_to_divisor"
        assert_batch("batch.pad_divisor", what, plain, layout, _read(ctx, source))

    scores = plain["tensors"]["score"]
    mean = ctx.call("batch_sample_mean", padded, "score", pad_size)
    with ctx.check("sample_mean"):
        assert_scalar_close(
            "batch.pad_divisor",
            f"mean of 'score' over the real rows of the padded batch (pad_size {pad_size})",
            oracle.sample_mean_excluding_pad([scores[i] for i in indices], pad_size),
            float(mean),
            tolerance=ctx.tolerance,
            scale=max((abs(s) for s in scores), default=0.0),
        )

    restored = ctx.call("batch_unpad", padded, pad_size)
    assert_batch(
        "batch.pad_divisor",
        f"unpad({pad_size}) of the padded batch",
        plain,
        layout,
        _read(ctx, restored),
        check="unpad",
    )


# ---- batch.seqlen_balance --------------------------------------------------------------


@st.composite
def _balance_case(draw: Any) -> dict:
    k = draw(st.integers(1, 4))
    equal_size = draw(st.booleans())
    if equal_size:
        n = k * draw(st.integers(1, max(1, 8 // k)))
    else:
        n = draw(st.integers(k, 8))
    shortest = 0 if allows("edge") else 1
    length = (
        st.integers(shortest, 8)
        | st.integers(shortest, 131_072)
        | st.sampled_from([shortest, 60_000, 131_072])
    )
    return {
        "seqlens": draw(st.lists(length, min_size=n, max_size=n)),
        "k": k,
        "equal_size": equal_size,
    }


_BALANCE_EXAMPLES = (
    # verl's example lengths, 4 equal-size partitions.
    {"seqlens": [10, 3, 7, 8, 1, 9, 2, 6], "k": 4, "equal_size": True},
    # 24576 * 60000 + 60000^2 = 5,074,560,000 does not fit in int32 (779,592,704 there).
    {"seqlens": [60_000, 1, 131_072, 7], "k": 2, "equal_size": True},
    # Zero-length samples and unequal sizes: no partition may be left empty.
    {"seqlens": [0, 0, 0, 5], "k": 3, "equal_size": False},
    # Input order already optimal ({2, 2, 2} | {3, 3}); largest-first greedy or differencing
    # alone gives w(3) + 2 w(2) = 172,049 > 147,474: the result must not be worse.
    {"seqlens": [2, 2, 2, 3, 3], "k": 2, "equal_size": False},
    # One partition: everything in it.
    {"seqlens": [4, 1], "k": 1, "equal_size": True},
)


@clause(
    "batch.seqlen_balance",
    title="Sequence-length balancing: a permutation, exact int64 workloads, no worse than input order",
    statement="""The workload of a sequence of length L is 24576 * L + L^2 (verl), an exact
    integer for the int64 lengths a pipeline counts from its masks (int32 arithmetic
    overflows at L = 60000).
    Partitioning n samples into k parts (`seqlen_partitions(seqlens, k, equal_size)`)
    returns k non-empty lists that together hold every index 0..n-1 exactly once (n / k
    each with equal_size); the largest summed workload of the parts is no larger than that
    of the input order cut into k consecutive parts of near-equal size (the first n % k
    parts one longer): balancing improves on the input order or leaves an already optimal
    order's balance as it was.""",
    ops=("seqlen_workload", "seqlen_partitions"),
    strategy=_balance_case(),
    examples=_BALANCE_EXAMPLES,
    checks=("workload_count", "workload", "partition", "balance"),
    meets=("empty_response",),
    case_features=lambda case: {"empty_response"} if 0 in case["seqlens"] else set(),
)
def check_seqlen_balance(ctx: Any, case: dict) -> None:
    seqlens, k, equal_size = list(case["seqlens"]), case["k"], case["equal_size"]
    work = ctx.call("seqlen_workload", torch.tensor(seqlens, dtype=torch.int64, device=ctx.device))
    observed = work.detach().cpu().tolist() if isinstance(work, torch.Tensor) else list(work)
    assert_equal(
        "batch.seqlen_balance",
        "number of workloads",
        len(seqlens),
        len(observed),
        check="workload_count",
    )
    with ctx.check("workload"):
        for i, (length, value) in enumerate(zip(seqlens, observed, strict=True)):
            expected = oracle.workload(length)
            if value != expected:
                raise _mismatch(
                    "batch.seqlen_balance",
                    f"workload of sample {i} (L={length}): expected "
                    f"24576*L + L^2 = {expected}, actual {value!r}",
                    "workload",
                    what="workload",
                    uid=i,
                    expected=expected,
                    actual=value,
                )

    raw = ctx.call("seqlen_partitions", list(seqlens), k, equal_size)
    partitions = [[int(i) for i in (p.tolist() if isinstance(p, torch.Tensor) else p)] for p in raw]
    try:
        oracle.check_partitions(partitions, len(seqlens), k, equal_size)
    except ContractError as error:
        raise _mismatch(
            "batch.seqlen_balance",
            f"partitions {partitions}: {str(error).split('] ', 1)[-1]}",
            "partition",
            what="partitions",
            expected=f"a partition of range({len(seqlens)})",
            actual=partitions,
        ) from error
    reference = oracle.contiguous_partitions(len(seqlens), k)
    balanced = oracle.max_partition_workload(seqlens, partitions)
    baseline = oracle.max_partition_workload(seqlens, reference)
    if balanced > baseline:
        raise _mismatch(
            "batch.seqlen_balance",
            f"partitions {partitions} have max workload {balanced}, worse than {baseline} of "
            f"the input order's contiguous parts {reference}",
            "balance",
            what="max partition workload",
            expected=f"<= {baseline}",
            actual=balanced,
        )

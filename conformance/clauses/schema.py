"""Clauses of the CONTRACT area `schema`, and the rollout-sample strategies filter shares."""

from __future__ import annotations

import copy
import math
from typing import Any

import torch
from hypothesis import strategies as st
from tensordict import TensorDictBase
from tensordict.tensorclass import NonTensorData, NonTensorStack

from rlconform.conformance import strategies as cs
from rlconform.conformance.compare import assert_equal, assert_rows_close, assert_rows_equal
from rlconform.conformance.errors import ClauseMismatch, TargetError
from rlconform.conformance.features import allows, generic_features
from rlconform.conformance.harness import assert_padding_zero, unpad_right
from rlconform.conformance.registry import clause
from rlconform.conformance.snapshot import (
    assert_same_output,
    assert_unchanged,
    freeze,
)
from rlconform.oracle import schema as oracle
from rlconform.oracle.errors import ContractError

NON_FINITE = (float("nan"), float("inf"), -float("inf"))


# ---------------------------------------------------------------------------------------
# Strategies: canonical rollout samples (CONTRACT §1) with the §3 boundary classes.


def _sometimes(n: int) -> st.SearchStrategy[bool]:
    """True about once in ``n`` draws (integers() would favour its bounds)."""
    return st.sampled_from([False] * (n - 1) + [True])


@st.composite
def reward_values(draw: Any, *, unscored: bool = True, non_finite: bool = True) -> Any:
    """A reward: general, binary, a dict, None, NaN/inf, and (edge) nearly equal (1.0 vs
    1.00001)."""
    kinds = ["general", "general", "binary", "binary", "dict"]
    kinds += ["near_equal"] * allows("edge") + ["none"] * unscored + ["non_finite"] * non_finite
    kind = draw(st.sampled_from(kinds))
    if kind == "none":
        return None
    if kind == "non_finite":
        return draw(st.sampled_from(NON_FINITE))
    if kind == "binary":
        return draw(st.sampled_from([0.0, 1.0]))
    if kind == "near_equal":
        return draw(st.sampled_from([1.0, 1.00001]))
    if kind == "dict":
        return {"score": draw(st.sampled_from([0.0, 1.0])), "format": draw(cs.finite(-1, 1))}
    return draw(cs.finite(-3, 3))


@st.composite
def rollout_samples(
    draw: Any,
    *,
    min_samples: int = 0,
    max_samples: int = 5,
    misaligned: bool = True,
    non_finite: bool = True,
    unscored: bool = True,
) -> list[dict[str, Any]]:
    """Canonical samples: uneven lengths (max; edge: 0), mask holes, partial groups
    (edge: groups of one), duplicated responses within a group, every status, float / dict /
    None / NaN rewards, NaN/inf log-probs (on action tokens; hardening: also on mask-0
    tokens) and misaligned per-token fields (when allowed). Below edge no group has
    all-equal scalar rewards."""
    n = draw(st.integers(cs.fewest_samples(min_samples), max_samples))
    groups = draw(cs.group_labels(n)) if n else []
    int_uids = draw(st.booleans())
    shortest = 0 if allows("edge") else 1
    samples: list[dict[str, Any]] = []
    for i in range(n):
        same_group = [s for s in samples if s["group"] == groups[i]]
        if same_group and draw(_sometimes(3)):
            response = list(draw(st.sampled_from(same_group))["response_ids"])
        else:
            response = draw(st.lists(st.integers(0, 3), min_size=shortest, max_size=cs.MAX_LEN))
        length = len(response)
        logprobs = draw(
            st.lists(st.floats(-8, 0, allow_nan=False), min_size=length, max_size=length)
        )
        mask = draw(cs.loss_mask(length))
        positions = [t for t in range(length) if mask[t] or allows("hardening")]
        if non_finite and positions and draw(_sometimes(8)):
            logprobs[draw(st.sampled_from(positions))] = draw(st.sampled_from(NON_FINITE))
        if misaligned and draw(_sometimes(8)):
            target = draw(st.sampled_from([logprobs, mask]))
            if target and draw(st.booleans()):
                target.pop()
            else:
                target.append(1 if target is mask else -0.5)
        sample = {
            "uid": 1000 + i if int_uids else f"u{i}",
            "group": groups[i],
            "prompt_ids": draw(st.lists(st.integers(0, 9), max_size=3)),
            "response_ids": response,
            "rollout_logprobs": logprobs,
            "loss_mask": mask,
            "reward": draw(reward_values(unscored=unscored, non_finite=non_finite)),
            "status": draw(st.sampled_from(("completed",) * 3 + oracle.STATUSES)),
            "weight_version": draw(st.one_of(st.none(), st.integers(0, 3), st.just(["v1", "v2"]))),
            "data_source": draw(st.sampled_from([None, "math", "code"])),
        }
        if draw(st.booleans()):
            sample["temperature"] = draw(st.sampled_from([0.7, 1.0]))
            sample["top_k"] = draw(st.sampled_from([None, 20]))
            sample["top_p"] = draw(st.sampled_from([None, 0.9]))
        samples.append(sample)
    if not allows("edge"):
        separate_equal_rewards(samples)
    return samples


def separate_equal_rewards(samples: list[dict[str, Any]]) -> None:
    """Move one member of every group whose rewards are all equal numbers off the common
    value (an all-equal group is an edge case)."""
    members: dict[Any, list[dict[str, Any]]] = {}
    for sample in samples:
        members.setdefault(sample["group"], []).append(sample)
    for group in members.values():
        rewards = [s["reward"] for s in group]
        if len(group) < 2 or not all(isinstance(r, float) and math.isfinite(r) for r in rewards):
            continue
        if max(rewards) - min(rewards) <= 1e-3 * max(1.0, abs(rewards[0])):
            group[-1]["reward"] = rewards[0] + 1.0


def rollout_view(samples: list[Any]) -> dict[str, Any]:
    """Canonical samples as the feature walker reads them: the loss mask when it is aligned
    with the response (else the response's length), the log-probs when aligned, status,
    group and reward, sampling parameters. Tolerates defective samples."""
    view = []
    for sample in samples:
        if not isinstance(sample, dict):
            continue
        response = sample.get("response_ids")
        response = response if isinstance(response, list) else []
        mask = sample.get("loss_mask")
        entry: dict[str, Any] = {
            "mask": mask
            if isinstance(mask, list) and len(mask) == len(response)
            else [1] * len(response),
            "status": sample.get("status"),
        }
        logprobs = sample.get("rollout_logprobs")
        if isinstance(logprobs, list) and len(logprobs) == len(response):
            entry["rollout_logprobs"] = logprobs
        for key in ("temperature", "top_k", "top_p"):
            if key in sample:
                entry[key] = sample[key]
        group, reward = sample.get("group"), sample.get("reward")
        if isinstance(group, (str, int)):
            entry["group"] = group
        if isinstance(reward, (int, float)) and not isinstance(reward, bool):
            entry["reward"] = reward
        view.append(entry)
    return {"samples": view}


def rollout_features(samples: list[Any], meets: tuple[str, ...]) -> frozenset[str]:
    """The §0a features of canonical samples, limited to ``meets``."""
    return generic_features(rollout_view(samples)) & frozenset(meets)


def uids(samples: list[dict[str, Any]]) -> list[Any]:
    return [s["uid"] for s in samples]


# ---------------------------------------------------------------------------------------
# schema.normalize

_BAD_VALUES: dict[str, Any] = {
    "group": [1],
    "prompt_ids": "abc",
    "response_ids": [1.5],
    "rollout_logprobs": ["x"],
    "loss_mask": [2],
    "reward": "1.0",
    "status": "done",
    "weight_version": {"v": 1},
    "data_source": 3,
}


@st.composite
def _records(draw: Any) -> dict[str, Any]:
    """Canonical samples spelled with framework aliases, optionally with one defect."""
    samples = draw(rollout_samples(max_samples=4))
    records, names = [], []
    for sample in samples:
        record: dict[str, Any] = {}
        used: dict[str, str] = {}
        for field, value in sample.items():
            if field in oracle.OPTIONAL_FIELDS and draw(_sometimes(4)):
                continue
            name = draw(st.sampled_from((field,) + oracle.ALIASES.get(field, ())))
            record[name] = value
            used[field] = name
        if draw(_sometimes(4)):
            for field in ("prompt_ids", "response_ids"):
                del record[used.pop(field)]
            record["tokens"] = sample["prompt_ids"] + sample["response_ids"]
            record["response_length"] = len(sample["response_ids"])
        elif draw(_sometimes(5)):
            record["response_length"] = len(sample["response_ids"])
        if draw(st.booleans()):
            record["metadata"] = {"turns": [1, 2], "tool": {"name": "python"}}
        records.append(record)
        names.append(used)
    defect = None
    if records and draw(st.booleans()):
        index = draw(st.integers(0, len(records) - 1))
        defect = _apply_defect(draw, records[index], names[index])
    return {"records": records, "defect": defect}


def _apply_defect(draw: Any, record: dict[str, Any], used: dict[str, str]) -> dict[str, str]:
    kind = draw(
        st.sampled_from(["missing", "wrong_type", "negative_length", "given_twice", "missing_uid"])
    )
    if kind == "missing_uid":
        del record["uid"]
        return {"kind": kind, "field": "uid", "key": "uid"}
    if kind == "negative_length":
        record["response_length"] = -draw(st.integers(1, 3))
        return {"kind": kind, "field": "response_length", "key": "response_length"}
    required = [f for f in oracle.REQUIRED_FIELDS if f in used and f != "uid"]
    if kind == "missing":
        field = draw(st.sampled_from(required))
        del record[used[field]]
        return {"kind": kind, "field": field, "key": used[field]}
    if kind == "wrong_type":
        field = draw(st.sampled_from([f for f in _BAD_VALUES if f in used]))
        record[used[field]] = _BAD_VALUES[field]
        return {"kind": kind, "field": field, "key": used[field]}
    field = draw(st.sampled_from([f for f in required if f in oracle.ALIASES]))
    other = oracle.ALIASES[field][0] if used[field] == field else field
    record[other] = copy.deepcopy(record[used[field]])
    return {"kind": kind, "field": field, "key": other}


_DELETE = object()


def _record(uid: Any, **fields: Any) -> dict[str, Any]:
    """A valid canonical record; a field given as ``_DELETE`` is left out."""
    base = {
        "uid": uid,
        "group": "g0",
        "prompt_ids": [5, 6],
        "response_ids": [1, 2, 3],
        "rollout_logprobs": [-0.5, -1.0, -0.25],
        "loss_mask": [1, 0, 1],
        "reward": 1.0,
        "status": "completed",
    }
    for key, value in fields.items():
        if value is _DELETE:
            base.pop(key)
        else:
            base[key] = value
    return base


_NORMALIZE_EXAMPLES = (
    # One record per framework spelling: verl, slime (packed tokens), ROLL, TRL / OpenRLHF.
    {
        "records": [
            {
                "uid": "u0",
                "group": "p0",
                "prompts": [5, 6],
                "responses": [1, 2],
                "response_logprobs": [-0.1, -1.0],
                "response_mask": [1, 1],
                "score": 1.0,
                "status": "completed",
                "data_source": "gsm8k",
            },
            {
                "uid": "u1",
                "group_index": 0,
                "tokens": [5, 6, 1, 2, 3],
                "response_length": 3,
                "rollout_log_probs": [-0.5, 0.0, -0.25],
                "loss_mask": [1, 0, 1],
                "reward": {"score": 1.0, "format": 0.5},
                "status": "truncated",
                "weight_versions": ["7", "8"],
            },
            {
                "uid": "u2",
                "prompt_id": "p1",
                "prompt_ids": [5],
                "response_ids": [],
                "infer_logprobs": [],
                "loss_mask": [],
                "response_level_rewards": 0.0,
                "status": "aborted",
                "domain": "code",
                "temperature": 0.7,
                "top_k": 20,
                "top_p": 0.9,
            },
            {
                "uid": 7,
                "group": 3,
                "prompt_ids": [],
                "completion_ids": [4],
                "rollout_logprobs": [float("nan")],
                "action_mask": [1],
                "reward": None,
                "status": "tool_error",
                "metadata": {"turns": [1, 2]},
            },
        ],
        "defect": None,
    },
    # slime: L_i = 0 inside packed tokens.
    {
        "records": [
            _record(
                "u0",
                prompt_ids=_DELETE,
                response_ids=_DELETE,
                tokens=[5, 6],
                response_length=0,
                rollout_logprobs=[],
                loss_mask=[],
            )
        ],
        "defect": None,
    },
    {"records": [], "defect": None},
    {
        "records": [_record("u0"), _record("u1", reward=_DELETE)],
        "defect": {"kind": "missing", "field": "reward", "key": "reward"},
    },
    {
        "records": [_record("u0", response_length=-1)],
        "defect": {"kind": "negative_length", "field": "response_length", "key": "response_length"},
    },
    {
        "records": [_record(1001, reward="0.5")],
        "defect": {"kind": "wrong_type", "field": "reward", "key": "reward"},
    },
    {
        "records": [_record("u0", score=1.0)],
        "defect": {"kind": "given_twice", "field": "reward", "key": "score"},
    },
    {
        "records": [_record("u0", status="pending")],
        "defect": {"kind": "wrong_type", "field": "status", "key": "status"},
    },
)


def expect_error_naming(
    clause_id: str, ctx: Any, op: str, args: tuple, error: ContractError, keys: set[str]
) -> None:
    """The target must raise on bad input (check ``raises``), and its message must name the
    uid (``error_names_uid``) and the field (``error_names_field``)."""
    try:
        ctx.call(op, *args)
    except TargetError as failure:
        message = str(failure.original)
    else:
        raise ClauseMismatch(
            f"[{clause_id}] {op} accepted bad input; expected an error naming sample "
            f"uid={error.uid!r} and field {error.field!r} ({error})",
            detail={
                "what": "error on bad input",
                "uid": error.uid,
                "expected": str(error),
                "actual": None,
            },
            check="raises",
        )
    if error.uid is not None and str(error.uid) not in message:
        with ctx.check("error_names_uid"):
            raise ClauseMismatch(
                f"[{clause_id}] {op}'s error does not name the sample uid={error.uid!r}: "
                f"{message!r}",
                detail={
                    "what": "error names uid",
                    "uid": error.uid,
                    "expected": str(error),
                    "actual": message,
                },
            )
    names = {error.field} | keys
    if not any(name and name in message for name in names):
        raise ClauseMismatch(
            f"[{clause_id}] {op}'s error does not name the field {error.field!r} "
            f"(sample uid={error.uid!r}): {message!r}",
            detail={
                "what": "error names field",
                "uid": error.uid,
                "expected": str(error),
                "actual": message,
            },
            check="error_names_field",
        )


ERROR_CHECKS = ("raises", "error_names_uid", "error_names_field")


def _records_view(records: list[Any]) -> list[dict[str, Any]]:
    """Framework records renamed to canonical fields (slime's packed tokens split), without
    validation: defective records stay defective."""
    samples = []
    for record in records:
        if not isinstance(record, dict):
            continue
        sample = {oracle_canonical_name(name): value for name, value in record.items()}
        tokens, length = sample.get("tokens"), sample.get("response_length")
        if isinstance(tokens, list) and isinstance(length, int) and 0 <= length <= len(tokens):
            sample.setdefault("response_ids", tokens[len(tokens) - length :])
        samples.append(sample)
    return samples


def oracle_canonical_name(name: str) -> str:
    """The canonical field an alias stands for (itself when it is no alias)."""
    for canonical, aliases in oracle.ALIASES.items():
        if name in aliases:
            return canonical
    return name


_NORMALIZE_FEATURES = (
    "no_samples",
    "empty_response",
    "mask_holes",
    "actionless_sample",
    "truncated_sample",
    "sampling_truncation",
    "padding_nonfinite",
)


@clause(
    "schema.normalize",
    title="Framework aliases map to canonical fields; bad input raises naming uid and field",
    statement="""Aliases from each framework (verl, slime, ROLL, TRL, OpenRLHF) map to the
    canonical field names; slime's packed tokens are split by response_length; a missing
    required field, wrong type or negative length raises an error whose message names the
    sample uid and the field. No numeric change happens, and the caller's records are never
    modified.""",
    ops=("normalize_samples",),
    strategy=_records(),
    examples=_NORMALIZE_EXAMPLES,
    checks=(*ERROR_CHECKS, "canonical"),
    meets=_NORMALIZE_FEATURES,
    case_features=lambda case: rollout_features(
        _records_view(case["records"]), _NORMALIZE_FEATURES
    ),
)
def check_normalize(ctx: Any, case: dict[str, Any]) -> None:
    """A valid record rejected is check ``runs``; a record modified by a call that raised is
    ``no_mutation`` (the engine checks the calls that return)."""
    records = copy.deepcopy(case["records"])
    before = freeze(((records,), {}))
    try:
        expected = oracle.normalize_samples(copy.deepcopy(records))
    except ContractError as error:
        defect = case.get("defect") or {}
        keys = {defect.get("key")}
        try:
            expect_error_naming(
                "schema.normalize", ctx, "normalize_samples", (records,), error, keys
            )
        finally:
            with ctx.check("no_mutation"):
                after = freeze(((records,), {}))
                assert_unchanged("schema.normalize", "normalize_samples", before, after)
        return
    try:
        actual = ctx.call("normalize_samples", records)
    except TargetError as failure:
        raise ClauseMismatch(
            f"[schema.normalize] normalize_samples rejected valid records: {failure.summary}",
            detail={
                "what": "valid records",
                "expected": "canonical samples",
                "actual": failure.summary,
            },
            check="runs",
        ) from failure
    with ctx.check("canonical"):
        assert_same_output(
            "schema.normalize", "canonical samples (bit-identical)", expected, actual
        )


# ---------------------------------------------------------------------------------------
# schema.alignment

_ALIGNMENT_EXAMPLES = (
    {"samples": []},
    {
        "samples": [
            _record("u0"),
            _record("u1", loss_mask=[1, 1]),  # the mask alone is short
            _record("u2", rollout_logprobs=[-1.0, -1.0, -1.0, -1.0]),  # one log-prob too many
            _record("u3", response_ids=[], rollout_logprobs=[-0.1], loss_mask=[]),  # L_i = 0
            _record("u4", response_ids=[], rollout_logprobs=[], loss_mask=[]),
        ]
    },
)


@clause(
    "schema.alignment",
    title="Per-token fields have one value per response token",
    statement="""len(rollout_logprobs) == len(response_ids) == len(loss_mask); every sample
    that violates it is reported by uid, in input order (it is also the filter reason
    logprob_mismatch).""",
    ops=("find_misaligned",),
    strategy=st.fixed_dictionaries({"samples": rollout_samples()}),
    examples=_ALIGNMENT_EXAMPLES,
    checks=("misaligned_uids",),
    meets=("no_samples", "empty_response"),
    case_features=lambda case: rollout_features(case["samples"], ("no_samples", "empty_response")),
)
def check_alignment(ctx: Any, case: dict[str, Any]) -> None:
    samples = case["samples"]
    expected = oracle.find_misaligned(samples)
    actual = ctx.call("find_misaligned", copy.deepcopy(samples))
    assert_equal(
        "schema.alignment",
        "uids of misaligned samples",
        expected,
        list(actual),
        check="misaligned_uids",
    )


# ---------------------------------------------------------------------------------------
# schema.output


@st.composite
def _output_case(draw: Any) -> dict[str, Any]:
    samples = draw(rollout_samples(misaligned=False, non_finite=False, unscored=False))
    defect = None
    if samples and draw(_sometimes(4)):
        index = draw(st.integers(0, len(samples) - 1))
        kind = draw(st.sampled_from(["unscored", "misaligned", "no_reward_key"]))
        sample = samples[index]
        if kind == "unscored":
            sample["reward"] = None
        elif kind == "misaligned":
            sample["loss_mask"] = sample["loss_mask"] + [1]
        else:
            sample["reward"] = {"format": 1.0}
        defect = kind
    return {"samples": samples, "defect": defect}


_OUTPUT_EXAMPLES = (
    {"samples": [], "defect": None},
    {
        "samples": [
            _record(
                "u0",
                prompt_ids=[],
                response_ids=[],
                rollout_logprobs=[],
                loss_mask=[],
                weight_version=3,
                data_source="math",
            ),
            _record(
                "u1",
                prompt_ids=[9, 8, 7],
                response_ids=[1, 2, 3, 4, 5, 6],
                rollout_logprobs=[-0.1, -0.2, -0.3, -0.4, -0.5, -60.0],
                loss_mask=[1, 0, 0, 1, 1, 1],
                reward={"score": 1.0, "format": -0.5},
                status="failed",
                weight_version=["v1", "v2"],
            ),
        ],
        "defect": None,
    },
    {"samples": [_record("u0"), _record("u1", reward=None)], "defect": "unscored"},
    {"samples": [_record(1001, loss_mask=[1, 1])], "defect": "misaligned"},
)

_PER_TOKEN = ("responses", "response_mask", "loss_mask", "rollout_logprobs")
_OUTPUT_FEATURES = (
    "no_samples",
    "empty_response",
    "mask_holes",
    "actionless_sample",
    "truncated_sample",
)


def column(batch: Any, name: str) -> Any:
    """A field of the output batch: a tensor, or the list of per-row Python values."""
    if isinstance(batch, TensorDictBase):
        if name not in batch.keys():
            return None
        value = batch.get(name)
    else:
        value = batch.get(name) if hasattr(batch, "get") else None
    if isinstance(value, (NonTensorStack, NonTensorData)):
        return value.tolist()
    return value


def _schema_mismatch(
    name: str, problem: str, expected: Any, actual: Any, check: str = "fields"
) -> ClauseMismatch:
    return ClauseMismatch(
        f"[schema.output] field {name!r}: {problem}: expected {expected!r}, actual {actual!r}",
        detail={"what": f"field {name}", "expected": expected, "actual": actual},
        check=check,
    )


def _check_layout(ctx: Any, batch: Any, columns: dict[str, list]) -> dict[str, Any]:
    """Every BATCH_SCHEMA field present with its dtype and shape; returns the fields."""
    n = len(columns["uid"])
    fields: dict[str, Any] = {}
    widths: set[int] = set()
    for name, (kind, dtype, shape) in oracle.BATCH_SCHEMA.items():
        value = column(batch, name)
        if value is None:
            raise _schema_mismatch(
                name, "missing from the output batch", f"{kind} {dtype} ({shape})", None
            )
        if kind == "non_tensor":
            if isinstance(value, torch.Tensor) or len(value) != n:
                raise _schema_mismatch(name, "not one Python value per row", n, value)
            fields[name] = list(value)
            continue
        if not isinstance(value, torch.Tensor):
            raise _schema_mismatch(name, "not a tensor", f"{dtype} ({shape})", type(value).__name__)
        want = ctx.dtype if dtype == "float" else torch.int64
        if value.dtype != want:
            raise _schema_mismatch(name, "wrong dtype", want, value.dtype)
        dims = shape.split(",")
        if value.dim() != len(dims) or value.shape[0] != n:
            raise _schema_mismatch(
                name, "wrong shape", shape.replace("B", str(n)), tuple(value.shape)
            )
        if "T" in dims:
            widths.add(value.shape[1])
        fields[name] = value
    longest = max((len(r) for r in columns["responses"]), default=0)
    if len(widths) > 1 or (widths and min(widths) < longest):
        raise _schema_mismatch(
            "responses",
            "per-token fields disagree in width or are too narrow",
            f"one width >= {longest}",
            sorted(widths),
        )
    longest_prompt = max((len(r) for r in columns["prompts"]), default=0)
    if fields["prompts"].shape[1] < longest_prompt:
        raise _schema_mismatch(
            "prompts",
            "narrower than the longest prompt",
            longest_prompt,
            fields["prompts"].shape[1],
        )
    return fields


@clause(
    "schema.output",
    title="The output batch has a fixed schema and traceable debug fields",
    statement="""build_batch returns every BATCH_SCHEMA field with its dtype and shape
    (prompts left-padded, per-token fields right-padded, padding 0) and keeps the debug
    fields that trace a row back: uid, raw reward, pre-filter length, source, weight
    version; an unscored or misaligned sample raises an error naming its uid and field.
    Profile key: reward_key (default "score"), the entry of a dict reward used as score.""",
    ops=("build_batch",),
    strategy=_output_case(),
    examples=_OUTPUT_EXAMPLES,
    checks=(
        *ERROR_CHECKS,
        "fields",
        "per_token",
        "padding_zero",
        "prompts",
        "scores",
        "prefilter_length",
        "debug_fields",
    ),
    meets=_OUTPUT_FEATURES,
    case_features=lambda case: rollout_features(case["samples"], _OUTPUT_FEATURES),
)
def check_output(ctx: Any, case: dict[str, Any]) -> None:
    samples = case["samples"]
    reward_key = ctx.profile.get("reward_key", "score")
    try:
        columns = oracle.build_batch(samples, reward_key=reward_key)
    except ContractError as error:
        expect_error_naming(
            "schema.output", ctx, "build_batch", (copy.deepcopy(samples),), error, set()
        )
        return
    batch = ctx.call("build_batch", copy.deepcopy(samples))
    fields = _check_layout(ctx, batch, columns)
    ids = columns["uid"]
    lengths = [len(r) for r in columns["responses"]]
    for name in _PER_TOKEN:
        actual = unpad_right(fields[name], lengths)
        with ctx.check("per_token"):
            if name == "rollout_logprobs":
                assert_rows_close(
                    "schema.output", name, columns[name], actual, uids=ids, tolerance=ctx.tolerance
                )
            else:
                assert_rows_equal("schema.output", name, columns[name], actual, uids=ids)
        with ctx.check("padding_zero"):
            assert_padding_zero("schema.output", name, fields[name], lengths, ids)
    with ctx.check("prompts"):
        _check_prompts(columns, fields, ids)
    with ctx.check("scores"):
        assert_rows_close(
            "schema.output",
            "scores",
            [[s] for s in columns["scores"]],
            [[s] for s in fields["scores"].tolist()],
            uids=ids,
            tolerance=ctx.tolerance,
        )
    with ctx.check("prefilter_length"):
        assert_equal(
            "schema.output",
            "prefilter_length",
            columns["prefilter_length"],
            fields["prefilter_length"].tolist(),
        )
    for name, (kind, _, _) in oracle.BATCH_SCHEMA.items():
        if kind == "non_tensor":
            with ctx.check("debug_fields"):
                assert_same_output(
                    "schema.output", f"debug field {name!r}", columns[name], fields[name]
                )


def _check_prompts(columns: dict[str, list], fields: dict[str, Any], ids: list[Any]) -> None:
    """Prompts left-padded: the real ids end at the last column, 0 before them."""
    prompt_lengths = [len(r) for r in columns["prompts"]]
    prompt_rows = [list(reversed(r)) for r in fields["prompts"].tolist()]
    reversed_prompts = [list(reversed(r)) for r in columns["prompts"]]
    assert_rows_equal(
        "schema.output",
        "prompts (left-padded)",
        reversed_prompts,
        [r[:n] for r, n in zip(prompt_rows, prompt_lengths)],
        uids=ids,
    )
    for uid, row, n in zip(ids, prompt_rows, prompt_lengths):
        if any(v != 0 for v in row[n:]):
            raise _schema_mismatch(
                "prompts", f"left padding is not 0 for sample uid={uid!r}", 0, row[n:], "prompts"
            )

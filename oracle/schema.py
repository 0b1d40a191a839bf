"""Oracle for the CONTRACT area `schema` (standard library only, ragged lists, float64).

A canonical sample is a dict with the fields of CONTRACT §1; ``normalize_samples`` maps
the names frameworks use onto them, ``find_misaligned`` reports per-token fields that
disagree in length, and ``build_batch`` gives the ragged columns of the output batch whose
padded schema is ``BATCH_SCHEMA``.
"""

from __future__ import annotations

from typing import Any

from rlconform.oracle.errors import ContractError

STATUSES = ("completed", "truncated", "aborted", "tool_error", "failed")

REQUIRED_FIELDS = (
    "uid",
    "group",
    "prompt_ids",
    "response_ids",
    "rollout_logprobs",
    "loss_mask",
    "reward",
    "status",
)
OPTIONAL_FIELDS = ("weight_version", "data_source", "temperature", "top_k", "top_p")
CANONICAL_FIELDS = REQUIRED_FIELDS + OPTIONAL_FIELDS

# Canonical name -> names frameworks use for it (research notes, verl 0.9.1 / slime / ROLL /
# TRL / OpenRLHF). verl's own non-tensor "uid" labels the *prompt* (the GRPO group), so it is
# not an alias here: a verl binding renames it to "group" and supplies a per-sample uid.
ALIASES: dict[str, tuple[str, ...]] = {
    "group": ("group_index", "prompt_id"),
    "prompt_ids": ("prompts",),
    "response_ids": ("responses", "completion_ids"),
    "rollout_logprobs": ("rollout_log_probs", "response_logprobs", "infer_logprobs"),
    "loss_mask": ("response_mask", "action_mask"),
    "reward": ("score", "response_level_rewards"),
    "weight_version": ("weight_versions",),
    "data_source": ("domain",),
}

# slime keeps prompt and response in one list: tokens = prompt_ids + response_ids, with the
# response length beside it.
PACKED_TOKENS = "tokens"
DECLARED_LENGTH = "response_length"


def normalize_samples(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """schema.normalize: framework records -> canonical samples; no numeric change.

    Per record: every alias in ``ALIASES`` is renamed to its canonical name (a field given
    under two names is an error); slime's ``tokens`` + ``response_length`` are split into
    ``prompt_ids`` and ``response_ids``; a declared ``response_length`` must be an int >= 0
    equal to the response's length. Required fields must be present (``reward`` may be
    None = unscored); optional ones default to None. Types: uid and group str or int;
    token ids lists of ints; rollout_logprobs a list of numbers (NaN/inf allowed: that is a
    filter reason); loss_mask a list of 0/1; reward None, a number or a dict of str ->
    number; status one of ``STATUSES``. Per-token lengths are *not* compared here
    (schema.alignment / filter reason ``logprob_mismatch``). Output: canonical fields in
    ``CANONICAL_FIELDS`` order, then unknown keys unchanged; the input is not modified.
    """
    return [_normalize_record(position, record) for position, record in enumerate(records)]


def _normalize_record(position: int, record: Any) -> dict[str, Any]:
    clause = "schema.normalize"
    if not isinstance(record, dict):
        raise ContractError(clause, f"record {position} is a {type(record).__name__}, not a dict")
    uid = record.get("uid")
    if "uid" not in record or not _is_id(uid):
        raise ContractError(clause, f"record {position}: missing or invalid uid", field="uid")
    renamed: dict[str, Any] = {}
    source: dict[str, str] = {}
    for name, value in record.items():
        canonical = _canonical_name(name)
        if canonical in renamed:
            raise ContractError(
                clause, f"given twice, as {source[canonical]!r} and {name!r}", uid, canonical
            )
        renamed[canonical] = value
        source[canonical] = name
    if PACKED_TOKENS in renamed:
        _split_packed_tokens(renamed, uid)
    if DECLARED_LENGTH in renamed:
        declared = renamed.pop(DECLARED_LENGTH)
        _check_declared_length(declared, renamed.get("response_ids"), uid)
    for field in REQUIRED_FIELDS:
        if field not in renamed:
            raise ContractError(clause, "required field is missing", uid, field)
    sample = {field: _checked(field, renamed.get(field), uid) for field in CANONICAL_FIELDS}
    for name, value in renamed.items():
        if name not in sample:
            sample[name] = _copy(value)
    return sample


def _canonical_name(name: str) -> str:
    for canonical, aliases in ALIASES.items():
        if name in aliases:
            return canonical
    return name


def _split_packed_tokens(renamed: dict[str, Any], uid: Any) -> None:
    clause = "schema.normalize"
    for field in ("prompt_ids", "response_ids"):
        if field in renamed:
            raise ContractError(
                clause, f"given both as {PACKED_TOKENS!r} and {field!r}", uid, field
            )
    tokens = renamed.pop(PACKED_TOKENS)
    if not _is_int_list(tokens):
        raise ContractError(clause, "must be a list of int token ids", uid, PACKED_TOKENS)
    if DECLARED_LENGTH not in renamed:
        raise ContractError(clause, f"required with {PACKED_TOKENS!r}", uid, DECLARED_LENGTH)
    length = renamed[DECLARED_LENGTH]
    if not _is_int(length) or length < 0 or length > len(tokens):
        raise ContractError(
            clause, f"must be an int in [0, {len(tokens)}], got {length!r}", uid, DECLARED_LENGTH
        )
    renamed["prompt_ids"] = list(tokens[: len(tokens) - length])
    renamed["response_ids"] = list(tokens[len(tokens) - length :])


def _check_declared_length(declared: Any, response_ids: Any, uid: Any) -> None:
    clause = "schema.normalize"
    if not _is_int(declared) or declared < 0:
        raise ContractError(clause, f"must be an int >= 0, got {declared!r}", uid, DECLARED_LENGTH)
    if isinstance(response_ids, (list, tuple)) and declared != len(response_ids):
        raise ContractError(
            clause,
            f"declares {declared} response tokens but response_ids has {len(response_ids)}",
            uid,
            DECLARED_LENGTH,
        )


def _checked(field: str, value: Any, uid: Any) -> Any:
    """The canonical value of ``field`` (a fresh copy), or ContractError naming uid and field."""
    if field in ("uid", "group"):
        ok = _is_id(value)
        out = value
    elif field in ("prompt_ids", "response_ids"):
        ok = _is_int_list(value)
        out = list(value) if ok else None
    elif field == "rollout_logprobs":
        ok = isinstance(value, (list, tuple)) and all(_is_number(x) for x in value)
        out = [float(x) for x in value] if ok else None
    elif field == "loss_mask":
        ok = isinstance(value, (list, tuple)) and all(_is_int(x) and x in (0, 1) for x in value)
        out = [int(x) for x in value] if ok else None
    elif field == "reward":
        ok = value is None or _is_number(value) or _is_reward_dict(value)
        out = _copy_reward(value) if ok else None
    elif field == "status":
        ok = isinstance(value, str) and value in STATUSES
        out = value
    elif field == "weight_version":
        ok = (
            value is None
            or _is_id(value)
            or (isinstance(value, (list, tuple)) and all(_is_id(x) for x in value))
        )
        out = list(value) if isinstance(value, (list, tuple)) else value
    elif field == "data_source":
        ok = value is None or isinstance(value, str)
        out = value
    elif field in ("temperature", "top_p"):
        ok = value is None or _is_number(value)
        out = float(value) if ok and value is not None else None
    else:  # top_k
        ok = value is None or _is_int(value)
        out = value
    if not ok:
        raise ContractError("schema.normalize", f"invalid value {value!r}", uid, field)
    return out


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _is_id(x: Any) -> bool:
    return isinstance(x, str) or _is_int(x)


def _is_int_list(x: Any) -> bool:
    return isinstance(x, (list, tuple)) and all(_is_int(t) for t in x)


def _is_reward_dict(x: Any) -> bool:
    return isinstance(x, dict) and all(isinstance(k, str) and _is_number(v) for k, v in x.items())


def _copy_reward(reward: Any) -> Any:
    if reward is None:
        return None
    if isinstance(reward, dict):
        return {key: float(value) for key, value in reward.items()}
    return float(reward)


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


def find_misaligned(samples: list[dict[str, Any]]) -> list[Any]:
    """schema.alignment: uids (input order) where not
    len(rollout_logprobs) == len(response_ids) == len(loss_mask)."""
    misaligned = []
    for sample in samples:
        lengths = {
            len(sample["response_ids"]),
            len(sample["rollout_logprobs"]),
            len(sample["loss_mask"]),
        }
        if len(lengths) > 1:
            misaligned.append(sample["uid"])
    return misaligned


def scalar_reward(reward: Any, reward_key: str, uid: Any, clause: str) -> float:
    """A sample's scalar reward: the float itself, or ``reward[reward_key]`` for a dict."""
    if isinstance(reward, dict):
        if reward_key not in reward:
            raise ContractError(clause, f"reward dict has no key {reward_key!r}", uid, "reward")
        return float(reward[reward_key])
    if reward is None:
        raise ContractError(clause, "sample is unscored (reward None)", uid, "reward")
    return float(reward)


# Output batch schema (schema.output): name -> (kind, dtype, shape). dtype "float" is the
# target's float dtype (profile.dtype). Shapes: B samples; P >= longest prompt (prompts
# left-padded); T >= longest response (per-token fields right-padded); padding holds 0.
# "non_tensor" fields hold one Python value per row (TensorDict NonTensorStack or list).
BATCH_SCHEMA: dict[str, tuple[str, str, str]] = {
    "prompts": ("tensor", "int64", "B,P"),
    "responses": ("tensor", "int64", "B,T"),
    "response_mask": ("tensor", "int64", "B,T"),
    "loss_mask": ("tensor", "int64", "B,T"),
    "rollout_logprobs": ("tensor", "float", "B,T"),
    "scores": ("tensor", "float", "B"),
    "prefilter_length": ("tensor", "int64", "B"),
    "uid": ("non_tensor", "object", "B"),
    "group": ("non_tensor", "object", "B"),
    "raw_reward": ("non_tensor", "object", "B"),
    "status": ("non_tensor", "object", "B"),
    "data_source": ("non_tensor", "object", "B"),
    "weight_version": ("non_tensor", "object", "B"),
}


def build_batch(samples: list[dict[str, Any]], *, reward_key: str = "score") -> dict[str, list]:
    """schema.output: the ragged columns of the output batch (``BATCH_SCHEMA`` once padded).

    Every sample must be aligned (schema.alignment) and scored; ``scores`` is the scalar
    reward (``reward[reward_key]`` for a dict reward). Debug fields keep a row traceable:
    uid, raw_reward (the reward as given), prefilter_length (L_i as the sample arrived,
    before any later trimming), data_source, weight_version; also group and status.
    """
    columns: dict[str, list] = {name: [] for name in BATCH_SCHEMA}
    for sample in samples:
        uid = sample["uid"]
        length = len(sample["response_ids"])
        for field in ("rollout_logprobs", "loss_mask"):
            if len(sample[field]) != length:
                raise ContractError(
                    "schema.output",
                    f"{len(sample[field])} values for {length} response tokens",
                    uid,
                    field,
                )
        columns["prompts"].append(list(sample["prompt_ids"]))
        columns["responses"].append(list(sample["response_ids"]))
        columns["response_mask"].append([1] * length)
        columns["loss_mask"].append(list(sample["loss_mask"]))
        columns["rollout_logprobs"].append([float(x) for x in sample["rollout_logprobs"]])
        columns["scores"].append(scalar_reward(sample["reward"], reward_key, uid, "schema.output"))
        columns["prefilter_length"].append(length)
        columns["uid"].append(uid)
        columns["group"].append(sample["group"])
        columns["raw_reward"].append(_copy(sample["reward"]))
        columns["status"].append(sample["status"])
        columns["data_source"].append(sample.get("data_source"))
        columns["weight_version"].append(_copy(sample.get("weight_version")))
    return columns

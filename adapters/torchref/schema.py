"""torchref operations for the CONTRACT area `schema` (vectorized torch, any device)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from tensordict import TensorDict

from rlconform.conformance.harness import non_tensor_rows
from rlconform.oracle.errors import ContractError

_STATUSES = frozenset(("completed", "truncated", "aborted", "tool_error", "failed"))

# Framework name -> canonical name (verl, slime, ROLL, TRL, OpenRLHF spellings).
_RENAMES = {
    "group_index": "group",
    "prompt_id": "group",
    "prompts": "prompt_ids",
    "responses": "response_ids",
    "completion_ids": "response_ids",
    "rollout_log_probs": "rollout_logprobs",
    "response_logprobs": "rollout_logprobs",
    "infer_logprobs": "rollout_logprobs",
    "response_mask": "loss_mask",
    "action_mask": "loss_mask",
    "score": "reward",
    "response_level_rewards": "reward",
    "weight_versions": "weight_version",
    "domain": "data_source",
}


def _integer(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _ident(x: Any) -> bool:
    return isinstance(x, str) or _integer(x)


def _sequence(item_ok: Callable[[Any], bool], convert: Callable[[Any], Any]):
    def validate(value: Any) -> tuple[bool, Any]:
        if not isinstance(value, (list, tuple)) or not all(item_ok(x) for x in value):
            return False, None
        return True, [convert(x) for x in value]

    return validate


def _reward(value: Any) -> tuple[bool, Any]:
    if value is None:
        return True, None
    if _number(value):
        return True, float(value)
    if isinstance(value, dict) and all(isinstance(k, str) and _number(v) for k, v in value.items()):
        return True, {k: float(v) for k, v in value.items()}
    return False, None


def _weight_version(value: Any) -> tuple[bool, Any]:
    if value is None or _ident(value):
        return True, value
    if isinstance(value, (list, tuple)) and all(_ident(x) for x in value):
        return True, list(value)
    return False, None


def _optional(item_ok: Callable[[Any], bool], convert: Callable[[Any], Any] = lambda x: x):
    def validate(value: Any) -> tuple[bool, Any]:
        if value is None:
            return True, None
        return (True, convert(value)) if item_ok(value) else (False, None)

    return validate


# Canonical field -> (required, validator returning (ok, canonical copy)), in output order.
_FIELDS: dict[str, tuple[bool, Callable[[Any], tuple[bool, Any]]]] = {
    "uid": (True, lambda v: (_ident(v), v)),
    "group": (True, lambda v: (_ident(v), v)),
    "prompt_ids": (True, _sequence(_integer, int)),
    "response_ids": (True, _sequence(_integer, int)),
    "rollout_logprobs": (True, _sequence(_number, float)),
    "loss_mask": (True, _sequence(lambda x: _integer(x) and x in (0, 1), int)),
    "reward": (True, _reward),
    "status": (True, lambda v: (isinstance(v, str) and v in _STATUSES, v)),
    "weight_version": (False, _weight_version),
    "data_source": (False, _optional(lambda x: isinstance(x, str))),
    "temperature": (False, _optional(_number, float)),
    "top_k": (False, _optional(_integer)),
    "top_p": (False, _optional(_number, float)),
}


def _plain_copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain_copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain_copy(v) for v in value]
    return value


class SchemaOps:
    """Vectorized `schema` operations in the canonical padded layout."""

    def normalize_samples(self, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """schema.normalize: framework field names -> canonical samples (see oracle.schema)."""
        return [self._normalize_one(i, record) for i, record in enumerate(records)]

    def _normalize_one(self, index: int, record: Any) -> dict[str, Any]:
        if not isinstance(record, dict):
            raise ContractError("schema.normalize", f"record {index} is not a dict")
        if not _ident(record.get("uid")):
            raise ContractError("schema.normalize", f"record {index}: no valid uid", field="uid")
        uid = record["uid"]
        fields: dict[str, Any] = {}
        for key, value in record.items():
            name = _RENAMES.get(key, key)
            if name in fields:
                raise ContractError("schema.normalize", f"{key!r} duplicates {name!r}", uid, name)
            fields[name] = value
        declared = fields.pop("response_length", None)
        has_declared = "response_length" in record
        if declared is not None or has_declared:
            if not _integer(declared) or declared < 0:
                raise ContractError(
                    "schema.normalize",
                    f"negative or non-int length {declared!r}",
                    uid,
                    "response_length",
                )
        if "tokens" in fields:
            tokens = fields.pop("tokens")
            if "prompt_ids" in fields or "response_ids" in fields:
                raise ContractError(
                    "schema.normalize", "'tokens' with explicit ids", uid, "response_ids"
                )
            if not has_declared:
                raise ContractError(
                    "schema.normalize", "'tokens' needs a length", uid, "response_length"
                )
            if not isinstance(tokens, (list, tuple)) or declared > len(tokens):
                raise ContractError("schema.normalize", "cannot split 'tokens'", uid, "tokens")
            split = len(tokens) - declared
            fields["prompt_ids"], fields["response_ids"] = (
                list(tokens[:split]),
                list(tokens[split:]),
            )
        elif has_declared:
            response = fields.get("response_ids")
            if isinstance(response, (list, tuple)) and len(response) != declared:
                raise ContractError(
                    "schema.normalize",
                    "declared length != len(response_ids)",
                    uid,
                    "response_length",
                )
        out: dict[str, Any] = {}
        for name, (required, validate) in _FIELDS.items():
            if required and name not in fields:
                raise ContractError("schema.normalize", "missing", uid, name)
            ok, value = validate(fields.get(name))
            if not ok:
                raise ContractError(
                    "schema.normalize", f"bad type/value {fields[name]!r}", uid, name
                )
            out[name] = value
        for name, value in fields.items():
            if name not in out:
                out[name] = _plain_copy(value)
        return out

    def find_misaligned(self, samples: list[dict[str, Any]]) -> list[Any]:
        """schema.alignment: uids whose response_ids / rollout_logprobs / loss_mask lengths differ."""
        if not samples:
            return []
        lengths = torch.tensor(
            [
                [len(s["response_ids"]), len(s["rollout_logprobs"]), len(s["loss_mask"])]
                for s in samples
            ],
            dtype=torch.int64,
        )
        bad = (lengths != lengths[:, :1]).any(dim=1)
        return [s["uid"] for s, flag in zip(samples, bad.tolist()) if flag]

    def build_batch(self, samples: list[dict[str, Any]]) -> TensorDict:
        """schema.output: canonical samples -> TensorDict with the fixed schema + debug fields.

        prompts left-padded, per-token fields right-padded to the longest response; floats
        in the profile dtype; ``scores`` is the scalar reward (``reward[reward_key]`` for a
        dict, profile key ``reward_key``, default "score").
        """
        reward_key = self.profile.get("reward_key", "score")
        float_dtype = getattr(torch, self.profile.dtype)
        scores = []
        for s in samples:
            length = len(s["response_ids"])
            for field in ("rollout_logprobs", "loss_mask"):
                if len(s[field]) != length:
                    raise ContractError(
                        "schema.output", "length differs from response_ids", s["uid"], field
                    )
            reward = s["reward"]
            if reward is None:
                raise ContractError("schema.output", "unscored sample", s["uid"], "reward")
            if isinstance(reward, dict):
                if reward_key not in reward:
                    raise ContractError(
                        "schema.output", f"no {reward_key!r} in reward", s["uid"], "reward"
                    )
                reward = reward[reward_key]
            scores.append(float(reward))
        device = self.device
        batch = len(samples)
        lengths = torch.tensor([len(s["response_ids"]) for s in samples], dtype=torch.int64)
        prompt_lengths = torch.tensor([len(s["prompt_ids"]) for s in samples], dtype=torch.int64)
        width = int(lengths.max()) if batch else 0
        prompt_width = int(prompt_lengths.max()) if batch else 0
        response_mask = (torch.arange(width).unsqueeze(0) < lengths.unsqueeze(1)).to(torch.int64)
        prompt_mask = torch.arange(prompt_width).flip(0).unsqueeze(0) < prompt_lengths.unsqueeze(1)

        def scatter(rows: list[list], valid: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
            out = torch.zeros(valid.shape, dtype=dtype)
            flat = [x for row in rows for x in row]
            out[valid.bool()] = torch.tensor(flat, dtype=dtype)
            return out.to(device)

        tensors = {
            "prompts": scatter([s["prompt_ids"] for s in samples], prompt_mask, torch.int64),
            "responses": scatter([s["response_ids"] for s in samples], response_mask, torch.int64),
            "response_mask": response_mask.to(device),
            "loss_mask": scatter([s["loss_mask"] for s in samples], response_mask, torch.int64),
            "rollout_logprobs": scatter(
                [s["rollout_logprobs"] for s in samples], response_mask, float_dtype
            ),
            "scores": torch.tensor(scores, dtype=float_dtype, device=device),
            "prefilter_length": lengths.to(device),
        }
        non_tensors = {
            "uid": [s["uid"] for s in samples],
            "group": [s["group"] for s in samples],
            "raw_reward": [_plain_copy(s["reward"]) for s in samples],
            "status": [s["status"] for s in samples],
            "data_source": [s.get("data_source") for s in samples],
            "weight_version": [_plain_copy(s.get("weight_version")) for s in samples],
        }
        out = TensorDict(tensors, batch_size=[batch], device=device)
        for name, values in non_tensors.items():
            out[name] = non_tensor_rows(values)
        return out

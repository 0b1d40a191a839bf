"""The recorded batch as the audit sees it: verl's keys, validated, with L_i and the action mask.

Keys (CONTRACT §5, verl names; B samples, R response columns, P prompt columns):

- ``(B, P + R)``: ``attention_mask`` (its last R columns are the response part, 1 on the
  first L_i columns), ``input_ids``, ``position_ids``; ``(B, P)``: ``prompts``;
  ``(B, R)``: ``responses`` (ids), ``response_mask`` (1 on action tokens; holes for tool
  observations), and the float fields in ``TOKEN_FLOATS``.
- ``(B,)``: ``reward_baselines``, ``bootstrap_value``, ``scores`` (one scalar reward per
  sample), ``terminated`` / ``truncated`` (0/1), ``response_length`` (L_i); non-tensor: ``uid`` (group labels),
  ``sample_id`` (the id violations are reported by), ``score`` (a verl reward extra, read as
  ``scores``), and any per-sample reward components GDPO names.
- scalars: ``pg_loss`` / ``loss`` (the aggregate of ``pg_losses`` / ``loss_mat``).

L_i is read off the attention mask (the number of columns up to its last 1 in the response
part, tool observations included, as verl's ``attention_mask[:, P:].sum``), else from a
recorded ``response_length``, else off ``response_mask`` (a response that ends in a tool
observation then looks shorter).
The action mask is ``response_mask`` restricted to t < L_i (verl's ``compute_response_mask``
when ``response_mask`` is absent). Shapes, dtypes and mask values are checked here; a
problem is an ``AuditInputError`` naming the key and, where there is one, the sample.
"""

from __future__ import annotations

import collections
import dataclasses
import math
from typing import Any

import torch

from rlconform.audit.config import AuditConfig
from rlconform.audit.load import AuditInputError, Recorded

TOKEN_FLOATS = (
    "token_level_scores",
    "token_level_rewards",
    "old_log_probs",
    "ref_log_prob",
    "rollout_log_probs",
    "values",
    "advantages",
    "returns",
    "pg_losses",
    "loss_mat",
    "rollout_is_weights",
    "sum_pi_squared",
)
SAMPLE_FLOATS = ("reward_baselines", "bootstrap_value", "scores")
SAMPLE_FLAGS = ("terminated", "truncated")
SAMPLE_LENGTHS = ("response_length",)
SCALARS = ("pg_loss", "loss")
SEQUENCE_KEYS = ("attention_mask", "input_ids", "position_ids")
KNOWN = frozenset(
    {
        *TOKEN_FLOATS,
        *SAMPLE_FLOATS,
        *SAMPLE_FLAGS,
        *SAMPLE_LENGTHS,
        *SEQUENCE_KEYS,
        "prompts",
        "responses",
        "response_mask",
    }
)
ALIASES = {
    "rm_scores": "token_level_scores",
    "ref_log_probs": "ref_log_prob",
    "score": "scores",
    "response_lengths": "response_length",
}


@dataclasses.dataclass
class AuditBatch:
    """A validated recorded batch."""

    source: str
    container: str
    size: int
    width: int
    lengths: list[int]
    action: torch.Tensor  # (B, R) bool: action tokens (t < L_i and response_mask)
    response: torch.Tensor  # (B, R) bool: t < L_i
    fields: dict[str, torch.Tensor]  # every recorded tensor by canonical key
    groups: list[Any] | None
    sample_ids: list[Any] | None
    per_sample: dict[str, list[Any]]
    scalars: dict[str, torch.Tensor]
    config: AuditConfig
    metrics: dict[str, Any]
    lengths_from: str
    ignored: list[str]
    notes: list[str]

    def name(self, i: int) -> str:
        """How a report names sample i: its recorded id (else its row), and its group."""
        group = f", group {self.groups[i]!r}" if self.groups is not None else ""
        if self.sample_ids is not None:
            return f"{self.sample_ids[i]!r} (row {i}{group})"
        return f"row {i}" + (f" (group {self.groups[i]!r})" if self.groups is not None else "")

    def has(self, *keys: str) -> bool:
        return all(k in self.fields for k in keys)

    def rows(self, key: str, start: int = 0, stop: int | None = None) -> list[list[float]]:
        """Samples ``start:stop`` of a (B, R) field as float64 lists over t < L_i."""
        stop = self.size if stop is None else stop
        values = self.fields[key][start:stop].to(torch.float64).tolist()
        return [row[: self.lengths[start + i]] for i, row in enumerate(values)]

    def masks(self, start: int = 0, stop: int | None = None) -> list[list[int]]:
        """Samples ``start:stop`` of the action mask as 0/1 lists over t < L_i."""
        stop = self.size if stop is None else stop
        values = self.action[start:stop].to(torch.int8).tolist()
        return [row[: self.lengths[start + i]] for i, row in enumerate(values)]

    def dtype_of(self, *keys: str) -> str:
        """The dtype a comparison uses: the first of ``keys`` that is recorded."""
        for key in keys:
            if key in self.fields and self.fields[key].is_floating_point():
                return str(self.fields[key].dtype).replace("torch.", "")
        return "float64"

    @property
    def tokens(self) -> int:
        return int(sum(self.lengths))


def _as_list(key: str, value: Any) -> list[Any]:
    if isinstance(value, torch.Tensor):
        return value.tolist()
    if isinstance(value, (list, tuple)):
        return list(value)
    raise AuditInputError(f"{key!r}: expected one value per sample, got {type(value).__name__}")


def _check_binary(key: str, tensor: torch.Tensor, batch_ids: Any = None) -> torch.Tensor:
    """A 0/1 mask as bool; AuditInputError naming the first bad entry."""
    if tensor.dtype == torch.bool:
        return tensor
    if tensor.is_complex():
        raise AuditInputError(f"{key!r}: dtype {tensor.dtype} is not a mask dtype")
    bad = (tensor != 0) & (tensor != 1)
    if bool(bad.any()):
        where = bad.nonzero()[0].tolist()
        value = tensor[tuple(where)].item()
        at = f"row {where[0]}" + (f", column {where[1]}" if len(where) > 1 else "")
        raise AuditInputError(
            f"{key!r}: {at}: value {value!r} is not 0 or 1 (a mask must be binary)"
        )
    return tensor != 0


def _check_floating(key: str, tensor: torch.Tensor) -> None:
    if not tensor.is_floating_point():
        raise AuditInputError(f"{key!r}: dtype {tensor.dtype}, expected a floating-point dtype")


def _check_integer(key: str, tensor: torch.Tensor) -> None:
    if tensor.is_floating_point() or tensor.is_complex() or tensor.dtype == torch.bool:
        raise AuditInputError(f"{key!r}: dtype {tensor.dtype}, expected integer token ids")


def _canonical(recorded: Recorded) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    tensors, values = dict(recorded.tensors), dict(recorded.values)
    for alias, key in ALIASES.items():
        for store in (tensors, values):
            if alias in store and key not in tensors and key not in values:
                store[key] = store.pop(alias)
    for key in ("uid", "sample_id"):
        if key in tensors:
            values[key] = tensors.pop(key).tolist()
    if "scores" in values:
        scores = values.pop("scores")
        try:
            tensors["scores"] = torch.tensor(_as_list("scores", scores), dtype=torch.float64)
        except (TypeError, ValueError):
            raise AuditInputError("'scores': expected one number per sample") from None
    for key in SCALARS:
        for store in (values, recorded.metrics):
            value = store.get(key)
            if (
                key not in tensors
                and isinstance(value, (int, float))
                and not isinstance(value, bool)
            ):
                tensors[key] = torch.tensor(float(value), dtype=torch.float64)
        values.pop(key, None)
    return tensors, values


def _common_size(fields: dict[str, torch.Tensor]) -> int:
    """B: the row count most keys agree on; a key that disagrees is named."""
    sizes = collections.Counter(int(t.shape[0]) for t in fields.values())
    size = sizes.most_common(1)[0][0]
    for key, tensor in fields.items():
        if tensor.shape[0] != size:
            raise AuditInputError(
                f"{key!r} has {tensor.shape[0]} rows, the other keys {size}: every key needs "
                "one row per sample"
            )
    return size


def _width(tensors: dict[str, torch.Tensor]) -> tuple[int, str]:
    for key in ("response_mask", "responses", *TOKEN_FLOATS):
        if key in tensors:
            tensor = tensors[key]
            if tensor.dim() != 2:
                raise AuditInputError(f"{key!r}: expected shape (B, R), got {tuple(tensor.shape)}")
            return int(tensor.shape[1]), key
    raise AuditInputError(
        "no per-token key recorded (response_mask, responses, token_level_scores, advantages ...): "
        "nothing to audit"
    )


def build(recorded: Recorded, config: AuditConfig, notes: list[str]) -> AuditBatch:
    """Validate ``recorded`` and derive L_i and the action mask (see the module docstring)."""
    tensors, values = _canonical(recorded)
    width, width_key = _width(tensors)
    fields: dict[str, torch.Tensor] = {}
    scalars: dict[str, torch.Tensor] = {}
    ignored: list[str] = []
    for key, tensor in sorted(tensors.items()):
        if key in SCALARS:
            if tensor.numel() != 1:
                raise AuditInputError(
                    f"{key!r}: expected one scalar, got shape {tuple(tensor.shape)}"
                )
            _check_floating(key, tensor)
            scalars[key] = tensor.reshape(())
            continue
        if key not in KNOWN and key not in config.gdpo_reward_keys:
            ignored.append(key)
            continue
        if tensor.dim() == 0:
            raise AuditInputError(f"{key!r}: a scalar where one row per sample is expected")
        fields[key] = tensor
    size = _common_size(fields)
    if size == 0:
        raise AuditInputError("the batch has 0 samples: nothing to audit")
    for key in (*TOKEN_FLOATS, "responses", "response_mask"):
        if key in fields and tuple(fields[key].shape) != (size, width):
            raise AuditInputError(
                f"{key!r}: shape {tuple(fields[key].shape)}, expected (B, R) = {(size, width)} "
                f"like {width_key!r}"
            )
    for key in TOKEN_FLOATS:
        if key in fields:
            _check_floating(key, fields[key])
    for key in (*SAMPLE_FLOATS, *SAMPLE_FLAGS, *config.gdpo_reward_keys):
        if key in fields and fields[key].dim() != 1:
            raise AuditInputError(f"{key!r}: shape {tuple(fields[key].shape)}, expected ({size},)")
    for key in SAMPLE_FLOATS:
        if key in fields:
            _check_floating(key, fields[key])
    for key in ("responses", "prompts", "input_ids", "position_ids"):
        if key in fields:
            _check_integer(key, fields[key])
    for key in SAMPLE_FLAGS:
        if key in fields:
            fields[key] = _check_binary(key, fields[key])
    response_part, prompt_width = _attention(fields, size, width)
    response_mask = None
    if "response_mask" in fields:
        response_mask = _check_binary("response_mask", fields["response_mask"])
    recorded_lengths = _recorded_lengths(fields, width)
    if response_part is not None:
        lengths_from = "attention_mask"
        lengths_tensor = _last_one(response_part)
        if recorded_lengths is not None and not torch.equal(recorded_lengths, lengths_tensor):
            row = int((recorded_lengths != lengths_tensor).nonzero()[0])
            raise AuditInputError(
                f"'response_length': row {row} says {int(recorded_lengths[row])}, attention_mask "
                f"says {int(lengths_tensor[row])}"
            )
    elif recorded_lengths is not None:
        lengths_from = "response_length"
        lengths_tensor = recorded_lengths
    elif response_mask is not None:
        lengths_from = "response_mask"
        lengths_tensor = _last_one(response_mask)
        notes.append(
            "no attention_mask or response_length: L_i ends at the last action token, so a "
            "response ending in a tool observation is read as shorter"
        )
    else:
        raise AuditInputError(
            "none of attention_mask, response_length, response_mask recorded: the response "
            "lengths are unknown"
        )
    if "prompts" in fields:
        if fields["prompts"].dim() != 2 or (
            prompt_width is not None and fields["prompts"].shape[1] != prompt_width
        ):
            raise AuditInputError(
                f"'prompts': shape {tuple(fields['prompts'].shape)}, expected (B, P) with "
                f"P = attention_mask width - R = {prompt_width}"
            )
    columns = torch.arange(width).unsqueeze(0)
    response = columns < lengths_tensor.unsqueeze(1)
    if response_mask is None:
        action = response_part.clone()
    else:
        action = response_mask & response
    groups = _per_sample_values(values, "uid", size)
    sample_ids = _per_sample_values(values, "sample_id", size)
    per_sample: dict[str, list[Any]] = {}
    for key in values:
        if key in ("uid", "sample_id"):
            continue
        if key in config.gdpo_reward_keys:
            per_sample[key] = _per_sample_values(values, key, size)
        else:
            ignored.append(key)
    if sample_ids is not None and len(set(map(repr, sample_ids))) < size:
        notes.append("sample_id has duplicates: violations also name the row")
    if groups is not None:
        _check_labels(groups)
    return AuditBatch(
        source=recorded.source,
        container=recorded.container,
        size=size,
        width=width,
        lengths=lengths_tensor.tolist(),
        action=action,
        response=response,
        fields=fields,
        groups=groups,
        sample_ids=sample_ids,
        per_sample=per_sample,
        scalars=scalars,
        config=config,
        metrics=dict(recorded.metrics),
        lengths_from=lengths_from,
        ignored=sorted(ignored),
        notes=notes,
    )


def _attention(
    fields: dict[str, torch.Tensor], size: int, width: int
) -> tuple[torch.Tensor | None, int | None]:
    """(the response part of attention_mask as bool, the prompt width P), or (None, None)."""
    if "attention_mask" not in fields:
        return None, None
    attention = fields["attention_mask"]
    if attention.dim() != 2 or attention.shape[1] < width:
        raise AuditInputError(
            f"'attention_mask': shape {tuple(attention.shape)}, expected (B, P + R) with R = {width}"
        )
    attention = _check_binary("attention_mask", attention)
    fields["attention_mask"] = attention
    total = attention.shape[1]
    for key in ("input_ids", "position_ids"):
        if key in fields and fields[key].shape[0] == size and fields[key].shape[-1] != total:
            raise AuditInputError(
                f"{key!r}: shape {tuple(fields[key].shape)}, expected last dimension {total} "
                "like attention_mask"
            )
    return attention[:, total - width :], total - width


def _recorded_lengths(fields: dict[str, torch.Tensor], width: int) -> torch.Tensor | None:
    """``response_length`` (B,): L_i as recorded (tool tokens included), checked."""
    if "response_length" not in fields:
        return None
    lengths = fields["response_length"]
    _check_integer("response_length", lengths)
    if lengths.dim() != 1:
        raise AuditInputError(f"'response_length': shape {tuple(lengths.shape)}, expected (B,)")
    bad = (lengths < 0) | (lengths > width)
    if bool(bad.any()):
        row = int(bad.nonzero()[0])
        raise AuditInputError(
            f"'response_length': row {row} is {int(lengths[row])}, outside [0, R = {width}]"
        )
    return lengths.to(torch.int64)


def _last_one(mask: torch.Tensor) -> torch.Tensor:
    """Per row: 1 + the index of the last 1 (0 for a row without one)."""
    width = mask.shape[1]
    if width == 0:
        return torch.zeros(mask.shape[0], dtype=torch.int64)
    positions = torch.arange(1, width + 1).unsqueeze(0).expand_as(mask)
    return torch.where(mask, positions, torch.zeros_like(positions)).amax(dim=1)


def _per_sample_values(values: dict[str, Any], key: str, size: int) -> list[Any] | None:
    if key not in values:
        return None
    items = _as_list(key, values[key])
    if len(items) != size:
        raise AuditInputError(f"{key!r} has {len(items)} entries for {size} samples")
    return items


def _check_labels(groups: list[Any]) -> None:
    for i, label in enumerate(groups):
        if label is None or isinstance(label, float) and math.isnan(label):
            raise AuditInputError(f"'uid': row {i} has no group label ({label!r})")
        if isinstance(label, (list, dict)):
            raise AuditInputError(f"'uid': row {i}: a group label must be a string or number")

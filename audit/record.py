"""Writing one training step's batch in a container the audit reads without unpickling.

``record(batch, path, config=...)`` takes a verl ``DataProto``, a ``TensorDict`` or a plain
dict and writes, by the suffix of ``path``:

- ``.safetensors`` plus a JSON sidecar ``<stem>.json`` (the recommended format);
- ``.npz`` (numpy, no pickle; the JSON goes into the entry ``__rlconform__``);
- ``.pt`` (``torch.save`` of tensors and plain values only: it loads with ``weights_only``).

Tensors are stored as they are (dtype kept; bfloat16 in ``.npz`` as its 16-bit pattern).
Per-sample non-tensor values of plain scalars (``uid``, ``sample_id``, reward extras) go
into the JSON; other non-tensor entries (prompts as chat messages, images) are skipped
with a warning, as the audit never reads them. A plain dict may hold ragged per-sample
lists of 1-D tensors (slime's layout): they are right-padded with 0, and an
``attention_mask`` with no prompt part (1 on each sample's tokens) is added when none is
given. The input batch is never modified.
"""

from __future__ import annotations

import dataclasses
import json
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rlconform.audit.load import FORMAT, META_KEY, AuditInputError, parts

SUFFIXES = (".safetensors", ".npz", ".pt")


def _plain(value: Any) -> Any:
    """A JSON-able copy of a config-like value (mapping, dataclass, OmegaConf node)."""
    if hasattr(value, "_metadata") and type(value).__module__.startswith("omegaconf"):
        from omegaconf import OmegaConf

        return OmegaConf.to_container(value, resolve=True)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return value.item()
    return value


def _json_ready(name: str, value: Any) -> Any:
    try:
        json.dumps(value, allow_nan=True)
    except (TypeError, ValueError) as exc:
        raise AuditInputError(f"record: {name} is not JSON-serialisable: {exc}") from None
    return value


def _scalar_items(values: list[Any]) -> bool:
    return all(v is None or isinstance(v, (str, int, float, bool)) for v in values)


def _ragged(key: str, rows: list[Any]) -> torch.Tensor:
    """Per-sample 1-D tensors right-padded with 0 into (B, R)."""
    width = max((len(r) for r in rows), default=0)
    dtype = rows[0].dtype if rows else torch.float32
    out = torch.zeros((len(rows), width), dtype=dtype)
    for i, row in enumerate(rows):
        if row.dim() != 1:
            raise AuditInputError(f"record: {key!r} sample {i}: expected a 1-D tensor per sample")
        out[i, : len(row)] = row.detach().cpu()
    return out


def _collect(batch: Any) -> tuple[dict[str, torch.Tensor], dict[str, list[Any]], list[str]]:
    """(tensors, per-sample plain values, skipped keys) of a DataProto, TensorDict or dict."""
    tensor_part, non_tensor, _ = parts(batch)
    if tensor_part is None:
        raise AuditInputError(
            f"record: expected a DataProto, TensorDict or dict, got {type(batch).__name__}"
        )
    tensors: dict[str, torch.Tensor] = {}
    values: dict[str, list[Any]] = {}
    skipped: list[str] = []
    ragged_lengths: dict[str, list[int]] = {}
    for source in (tensor_part, non_tensor):
        for key, value in source.items():
            if key in ("config", "metrics"):
                continue
            if isinstance(value, torch.Tensor):
                tensors[key] = value.detach().cpu()
            elif isinstance(value, np.ndarray) and value.dtype.kind in "biuf":
                tensors[key] = torch.from_numpy(np.array(value))
            elif isinstance(value, (int, float)) and not isinstance(value, bool):
                tensors[key] = torch.tensor(float(value), dtype=torch.float64)
            else:
                items = value.tolist() if isinstance(value, np.ndarray) else value
                if (
                    isinstance(items, (list, tuple))
                    and items
                    and all(isinstance(r, torch.Tensor) for r in items)
                ):
                    tensors[key] = _ragged(key, list(items))
                    ragged_lengths[key] = [len(r) for r in items]
                elif isinstance(items, (list, tuple)) and _scalar_items(list(items)):
                    values[key] = [_plain(v) for v in items]
                else:
                    skipped.append(key)
    _check_ragged(ragged_lengths)
    if ragged_lengths and "attention_mask" not in tensors:
        lengths = next(iter(ragged_lengths.values()))
        width = max(lengths, default=0)
        columns = torch.arange(width).unsqueeze(0)
        tensors["attention_mask"] = (columns < torch.tensor(lengths).unsqueeze(1)).to(torch.int64)
    return tensors, values, skipped


def _check_ragged(lengths: dict[str, list[int]]) -> None:
    if not lengths:
        return
    first_key, first = next(iter(lengths.items()))
    for key, other in lengths.items():
        if len(other) != len(first):
            raise AuditInputError(
                f"record: {key!r} has {len(other)} samples, {first_key!r} has {len(first)}"
            )
        for i, (a, b) in enumerate(zip(first, other)):
            if a != b:
                raise AuditInputError(
                    f"record: sample {i}: {key!r} has {b} tokens, {first_key!r} has {a}"
                )


def _check_rows(tensors: dict[str, torch.Tensor], values: dict[str, list[Any]]) -> None:
    """Every tensor (but 0-d scalars) and every per-sample value has one row per sample."""
    rows = {k: int(v.shape[0]) for k, v in tensors.items() if v.dim() > 0}
    rows.update({k: len(v) for k, v in values.items()})
    if len(set(rows.values())) <= 1:
        return
    anchor = next((k for k in ("attention_mask", "responses", "input_ids") if k in rows), None)
    anchor = anchor or max(rows, key=lambda k: list(rows.values()).count(rows[k]))
    odd = sorted(k for k, n in rows.items() if n != rows[anchor])
    raise AuditInputError(
        f"record: {odd[0]!r} has {rows[odd[0]]} rows, {anchor!r} has {rows[anchor]} "
        f"(every tensor and per-sample value has one row per sample; also off: "
        f"{', '.join(map(repr, odd[1:])) or 'none'})"
    )


def record(
    batch: Any,
    path: str | Path,
    *,
    config: Any = None,
    metrics: Mapping[str, Any] | None = None,
) -> Path:
    """Write ``batch`` (and the step's ``config`` and ``metrics``) to ``path`` for an audit.

    ``config``: the parameters the step used (verl names: ``adv_estimator``, ``gamma``,
    ``lam``, ``norm_adv_by_std_in_grpo``, ``use_kl_in_reward``, ``kl_penalty``, ``kl_coef``,
    ``loss_agg_mode`` ...), a mapping, a dataclass (verl's ``AlgoConfig``) or an OmegaConf
    node. ``metrics``: recorded scalars the audit can check (``actor/reward_kl_penalty``,
    ``train_rollout_logprob_abs_diff``). Returns the path written.
    """
    path = Path(path)
    if path.suffix not in SUFFIXES:
        raise AuditInputError(f"record: {path} must end in one of {', '.join(SUFFIXES)}")
    tensors, values, skipped = _collect(batch)
    _check_rows(tensors, values)
    if skipped:
        warnings.warn(
            f"rlconform.audit.record: not recorded (not tensors or plain per-sample values): "
            f"{', '.join(sorted(skipped))}",
            stacklevel=2,
        )
    plain_config = _plain(config) if config is not None else {}
    meta = {
        "format": FORMAT,
        "per_sample": _json_ready("per-sample values", values),
        "config": _json_ready("config", plain_config),
        "metrics": _json_ready("metrics", _plain(dict(metrics or {}))),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".safetensors":
        _write_safetensors(path, tensors, meta)
    elif path.suffix == ".npz":
        _write_npz(path, tensors, meta)
    else:
        torch.save(
            {
                "batch": {k: v.contiguous() for k, v in tensors.items()},
                "non_tensor_batch": values,
                "config": meta["config"],
                "metrics": meta["metrics"],
            },
            path,
        )
    return path


def _write_safetensors(path: Path, tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> None:
    from safetensors.torch import save_file

    save_file({k: v.contiguous().clone() for k, v in tensors.items()}, str(path))
    path.with_suffix(".json").write_text(json.dumps(meta, indent=1, allow_nan=True) + "\n")


def _write_npz(path: Path, tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> None:
    arrays: dict[str, np.ndarray] = {}
    dtypes: dict[str, str] = {}
    for key, tensor in tensors.items():
        if tensor.dtype == torch.bfloat16:
            arrays[key] = tensor.contiguous().view(torch.int16).numpy()
            dtypes[key] = "bfloat16"
        else:
            arrays[key] = tensor.contiguous().numpy()
    if dtypes:
        meta = {**meta, "dtypes": dtypes}
    arrays[META_KEY] = np.array(json.dumps(meta, allow_nan=True))
    with open(path, "wb") as handle:
        np.savez(handle, **arrays)

"""Reading a recorded batch without executing anything in it (CONTRACT §5, issue "audit").

Four containers, each read by a reader that cannot run code from the file:

- a ``torch.save`` file (``.pt``, ``.pth``, any other name): ``torch.load(weights_only=True)``,
  which unpickles only tensors, containers and plain values. A file that needs more (a
  pickled ``DataProto``, a numpy object array, a malicious ``__reduce__``) is refused
  before anything in it runs, unless the caller allows unsafe unpickling.
- safetensors (``.safetensors``) with a JSON sidecar ``<stem>.json`` for everything that
  is not a tensor (config, per-sample ids, metrics).
- ``.npz``, read with ``allow_pickle=False``; a reserved entry ``__rlconform__`` holds the
  same JSON as a sidecar.
- a ``TensorDict`` saved with ``memmap`` (a folder with ``meta.json``), read from its JSON
  metadata and raw ``.memmap`` files by this module, never by ``TensorDict.load_memmap``
  (which unpickles ``other.pickle`` files and picks classes by the names in the metadata).

The file is opened read-only and never modified. Every failure is an ``AuditInputError``
with a one-line message naming the file (and the key, where there is one).
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import warnings
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rlconform.adapters.base import SetupError

META_KEY = "__rlconform__"
FORMAT = "rlconform-audit/1"

_TORCH_DTYPES: dict[str, torch.dtype] = {
    name: getattr(torch, name)
    for name in (
        "float64",
        "float32",
        "float16",
        "bfloat16",
        "int64",
        "int32",
        "int16",
        "int8",
        "uint8",
        "bool",
    )
}


class AuditInputError(SetupError):
    """The recorded batch cannot be read or is not something the audit can check (exit 2)."""


@dataclasses.dataclass
class Recorded:
    """What a container holds: tensors by key, non-tensor values by key, config, metrics."""

    source: str
    container: str
    tensors: dict[str, torch.Tensor]
    values: dict[str, Any]
    config: dict[str, Any]
    metrics: dict[str, Any]
    notes: list[str] = dataclasses.field(default_factory=list)


def load(path: str | Path, *, allow_unsafe_pickle: bool = False) -> Recorded:
    """Read the recorded batch at ``path`` (see the module docstring for the containers)."""
    path = Path(path)
    if not path.exists():
        raise AuditInputError(f"{path}: no such file or folder")
    if path.is_dir():
        return _load_memmap_folder(path, allow_unsafe_pickle)
    if path.stat().st_size == 0:
        raise AuditInputError(f"{path}: the file is empty")
    if path.suffix == ".safetensors":
        return _load_safetensors(path)
    if path.suffix == ".npz":
        return _load_npz(path, allow_unsafe_pickle)
    if path.suffix == ".json":
        raise AuditInputError(
            f"{path}: a JSON file is a sidecar; pass the .safetensors file it belongs to"
        )
    return _load_torch(path, allow_unsafe_pickle)


# ---------------------------------------------------------------------------------------
# torch.save


_REFUSED = (
    "refused: {path} needs more than weights_only loading ({why}); nothing in it was "
    "executed. Record the batch with rlconform.audit.record, or pass --allow-unsafe-pickle "
    "if you trust the file"
)


def _unpickle_reason(exc: BaseException) -> str:
    """What a weights_only load stumbled on, in a few words."""
    text = str(exc)
    found = re.search(r"GLOBAL ([\w.]+)", text)
    if found:
        return f"it references {found.group(1)}"
    found = re.search(r"WeightsUnpickler error: \s*([^\n]+)", text)
    if found and found.group(1).strip():
        return f"unpickler: {found.group(1).strip()}"
    return "it is not a torch.save file of tensors and plain values"


def _load_torch(path: Path, allow_unsafe_pickle: bool) -> Recorded:
    with path.open("rb") as handle:
        header = handle.read(4)
    is_zip = zipfile.is_zipfile(path)
    if not is_zip:
        if header.startswith(b"PK"):
            raise AuditInputError(
                f"{path}: unreadable (truncated or corrupt torch.save file: no zip directory)"
            )
        if not (header[:1] == b"\x80" and header[1:2] in (b"\x02", b"\x03", b"\x04", b"\x05")):
            raise AuditInputError(
                f"{path}: unreadable (not a torch.save file, .safetensors, .npz or memmap folder)"
            )
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            obj = torch.load(path, map_location="cpu", weights_only=True, mmap=is_zip)
    except Exception as exc:
        if allow_unsafe_pickle and not is_zip:
            return from_object(path, "pickle", _load_plain_pickle(path))
        if not _is_unpickling_refusal(exc):
            raise AuditInputError(_unreadable(path, exc)) from None
        if not allow_unsafe_pickle:
            raise AuditInputError(_REFUSED.format(path=path, why=_unpickle_reason(exc))) from None
        obj = _load_torch_unsafe(path)
    return from_object(path, "torch.save", obj)


def _is_unpickling_refusal(exc: BaseException) -> bool:
    import pickle

    return isinstance(exc, pickle.UnpicklingError) and "Weights only load failed" in str(exc)


def _load_torch_unsafe(path: Path) -> Any:
    try:
        return torch.load(path, map_location="cpu", weights_only=False)
    except Exception as exc:
        raise AuditInputError(_unreadable(path, exc)) from None


def _load_plain_pickle(path: Path) -> Any:
    """A plain ``pickle.dump`` file (``--allow-unsafe-pickle`` only: it runs the file's code)."""
    import pickle

    try:
        with path.open("rb") as handle:
            return pickle.load(handle)
    except Exception as exc:
        first = (str(exc).splitlines() or [""])[0][:160]
        raise AuditInputError(
            f"{path}: unreadable (neither a torch.save file nor a plain pickle): "
            f"{type(exc).__name__}: {first}"
        ) from None


def _unreadable(path: Path, exc: BaseException) -> str:
    first = (str(exc).splitlines() or [""])[0][:160]
    return (
        f"{path}: unreadable (truncated or corrupt torch.save file): {type(exc).__name__}: {first}"
    )


# ---------------------------------------------------------------------------------------
# safetensors + sidecar


def _load_safetensors(path: Path) -> Recorded:
    try:
        from safetensors import SafetensorError
        from safetensors.torch import load_file
    except ImportError:
        raise AuditInputError(
            f"{path}: reading .safetensors needs the safetensors package (pip install safetensors)"
        ) from None
    try:
        tensors = load_file(str(path), device="cpu")
    except (SafetensorError, OSError, ValueError, RuntimeError) as exc:
        first = (str(exc).splitlines() or [""])[0][:160]
        raise AuditInputError(
            f"{path}: unreadable (truncated or corrupt safetensors file): {first}"
        ) from None
    sidecar = path.with_suffix(".json")
    meta = _read_json(sidecar) if sidecar.exists() else {}
    recorded = _from_meta(path, "safetensors", tensors, meta, sidecar.name)
    if not sidecar.exists():
        recorded.notes.append(
            f"no sidecar {sidecar.name} beside {path.name}: no config, per-sample values or "
            "metrics were read; the audit assumes verl's defaults (use_kl_in_reward off, no "
            "adv_estimator): pass --config, or record with rlconform.audit.record"
        )
    return recorded


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise AuditInputError(f"{path}: not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise AuditInputError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data


def _from_meta(
    path: Path, container: str, tensors: dict[str, torch.Tensor], meta: dict[str, Any], where: str
) -> Recorded:
    """Tensors plus the sidecar JSON (``per_sample``, ``config``, ``metrics``, ``dtypes``)."""
    known = {"format", "per_sample", "config", "metrics", "dtypes"}
    extra = sorted(set(meta) - known)
    if extra:
        raise AuditInputError(
            f"{path}: {where} has unknown entries {extra} (known: {sorted(known)})"
        )
    per_sample = meta.get("per_sample", {})
    for name in ("per_sample", "config", "metrics", "dtypes"):
        if not isinstance(meta.get(name, {}), dict):
            raise AuditInputError(f"{path}: {where} entry {name!r} must be a JSON object")
    overlap = sorted(set(per_sample) & set(tensors))
    if overlap:
        raise AuditInputError(f"{path}: {overlap} recorded both as tensors and in {where}")
    for key, dtype in meta.get("dtypes", {}).items():
        tensors[key] = _restore_dtype(path, key, tensors, dtype)
    return Recorded(
        str(path),
        container,
        tensors,
        dict(per_sample),
        dict(meta.get("config", {})),
        dict(meta.get("metrics", {})),
    )


def _restore_dtype(path: Path, key: str, tensors: dict[str, torch.Tensor], dtype: str) -> Any:
    """A tensor stored as raw 16-bit integers because its container lacks the dtype."""
    if key not in tensors or dtype not in ("bfloat16", "float16"):
        raise AuditInputError(f"{path}: dtypes entry {key!r}: {dtype!r} for no stored tensor")
    stored = tensors[key]
    if stored.dtype != torch.int16:
        raise AuditInputError(f"{path}: {key!r} is {stored.dtype}, expected its int16 storage")
    return stored.view(_TORCH_DTYPES[dtype])


# ---------------------------------------------------------------------------------------
# .npz


def _load_npz(path: Path, allow_unsafe_pickle: bool) -> Recorded:
    try:
        archive = np.load(path, allow_pickle=allow_unsafe_pickle)
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
        raise AuditInputError(f"{path}: unreadable (truncated or corrupt .npz): {exc}") from None
    tensors: dict[str, torch.Tensor] = {}
    values: dict[str, Any] = {}
    meta: dict[str, Any] = {}
    with archive:
        for key in archive.files:
            try:
                array = archive[key]
            except ValueError as exc:
                if "allow_pickle" in str(exc):
                    raise AuditInputError(
                        _REFUSED.format(path=path, why=f"entry {key!r} is a pickled object array")
                    ) from None
                raise AuditInputError(f"{path}: entry {key!r} unreadable: {exc}") from None
            except (OSError, zipfile.BadZipFile, EOFError) as exc:
                raise AuditInputError(
                    f"{path}: entry {key!r} truncated or corrupt: {exc}"
                ) from None
            if key == META_KEY:
                meta = _npz_meta(path, array)
            elif array.dtype.kind in "biuf":
                tensors[key] = torch.from_numpy(np.array(array))
            elif array.dtype.kind in "UO":
                values[key] = array.tolist()
            else:
                raise AuditInputError(f"{path}: entry {key!r} has unsupported dtype {array.dtype}")
    recorded = _from_meta(path, "npz", tensors, meta, META_KEY)
    recorded.values.update(values)
    return recorded


def _npz_meta(path: Path, array: np.ndarray) -> dict[str, Any]:
    if array.dtype.kind != "U" or array.shape != ():
        raise AuditInputError(f"{path}: entry {META_KEY!r} must be a 0-d unicode array of JSON")
    try:
        data = json.loads(str(array))
    except json.JSONDecodeError as exc:
        raise AuditInputError(f"{path}: entry {META_KEY!r} is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise AuditInputError(f"{path}: entry {META_KEY!r} must hold a JSON object")
    return data


# ---------------------------------------------------------------------------------------
# TensorDict memmap folder


def _load_memmap_folder(path: Path, allow_unsafe_pickle: bool) -> Recorded:
    if not (path / "meta.json").exists():
        raise AuditInputError(f"{path}: a folder without meta.json is not a TensorDict memmap")
    pickles = sorted(str(p.relative_to(path)) for p in path.rglob("*.pickle"))
    if pickles:
        if not allow_unsafe_pickle:
            raise AuditInputError(
                _REFUSED.format(path=path, why=f"it holds pickled entries {pickles}")
            )
        return _load_memmap_unsafe(path)
    tensors: dict[str, torch.Tensor] = {}
    values: dict[str, Any] = {}
    _read_memmap_node(path, path, "", tensors, values)
    config = values.pop("config", {})
    metrics = values.pop("metrics", {})
    if not isinstance(config, dict) or not isinstance(metrics, dict):
        raise AuditInputError(f"{path}: 'config' and 'metrics' must be mappings")
    return Recorded(str(path), "memmap", tensors, values, config, metrics)


def _read_memmap_node(
    root: Path, folder: Path, prefix: str, tensors: dict[str, torch.Tensor], values: dict[str, Any]
) -> None:
    meta = _read_json(folder / "meta.json")
    kind = str(meta.get("_type", ""))
    if "NonTensorData" in kind or "NonTensorStack" in kind:
        if "data" not in meta or isinstance(meta["data"], str) and "Stack" in kind:
            raise AuditInputError(f"{root}: entry {prefix!r} stores its data outside meta.json")
        values[prefix] = meta["data"]
        return
    if "TensorDict" not in kind:
        raise AuditInputError(f"{root}: entry {prefix or '/'!r} has unsupported type {kind!r}")
    for key, entry in meta.items():
        if key in ("shape", "device", "_type") or not isinstance(entry, dict):
            continue
        name = f"{prefix}.{key}" if prefix else key
        if "type" in entry:
            sub = folder / key
            if not (sub / "meta.json").exists():
                raise AuditInputError(f"{root}: entry {name!r}: missing {sub / 'meta.json'}")
            _read_memmap_node(root, sub, name, tensors, values)
        else:
            tensors[name] = _read_memmap_tensor(root, folder / f"{key}.memmap", name, entry)


def _read_memmap_tensor(root: Path, file: Path, name: str, entry: dict[str, Any]) -> torch.Tensor:
    if entry.get("is_nested"):
        raise AuditInputError(f"{root}: entry {name!r} is a nested tensor (unsupported)")
    dtype_name = str(entry.get("dtype", "")).replace("torch.", "")
    shape = entry.get("shape")
    if dtype_name not in _TORCH_DTYPES or not isinstance(shape, list):
        raise AuditInputError(f"{root}: entry {name!r} has unsupported dtype or shape in meta.json")
    dtype = _TORCH_DTYPES[dtype_name]
    numel = math.prod(int(n) for n in shape)
    itemsize = torch.empty((), dtype=dtype).element_size()
    size = file.stat().st_size if file.exists() else -1
    if size != numel * itemsize:
        found = "missing" if size < 0 else f"{size} bytes"
        raise AuditInputError(
            f"{root}: entry {name!r}: {file.name} is {found}, expected {numel * itemsize} bytes "
            f"for shape {shape} {dtype_name} (truncated?)"
        )
    if numel == 0:
        return torch.empty(shape, dtype=dtype)
    return torch.from_file(str(file), shared=False, size=numel, dtype=dtype).view(shape)


def _load_memmap_unsafe(path: Path) -> Recorded:
    from tensordict import TensorDict

    try:
        td = TensorDict.load_memmap(path)
    except Exception as exc:
        raise AuditInputError(f"{path}: unreadable memmap folder: {exc}") from None
    return from_object(path, "memmap", td)


# ---------------------------------------------------------------------------------------
# From a loaded object (torch.save payload, or an unsafe load) to a Recorded.


def from_object(path: Path, container: str, obj: Any) -> Recorded:
    """Flatten a loaded object: a dict of keys, a DataProto-like dict or object, a TensorDict."""
    batch, non_tensor, meta = parts(obj)
    if batch is None:
        raise AuditInputError(
            f"{path}: holds a {type(obj).__name__}, expected a mapping of keys to tensors"
        )
    tensors: dict[str, torch.Tensor] = {}
    values: dict[str, Any] = {}
    for source in (batch, non_tensor):
        for key, value in source.items():
            if not isinstance(key, str):
                raise AuditInputError(f"{path}: key {key!r} is not a string")
            if isinstance(value, torch.Tensor):
                tensors[key] = value
            elif isinstance(value, np.ndarray) and value.dtype.kind in "biuf":
                tensors[key] = torch.from_numpy(value)
            elif isinstance(value, np.ndarray):
                values[key] = value.tolist()
            else:
                values[key] = value
    config = values.pop("config", meta.get("config", {}))
    metrics = values.pop("metrics", meta.get("metrics", {}))
    if not isinstance(config, Mapping) or not isinstance(metrics, Mapping):
        raise AuditInputError(f"{path}: 'config' and 'metrics' must be mappings")
    return Recorded(str(path), container, tensors, values, dict(config), dict(metrics))


def parts(obj: Any) -> tuple[Mapping | None, Mapping, Mapping]:
    """(tensor-ish mapping, non-tensor mapping, meta mapping) of a loaded object."""
    if hasattr(obj, "batch") and hasattr(obj, "non_tensor_batch"):  # a verl DataProto
        batch = _tensordict_items(obj.batch) if obj.batch is not None else {}
        return batch, dict(obj.non_tensor_batch or {}), dict(obj.meta_info or {})
    if _is_tensordict(obj):
        return _tensordict_items(obj), {}, {}
    if isinstance(obj, Mapping):
        if "batch" in obj and isinstance(obj["batch"], Mapping):
            meta = obj.get("meta_info", {})
            rest = {
                k: v for k, v in obj.items() if k not in ("batch", "non_tensor_batch", "meta_info")
            }
            non_tensor = {**dict(obj.get("non_tensor_batch", {})), **rest}
            return dict(obj["batch"]), non_tensor, meta if isinstance(meta, Mapping) else {}
        return dict(obj), {}, {}
    return None, {}, {}


def _is_tensordict(obj: Any) -> bool:
    try:
        from tensordict import TensorDictBase
    except ImportError:
        return False
    return isinstance(obj, TensorDictBase)


def _tensordict_items(td: Any) -> dict[str, Any]:
    """Leaf entries of a TensorDict by dotted key; non-tensor data as plain values."""
    from tensordict import NonTensorData, NonTensorStack

    out: dict[str, Any] = {}
    for key in td.keys(include_nested=True, leaves_only=True):
        name = ".".join(key) if isinstance(key, tuple) else key
        value = td.get(key)
        if isinstance(value, NonTensorStack):
            out[name] = value.tolist()
        elif isinstance(value, NonTensorData):
            out[name] = value.data
        else:
            out[name] = value
    return out

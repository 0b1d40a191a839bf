"""The bad-input corpus: every entry gets a clear one-line message naming the key or the
sample (exit 2), or a reported violation / warning (exit 1 / 0), never a traceback, and the
recorded file is never modified. ``CORPUS`` is counted in the README."""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from rlconform.audit import record
from rlconform.audit.load import FORMAT, META_KEY, AuditInputError
from rlconform.conformance.cli import main
from tests.audit.batches import derive, grpo_step, needs_safetensors

Step = dict[str, Any]


def _write(step: Step, path: Path) -> Path:
    tensors = {k: v for k, v in step.items() if k not in ("config", "metrics")}
    record(tensors, path, config=step.get("config"), metrics=step.get("metrics"))
    return path


def _recorded(change: Callable[[Step], None], suffix: str = ".npz"):
    """A file writer: the clean step, changed, recorded."""

    def write(folder: Path) -> Path:
        step = grpo_step()
        change(step)
        return _write(step, folder / f"step{suffix}")

    return write


def _unchecked(change: Callable[[Step], None]):
    """A file writer for a batch ``record()`` refuses (rows that disagree): the audit must
    still refuse the file another tool wrote. The .npz is written as record() lays it out."""

    def write(folder: Path) -> Path:
        step = grpo_step()
        change(step)
        tensors = {k: v for k, v in step.items() if k not in ("config", "metrics")}
        path = folder / "step.npz"
        arrays = {k: v.numpy() for k, v in tensors.items() if isinstance(v, torch.Tensor)}
        per_sample = {k: list(v) for k, v in tensors.items() if not isinstance(v, torch.Tensor)}
        meta = {"format": FORMAT, "per_sample": per_sample, "config": step["config"]}
        arrays[META_KEY] = np.array(json.dumps(meta))
        np.savez(path, **arrays)
        return path

    return write


def test_record_refuses_rows_that_disagree(tmp_path):
    for key, value in (("advantages", lambda s: s["advantages"][:11]), ("uid", None)):
        step = grpo_step()
        step[key] = value(step) if value else step[key][:11]
        tensors = {k: v for k, v in step.items() if k not in ("config", "metrics")}
        with pytest.raises(AuditInputError, match=f"record: '{key}' has 11 rows, "):
            record(tensors, tmp_path / "step.npz", config=step["config"])
        assert not (tmp_path / "step.npz").exists()


def test_a_verl_config_object_is_recorded_and_audited_whole(tmp_path, capsys):
    """verl's AlgoConfig (flat, with `_target_` and keys the audit does not read) is the
    trainer's config: recorded as it is, and accepted as --config too."""
    step = grpo_step()
    tensors = {k: v for k, v in step.items() if k not in ("config", "metrics")}
    algo = {
        "_target_": "verl.trainer.config.AlgoConfig",
        **step["config"],
        "use_pf_ppo": False,
        "filter_groups": None,
    }
    path = record(tensors, tmp_path / "step.npz", config=algo, metrics=step["metrics"])
    config = tmp_path / "algo.json"
    config.write_text(json.dumps(algo))
    assert main(["audit", str(path)]) == 0
    assert main(["audit", str(path), "--config", str(config)]) == 0
    assert "unknown key" not in capsys.readouterr().err


def _bytes(data: bytes, name: str = "step.pt"):
    def write(folder: Path) -> Path:
        path = folder / name
        path.write_bytes(data)
        return path

    return write


def _truncated(suffix: str):
    def write(folder: Path) -> Path:
        path = _write(grpo_step(), folder / f"step{suffix}")
        data = path.read_bytes()
        path.write_bytes(data[: len(data) * 2 // 3])
        return path

    return write


def _memmap(change: Callable[[Path], None]):
    def write(folder: Path) -> Path:
        from tensordict import TensorDict

        step = grpo_step()
        td = TensorDict({"response_mask": step["response_mask"]}, batch_size=[12])
        path = folder / "step"
        td.memmap(path)
        change(path)
        return path

    return write


def _sidecar(text: str):
    def write(folder: Path) -> Path:
        path = _write(grpo_step(), folder / "step.safetensors")
        path.with_suffix(".json").write_text(text)
        return path

    return write


def _torch_save(obj: Any):
    def write(folder: Path) -> Path:
        path = folder / "step.pt"
        torch.save(obj, path)
        return path

    return write


def _set(key: str, value: Callable[[Step], Any]) -> Callable[[Step], None]:
    def change(step: Step) -> None:
        step[key] = value(step)

    return change


def _plain_pickle(folder: Path) -> Path:
    """The clean step written with plain ``pickle`` (not torch.save)."""
    import pickle

    path = folder / "step.pkl"
    step = grpo_step()
    with path.open("wb") as handle:
        pickle.dump({k: v for k, v in step.items() if k != "metrics"}, handle)
    return path


def _without_sidecar(folder: Path) -> Path:
    """The clean step as .safetensors, its JSON sidecar deleted."""
    path = _write(grpo_step(), folder / "step.safetensors")
    path.with_suffix(".json").unlink()
    return path


def _config(**entries: Any) -> Callable[[Step], None]:
    def change(step: Step) -> None:
        step["config"] = {**step["config"], **entries}

    return change


def _drop(*keys: str) -> Callable[[Step], None]:
    def change(step: Step) -> None:
        for key in keys:
            step.pop(key)

    return change


def _garbage_npz(folder: Path) -> Path:
    path = folder / "step.npz"
    np.savez(path, uid=np.array(["a", {"b": 1}], dtype=object))
    return path


def _empty_folder(folder: Path) -> Path:
    path = folder / "nothing"
    path.mkdir()
    return path


def _pickled_memmap_entry(path: Path) -> None:
    (path / "uid").mkdir()
    (path / "uid" / "meta.json").write_text('{"_type": "NonTensorData"}')
    (path / "uid" / "other.pickle").write_bytes(b"\x80\x04K\x01.")


def _short_memmap_file(path: Path) -> None:
    target = path / "response_mask.memmap"
    target.write_bytes(target.read_bytes()[:10])


def _mask(value: float, row: int = 3, col: int = 2) -> Callable[[Step], Any]:
    def build(step: Step) -> torch.Tensor:
        mask = step["response_mask"].clone().float()
        mask[row, col] = value
        return mask

    return build


def _attention_value(step: Step) -> torch.Tensor:
    attention = step["attention_mask"].clone()
    attention[4, 6] = 2
    return attention


def _response_mask_in_padding(step: Step) -> torch.Tensor:
    mask = step["response_mask"].clone()
    mask[9, -1] = 1  # row 9 is shorter than the width
    return mask


def _attention_hole(step: Step) -> torch.Tensor:
    attention = step["attention_mask"].clone()
    attention[0, 5 + 3] = 0  # a hole in the response part of a full-length row
    return attention


def _nan_padding(key: str) -> Callable[[Step], Any]:
    def build(step: Step) -> torch.Tensor:
        values = step[key].clone()
        values[9, -1] = float("nan")
        return values

    return build


def _split_group(step: Step) -> None:
    for key in list(step):
        value = step[key]
        if isinstance(value, torch.Tensor) and value.dim() >= 1 and value.shape[0] == 12:
            step[key] = value[1:]
        elif isinstance(value, list):
            step[key] = value[1:]
    step["config"] = {**step["config"], "rollout_n": 4}
    step.pop("pg_loss")
    step["metrics"] = {}


def _empty_response_scored(step: Step) -> None:
    """Row 8 aborted (L = 0) but scored, its score at column -1 as verl writes it."""
    attention = step["attention_mask"].clone()
    attention[8, 5:] = 0
    step["attention_mask"] = attention
    for key in ("response_mask", "responses"):
        step[key] = step[key].clone()
        step[key][8] = 0
    step["input_ids"] = torch.cat([step["prompts"], step["responses"]], dim=1)
    step["position_ids"] = (attention.cumsum(dim=1) - 1).clamp(min=0)
    scores = torch.zeros_like(step["token_level_scores"])
    scores[:8] = step["token_level_scores"][:8]
    scores[9:] = step["token_level_scores"][9:]
    scores[8, -1] = 1.0
    step["token_level_scores"] = scores
    step.update(derive(step))


def _duplicate_ids(step: Step) -> None:
    step["sample_id"] = ["same"] * 12


# (id, writer, extra CLI args, expected exit code, fragment of the message or report)
CORPUS: list[Any] = [
    # unreadable or refused files
    ("empty file", _bytes(b""), [], 2, "the file is empty"),
    ("garbage bytes", _bytes(random.Random(0).randbytes(2048)), [], 2, "not a torch.save file"),
    pytest.param(
        "garbage safetensors",
        _bytes(random.Random(1).randbytes(2048), "step.safetensors"),
        [],
        2,
        "corrupt safetensors",
        marks=needs_safetensors,
    ),
    ("garbage npz", _bytes(b"PK\x03\x04" + bytes(100), "step.npz"), [], 2, "corrupt .npz"),
    ("truncated torch.save", _truncated(".pt"), [], 2, "truncated"),
    pytest.param(
        "truncated safetensors",
        _truncated(".safetensors"),
        [],
        2,
        "truncated",
        marks=needs_safetensors,
    ),
    ("truncated npz", _truncated(".npz"), [], 2, "truncated"),
    ("missing file", lambda folder: folder / "absent.pt", [], 2, "no such file"),
    ("folder without meta.json", _empty_folder, [], 2, "without meta.json"),
    ("memmap with a pickle", _memmap(_pickled_memmap_entry), [], 2, "holds pickled entries"),
    ("memmap file too short", _memmap(_short_memmap_file), [], 2, "truncated?"),
    pytest.param(
        "sidecar not JSON", _sidecar("{not json"), [], 2, "not valid JSON", marks=needs_safetensors
    ),
    pytest.param(
        "sidecar unknown entry",
        _sidecar('{"surprise": 1}'),
        [],
        2,
        "unknown entries",
        marks=needs_safetensors,
    ),
    ("npz object array", _garbage_npz, [], 2, "pickled object array"),
    ("torch.save of a list", _torch_save([torch.zeros(2)]), [], 2, "expected a mapping"),
    ("a sidecar passed", _bytes(b"{}", "step.json"), [], 2, "is a sidecar"),
    # shapes, lengths, dtypes, masks
    (
        "wrong shape",
        _recorded(_set("advantages", lambda s: torch.zeros(12, 13))),
        [],
        2,
        "'advantages': shape (12, 13), expected (B, R) = (12, 12)",
    ),
    (
        "1-D response_mask",
        _recorded(_set("response_mask", lambda s: torch.ones(12, dtype=torch.int64))),
        [],
        2,
        "'response_mask': expected shape (B, R)",
    ),
    (
        "rows mismatch",
        _unchecked(_set("advantages", lambda s: s["advantages"][:11])),
        [],
        2,
        "'advantages' has 11 rows",
    ),
    (
        "uid too short",
        _unchecked(_set("uid", lambda s: s["uid"][:11])),
        [],
        2,
        "'uid' has 11 entries",
    ),
    (
        "non-binary response_mask",
        _recorded(_set("response_mask", _mask(0.5))),
        [],
        2,
        "'response_mask': row 3, column 2: value 0.5 is not 0 or 1",
    ),
    (
        "non-binary attention_mask",
        _recorded(_set("attention_mask", _attention_value)),
        [],
        2,
        "'attention_mask': row 4, column 6: value 2",
    ),
    (
        "attention narrower than R",
        _recorded(_set("attention_mask", lambda s: s["attention_mask"][:, :8])),
        [],
        2,
        "'attention_mask': shape (12, 8)",
    ),
    (
        "input_ids width",
        _recorded(_set("input_ids", lambda s: s["input_ids"][:, 1:])),
        [],
        2,
        "'input_ids': shape (12, 16)",
    ),
    (
        "empty batch",
        _recorded(
            lambda s: s.update(
                {
                    k: (v[:0] if isinstance(v, (torch.Tensor, list)) and k != "pg_loss" else v)
                    for k, v in s.items()
                }
            )
        ),
        [],
        2,
        "0 samples",
    ),
    (
        "int advantages",
        _recorded(_set("advantages", lambda s: s["advantages"].long())),
        [],
        2,
        "'advantages': dtype torch.int64, expected a floating-point dtype",
    ),
    (
        "float token ids",
        _recorded(_set("responses", lambda s: s["responses"].float())),
        [],
        2,
        "'responses': dtype torch.float32, expected integer token ids",
    ),
    (
        "scalar per-sample key",
        _recorded(_set("values", lambda s: torch.tensor(1.0))),
        [],
        2,
        "'values': a scalar where one row per sample is expected",
    ),
    (
        "loss not a scalar",
        _unchecked(_set("pg_loss", lambda s: torch.zeros(2))),
        [],
        2,
        "'pg_loss': expected one scalar",
    ),
    (
        "missing group label",
        _recorded(_set("uid", lambda s: [None] + s["uid"][1:])),
        [],
        2,
        "'uid': row 0",
    ),
    (
        "no per-token key",
        _recorded(_drop(*[k for k in grpo_step() if k not in ("uid", "config", "sample_id")])),
        [],
        2,
        "nothing to audit",
    ),
    (
        "response_length out of range",
        _recorded(_set("response_length", lambda s: torch.full((12,), 13))),
        [],
        2,
        "'response_length': row 0 is 13, outside [0, R = 12]",
    ),
    (
        "response_length disagrees with attention_mask",
        _recorded(_set("response_length", lambda s: torch.full((12,), 12))),
        [],
        2,
        "'response_length': row 1 says 12, attention_mask says",
    ),
    (
        "no mask",
        _recorded(_drop("attention_mask", "response_mask")),
        [],
        2,
        "response lengths are unknown",
    ),
    # the config
    (
        "unknown estimator",
        _recorded(_config(adv_estimator="grpo_plus")),
        [],
        2,
        "'adv_estimator': 'grpo_plus' is not an estimator the contract knows",
    ),
    ("gamma not a number", _recorded(_config(gamma="0.99")), [], 2, "config 'gamma'"),
    ("gamma NaN", _recorded(_config(gamma=float("nan"))), [], 2, "expected a finite number"),
    ("unknown KL estimator", _recorded(_config(kl_penalty="k9")), [], 2, "config 'kl_penalty'"),
    ("unknown agg mode", _recorded(_config(loss_agg_mode="mean")), [], 2, "config 'loss_agg_mode'"),
    (
        "flag not a bool",
        _recorded(_config(use_kl_in_reward="yes")),
        [],
        2,
        "expected true or false",
    ),
    ("config file not JSON", _recorded(lambda s: None), ["--config", "{bad}.json"], 2, "not valid"),
    (
        "config file a list",
        _recorded(lambda s: None),
        ["--config", "[list].json"],
        2,
        "expected a mapping",
    ),
    ("negative --max-report", _recorded(lambda s: None), ["--max-report", "-1"], 2, "--max-report"),
    (
        "misspelt config key",
        _recorded(lambda s: None),
        ["--config", "{typo}.json"],
        2,
        "unknown key 'gama' (did you mean 'gamma'?)",
    ),
    ("unknown --profile", _recorded(lambda s: None), ["--profile", "verll"], 2, "'verl'"),
    (
        "--profile not a profile",
        _recorded(lambda s: None),
        ["--profile", "rlconform.audit.config:PLACEMENTS"],
        2,
        "neither a Profile nor a target",
    ),
    (
        "plain pickle without --allow-unsafe-pickle",
        lambda folder: _plain_pickle(folder),
        [],
        2,
        "pass --allow-unsafe-pickle if you trust the file",
    ),
    # reported as violations (exit 1) or warnings (exit 0)
    (
        "action token at padding",
        _recorded(_set("response_mask", _response_mask_in_padding)),
        [],
        1,
        "mask.response_from_attention",
    ),
    (
        "hole in the attention response",
        _recorded(_set("attention_mask", _attention_hole)),
        [],
        1,
        "is not right-padded",
    ),
    (
        "NaN advantage at padding",
        _recorded(_set("advantages", _nan_padding("advantages"))),
        [],
        1,
        "grpo_zero_off_actions",
    ),
    (
        "unknown keys",
        _recorded(_set("my_debug_tensor", lambda s: torch.zeros(12))),
        [],
        0,
        "my_debug_tensor",
    ),
    ("group split across dumps", _recorded(_split_group), [], 0, "split across dumps"),
    ("duplicate sample ids", _recorded(_duplicate_ids), [], 0, "sample_id has duplicates"),
    (
        "KL in reward without a coefficient",
        _recorded(lambda s: s["config"].pop("kl_coef")),
        [],
        0,
        "use_kl_in_reward without kl_coef",
    ),
    (
        "scored empty response, --fail-on nominal",
        _recorded(_empty_response_scored),
        ["--fail-on", "nominal"],
        0,
        "reward.place_last                [edge]",
    ),
    (
        "whole trainer config with unread keys",
        _recorded(lambda s: None),
        ["--config", "{whole}.json"],
        0,
        "clean: 8 clause(s) checked",
    ),
    (
        "plain pickle with --allow-unsafe-pickle",
        lambda folder: _plain_pickle(folder),
        ["--allow-unsafe-pickle"],
        0,
        "pickle · profile torchref · 12 samples",
    ),
    (
        "--profile of a target class",
        _recorded(lambda s: None),
        ["--profile", "rlconform.adapters.oracle_target:OracleTarget"],
        0,
        "profile oracle",
    ),
    (
        "safetensors without its sidecar",
        lambda folder: _without_sidecar(folder),
        [],
        1,
        "note: no sidecar step.json beside step.safetensors",
    ),
    (
        "NaN log-probs at padding",
        _recorded(_set("old_log_probs", _nan_padding("old_log_probs"))),
        [],
        0,
        "clean",
    ),
]


def _digest(path: Path) -> str:
    if not path.exists():
        return ""
    files = sorted(path.rglob("*")) if path.is_dir() else [path, path.with_suffix(".json")]
    h = hashlib.sha256()
    for f in files:
        if f.is_file():
            h.update(f.name.encode() + f.read_bytes())
    return h.hexdigest()


def _config_files(folder: Path, args: list[str]) -> list[str]:
    out = []
    for arg in args:
        if arg.startswith("{bad}"):
            (folder / "bad.json").write_text("{bad")
            out.append(str(folder / "bad.json"))
        elif arg.startswith("{typo}"):
            (folder / "typo.json").write_text(json.dumps({"gama": 0.9}))
            out.append(str(folder / "typo.json"))
        elif arg.startswith("{whole}"):
            whole = {"algorithm": {"gamma": 1.0, "kl_ctrl": {"type": "fixed"}}, "trainer": {"x": 1}}
            (folder / "whole.json").write_text(json.dumps(whole))
            out.append(str(folder / "whole.json"))
        elif arg.startswith("[list]"):
            (folder / "list.json").write_text(json.dumps([1, 2]))
            out.append(str(folder / "list.json"))
        else:
            out.append(arg)
    return out


def _name(entry: Any) -> str:
    return entry.values[0] if hasattr(entry, "values") else entry[0]


@pytest.mark.parametrize(
    "name, write, args, code, fragment", CORPUS, ids=[_name(c) for c in CORPUS]
)
def test_bad_input(tmp_path, capsys, name, write, args, code, fragment):
    path = write(tmp_path)
    before = _digest(path)
    result = main(["audit", str(path), *_config_files(tmp_path, args)])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    assert result == code, out + err
    if code == 2:
        lines = [line for line in err.splitlines() if line.strip()]
        assert len(lines) == 1, err
        assert fragment in lines[0], lines[0]
    else:
        assert fragment in out, out
    assert _digest(path) == before, "the audit modified its input"


def test_corpus_size():
    """The README counts this corpus: keep the number there in step."""
    assert len(CORPUS) == 60
    assert len({_name(c) for c in CORPUS}) == len(CORPUS)

"""Containers, record(), config files and report files of the audit."""

from __future__ import annotations

import hashlib
import importlib.util
import json

import pytest
import torch

from rlconform.adapters.torchref import TorchRef
from rlconform.audit import audit, record
from rlconform.audit.load import load
from rlconform.conformance.cli import main
from tests.audit.batches import SUFFIXES, grpo_step

REF = TorchRef()


def _tensors(step):
    return {k: v for k, v in step.items() if k not in ("config", "metrics")}


def _sha(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("suffix", SUFFIXES)
def test_record_round_trip_keeps_values_and_dtypes(tmp_path, suffix):
    step = grpo_step()
    step["advantages"] = step["advantages"].to(torch.bfloat16)
    path = record(
        _tensors(step), tmp_path / f"step{suffix}", config=step["config"], metrics=step["metrics"]
    )
    recorded = load(path)
    for key, value in _tensors(step).items():
        if isinstance(value, torch.Tensor):
            assert recorded.tensors[key].dtype == value.dtype, key
            assert torch.equal(recorded.tensors[key], value), key
        else:
            assert recorded.values[key] == value, key
    assert recorded.config == step["config"]
    assert recorded.metrics == step["metrics"]
    digest = _sha(path)
    assert audit(path).exit_code == 0
    assert _sha(path) == digest


def test_in_memory_batch_is_not_modified():
    step = grpo_step()
    copies = {k: v.clone() for k, v in step.items() if isinstance(v, torch.Tensor)}
    audit(step)
    for key, value in copies.items():
        assert torch.equal(step[key], value), key


def test_tensordict_memmap_folder(tmp_path):
    from tensordict import NonTensorData, NonTensorStack, TensorDict

    step = grpo_step()
    tensors = {k: v for k, v in _tensors(step).items() if isinstance(v, torch.Tensor)}
    tensors.pop("pg_loss")
    td = TensorDict(tensors, batch_size=[len(step["uid"])])
    td["uid"] = NonTensorStack(*[NonTensorData(u) for u in step["uid"]])
    td["config"] = NonTensorData(step["config"], batch_size=td.batch_size)
    td.memmap(tmp_path / "step")
    report = audit(tmp_path / "step")
    assert report.container == "memmap"
    assert report.exit_code == 0
    assert {c.clause for c in report.clauses if c.status == "pass"} >= {"adv.grpo", "kl.in_reward"}


def test_record_from_a_tensordict(tmp_path):
    from tensordict import TensorDict

    step = grpo_step()
    tensors = {k: v for k, v in _tensors(step).items() if isinstance(v, torch.Tensor)}
    tensors.pop("pg_loss")
    td = TensorDict(tensors, batch_size=[len(step["uid"])])
    path = record(td, tmp_path / "step.npz", config=step["config"])
    assert set(load(path).tensors) == set(tensors)


def test_record_ragged_per_sample_lists(tmp_path):
    """slime's layout: one 1-D tensor per sample (response tokens only), scalar rewards."""
    step = grpo_step()
    prompt_width = step["prompts"].shape[1]
    lengths = step["attention_mask"][:, prompt_width:].sum(dim=1).tolist()
    rows = lambda key: [step[key][i, :n] for i, n in enumerate(lengths)]  # noqa: E731
    scores = step["token_level_scores"].sum(dim=1)
    rewards = REF.place_reward_last(
        scores, step["attention_mask"][:, prompt_width:], step["response_mask"]
    )
    advantages, _ = REF.advantage_grpo(rewards, step["response_mask"], step["uid"])
    ragged = {
        "response_mask": rows("response_mask"),
        "old_log_probs": rows("old_log_probs"),
        "advantages": [advantages[i, :n] for i, n in enumerate(lengths)],
        "scores": scores.tolist(),
        "uid": step["uid"],
    }
    path = record(ragged, tmp_path / "step.npz", config={"adv_estimator": "grpo"})
    recorded = load(path)
    assert recorded.tensors["attention_mask"].sum(dim=1).tolist() == lengths
    for profile in ("slime", "torchref"):
        report = audit(path, profile=profile)
        assert {c.clause: c.status for c in report.clauses}["adv.grpo"] == "pass", profile
        assert "scores placed by the oracle" in next(
            c.detail for c in report.clauses if c.clause == "adv.grpo"
        )


def test_record_ragged_lengths_must_agree(tmp_path):
    ragged = {
        "response_mask": [torch.ones(3), torch.ones(2)],
        "advantages": [torch.ones(3), torch.ones(3)],
    }
    with pytest.raises(Exception, match="sample 1: 'advantages' has 3 tokens"):
        record(ragged, tmp_path / "step.npz")


def test_record_skips_what_the_audit_never_reads(tmp_path):
    step = _tensors(grpo_step())
    step["raw_prompt"] = [[{"role": "user", "content": "hi"}]] * len(step["uid"])
    with pytest.warns(UserWarning, match="raw_prompt"):
        path = record(step, tmp_path / "step.npz")
    assert "raw_prompt" not in load(path).values


def test_record_needs_a_known_suffix(tmp_path):
    with pytest.raises(Exception, match="must end in one of"):
        record(_tensors(grpo_step()), tmp_path / "step.pkl")


YAML = importlib.util.find_spec("yaml") is not None


@pytest.mark.parametrize(
    "suffix",
    [
        ".json",
        ".toml",
        pytest.param(".yaml", marks=pytest.mark.skipif(not YAML, reason="no PyYAML")),
    ],
)
def test_config_file_merges_over_the_recorded_config(tmp_path, capsys, suffix):
    step = grpo_step()
    path = record(_tensors(step), tmp_path / "step.npz", metrics=step["metrics"])
    assert main(["audit", str(path)]) == 1  # no config recorded: KL off, equality fails
    capsys.readouterr()
    config = tmp_path / f"config{suffix}"
    if suffix == ".json":
        config.write_text(json.dumps({"algorithm": step["config"]}))
    elif suffix == ".toml":
        lines = ["[algorithm]"] + [f"{k} = {json.dumps(v)}" for k, v in step["config"].items()]
        config.write_text("\n".join(lines) + "\n")
    else:
        lines = ["algorithm:"] + [f"  {k}: {json.dumps(v)}" for k, v in step["config"].items()]
        config.write_text("\n".join(lines) + "\n")
    assert main(["audit", str(path), "--config", str(config)]) == 0


def test_json_and_markdown_reports(tmp_path, capsys):
    step = grpo_step()
    step["advantages"] = -step["advantages"]
    path = record(
        _tensors(step),
        tmp_path / "step.npz",
        config=step["config"],
        metrics=step["metrics"],
    )
    out_json, out_md = tmp_path / "r.json", tmp_path / "r.md"
    code = main(
        [
            "audit",
            str(path),
            "--json",
            str(out_json),
            "--markdown",
            str(out_md),
            "--max-report",
            "2",
        ]
    )
    assert code == 1
    report = json.loads(out_json.read_text())
    assert set(report) >= {
        "source",
        "profile",
        "samples",
        "tokens",
        "clauses",
        "summary",
        "exit_code",
        "fail_on",
    }
    grpo = next(c for c in report["clauses"] if c["clause"] == "adv.grpo")
    assert grpo["violating_samples"] > 2 and len(grpo["violations"]) == 2
    sample = grpo["violations"][0]
    assert set(sample) == {"row", "sample", "features", "severity", "checks"}
    assert set(sample["checks"][0]) >= {"check", "token", "expected", "recorded", "allowed"}
    assert "| `adv.grpo` | fail | nominal |" in out_md.read_text()
    assert "more sample(s) (--max-report)" in capsys.readouterr().out


def test_progress_is_reported():
    seen = []
    audit(grpo_step(), progress=lambda done, total: seen.append((done, total)))
    assert seen and seen[-1][0] == seen[-1][1]
    assert all(a <= b for (a, _), (b, _) in zip(seen, seen[1:]))


def test_an_unforeseen_failure_is_an_error_clause_not_a_traceback(monkeypatch):
    import rlconform.audit as audit_module

    def audit_broken(batch, profile, progress):
        raise RuntimeError("something the audit did not foresee")

    monkeypatch.setattr(audit_module, "AUDITS", (*audit_module.AUDITS, audit_broken))
    report = audit(grpo_step())
    broken = report.clauses[-1]
    assert (broken.clause, broken.status) == ("broken", "error")
    assert "RuntimeError: something the audit did not foresee" in broken.detail
    assert report.exit_code == 2

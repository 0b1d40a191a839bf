"""The "done when" cases of the audit issue, through the command line.

A clean recorded batch exits 0; a reward written into padding and a flipped advantage exit
1 naming both samples and their clauses; a malicious pickle, a garbage file and a truncated
file exit 2 with one-line reasons and nothing executed; a batch recorded through verl's own
functions audits clean (skipped without verl).
"""

from __future__ import annotations

import importlib.util
import json
import pickle
import random

import numpy as np
import pytest
import torch

from rlconform.audit import record
from rlconform.conformance.cli import main
from tests.audit.batches import SUFFIXES, derive, grpo_step

PROMPT_WIDTH = 5


def _record(step: dict, path) -> str:
    tensors = {k: v for k, v in step.items() if k not in ("config", "metrics")}
    record(tensors, path, config=step["config"], metrics=step["metrics"])
    return str(path)


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    return lines[0]


def test_clean_recorded_batch_exits_0(tmp_path, capsys):
    path = _record(grpo_step(), tmp_path / "step.npz")
    assert main(["audit", path]) == 0
    out = capsys.readouterr().out
    assert "clean: 8 clause(s) checked" in out


def test_padding_reward_and_flipped_advantage_exit_1_naming_both(tmp_path, capsys):
    step = grpo_step()
    lengths = step["attention_mask"][:, PROMPT_WIDTH:].sum(dim=1)
    scores = step["token_level_scores"].clone()
    moved = next(
        i
        for i in range(len(lengths))
        if lengths[i] < scores.shape[1] and scores[i, lengths[i] - 1] != 0
    )
    value = scores[moved, lengths[moved] - 1].item()
    scores[moved, lengths[moved] - 1] = 0.0
    scores[moved, -1] = value  # the reward written into padding
    step["token_level_scores"] = scores
    step = derive(step)  # the rest of the pipeline computes from what it was given
    advantages = step["advantages"].clone()
    flipped = 6
    assert bool((advantages[flipped] != 0).any())
    advantages[flipped] = -advantages[flipped]
    step["advantages"] = advantages
    path = _record(step, tmp_path / "step.npz")
    report_path = tmp_path / "report.json"
    assert main(["audit", path, "--json", str(report_path), "--max-report", "20"]) == 1
    out = capsys.readouterr().out
    report = json.loads(report_path.read_text())
    failing = {c["clause"]: c for c in report["clauses"] if c["status"] == "fail"}
    assert set(failing) == {"reward.place_last", "adv.grpo"}
    placement = failing["reward.place_last"]["violations"]
    assert [v["row"] for v in placement] == [moved]
    assert {v["check"] for v in placement[0]["checks"]} == {"padding_zero", "values"}
    name = f"{step['sample_id'][moved]!r} (row {moved}, group {step['uid'][moved]!r})"
    assert placement[0]["sample"] == name
    # torchref, like verl, sums the whole row, so the misplaced reward entered its group's
    # statistics: the group's advantages break too, graded hardening (padding_rewards);
    # the flipped sample is an ordinary one: nominal, and so is the clause.
    grpo = {v["row"]: v for v in failing["adv.grpo"]["violations"]}
    group = [i for i, label in enumerate(step["uid"]) if label == step["uid"][moved]]
    assert set(grpo) == {flipped, *group}
    assert grpo[flipped]["severity"] == "nominal"
    assert all("padding_rewards" in grpo[i]["features"] for i in group)
    assert all(grpo[i]["severity"] == "hardening" for i in group)
    assert failing["adv.grpo"]["severity"] == "nominal"
    assert failing["reward.place_last"]["severity"] == "nominal"
    for sample in (step["sample_id"][moved], step["sample_id"][flipped]):
        assert repr(sample) in out


class _Evil:
    """Unpickling this writes the marker file: the audit must never do that."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (exec, (f"open({self.marker!r}, 'w').close()",))


@pytest.mark.parametrize("container", ["torch.save", "pickle"])
def test_malicious_pickle_is_refused_and_never_executed(tmp_path, capsys, container):
    marker = tmp_path / "EXECUTED"
    path = tmp_path / "step.pt"
    payload = {"responses": torch.zeros(2, 3, dtype=torch.int64), "x": _Evil(marker)}
    if container == "torch.save":
        torch.save(payload, path)
    else:
        path.write_bytes(pickle.dumps(payload))
    before = path.read_bytes()
    assert main(["audit", str(path)]) == 2
    line = _one_line_error(capsys)
    assert "refused" in line and "nothing in it was executed" in line
    assert not marker.exists()
    assert path.read_bytes() == before


def test_the_marker_test_can_fail(tmp_path, capsys):
    """With --allow-unsafe-pickle the same file does run its code: the check above is real."""
    marker = tmp_path / "EXECUTED"
    path = tmp_path / "step.pt"
    torch.save({"responses": torch.zeros(2, 3, dtype=torch.int64), "x": _Evil(marker)}, path)
    main(["audit", str(path), "--allow-unsafe-pickle"])
    capsys.readouterr()
    assert marker.exists()


def test_numpy_object_arrays_need_the_unsafe_flag(tmp_path, capsys):
    step = grpo_step()
    tensors = {k: v for k, v in step.items() if k not in ("config", "metrics", "uid")}
    tensors["uid"] = np.array(step["uid"], dtype=object)
    tensors["config"] = step["config"]
    path = tmp_path / "step.pt"
    torch.save(tensors, path)
    assert main(["audit", str(path)]) == 2
    assert "references numpy" in _one_line_error(capsys)
    assert main(["audit", str(path), "--allow-unsafe-pickle"]) == 0


def test_garbage_file_exits_2(tmp_path, capsys):
    path = tmp_path / "step.pt"
    path.write_bytes(random.Random(0).randbytes(4096))
    assert main(["audit", str(path)]) == 2
    assert "unreadable" in _one_line_error(capsys)


@pytest.mark.parametrize("suffix", SUFFIXES)
def test_truncated_file_exits_2(tmp_path, capsys, suffix):
    path = tmp_path / f"step{suffix}"
    _record(grpo_step(), path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    assert main(["audit", str(path)]) == 2
    line = _one_line_error(capsys)
    assert "truncated" in line or "corrupt" in line


VERL = importlib.util.find_spec("verl") is not None


@pytest.mark.skipif(not VERL, reason="verl is not installed (pip install -e '.[verl]')")
@pytest.mark.parametrize("trainer", ["legacy", "v1"])
@pytest.mark.parametrize("suffix", SUFFIXES)
def test_batch_recorded_through_verl_audits_clean(tmp_path, capsys, suffix, trainer):
    """verl 0.9.1's own trainer functions make the step: assemble_rm_scores places the
    scores, apply_kl_penalty puts the KL into the reward, compute_advantage (GRPO) writes
    advantages and returns, agg_loss aggregates the per-token losses. One response ends in
    a tool observation, so its reward sits on a mask hole (credited, CONTRACT "Reward
    credit"). Recorded from the DataProto itself and audited with --profile verl: clean.
    ``v1``: only the fields verl's v1 trainer holds there, with response_length."""
    from tests.audit.verl_step import v1_view, verl_grpo_step

    data, config, metrics = verl_grpo_step()
    if trainer == "v1":
        data = v1_view(data)
    path = tmp_path / f"step{suffix}"
    record(data, path, config=config, metrics=metrics)
    report_path = tmp_path / "report.json"
    code = main(["audit", str(path), "--profile", "verl", "--json", str(report_path)])
    out = capsys.readouterr().out
    assert code == 0, out
    report = json.loads(report_path.read_text())
    passed = {c["clause"] for c in report["clauses"] if c["status"] == "pass"}
    expected = {
        "mask.response_from_attention",
        "reward.place_last",
        "kl.in_reward",
        "adv.grpo",
        "adv.invariants",
        "agg.token_mean",
    }
    assert expected | ({"layout.pad"} if trainer == "legacy" else set()) <= passed
    assert report["profile"] == "verl-0.9.1"

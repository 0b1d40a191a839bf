"""A fork's source tree and its own baseline: ``certify verl --framework-path COPY --baseline
B`` on a scratch copy of the installed verl package (not installed itself).

The fork carries one deliberate patch (GRPO with the population std) and declares it in B.
With B the patched copy exits 0; a second changed function (RLOO's leave-one-out scale)
exits 1 naming its clause and check; the pristine copy exits 1 with B's entry reported as
stale, by name. Needs verl."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

verl = pytest.importorskip("verl")

GRPO_STD = "id2std[idx] = torch.std(scores_tensor)"
GRPO_POPULATION_STD = "id2std[idx] = torch.std(scores_tensor, correction=0)"


def _copy(tmp_path: Path) -> Path:
    tree = tmp_path / "fork"
    shutil.copytree(
        Path(verl.__file__).parent, tree / "verl", ignore=shutil.ignore_patterns("__pycache__")
    )
    return tree


RLOO_SCALE = "scores[i] = scores[i] * response_num / (response_num - 1)"
RLOO_BROKEN = "scores[i] = scores[i] * (response_num - 1) / response_num"

FORK_BASELINE = """\
format = 1
target = "verl"

[[deviation]]
clause = "adv.grpo"
checks = ["advantages"]
features = []
rationale = "fork patch: GRPO divides by the population std (correction=0)"
"""


def _patch(tree: Path, function: str, old: str, new: str) -> None:
    """Replace the first ``old`` inside ``def function(`` of core_algos.py."""
    core_algos = tree / "verl" / "trainer" / "ppo" / "core_algos.py"
    source = core_algos.read_text(encoding="utf-8")
    start = source.index(f"def {function}(")
    at = source.index(old, start)
    assert source.find("\ndef ", start + 1) > at, (function, old)
    core_algos.write_text(source[:at] + new + source[at + len(old) :], encoding="utf-8")


def _certify(tree: Path, out: Path, baseline: Path) -> tuple[int, dict, str]:
    proc = subprocess.run(
        [
            str(Path(sys.executable).parent / "rlconform"),
            "certify",
            "verl",
            "--framework-path",
            str(tree),
            "--baseline",
            str(baseline),
            "--only",
            "adv.grpo,adv.rloo",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.exists(), proc.stderr[-2000:]
    return proc.returncode, json.loads(out.read_text()), proc.stdout


def _status(report: dict) -> dict[str, tuple[str, str | None]]:
    return {r["id"]: (r["status"], r.get("check")) for r in report["clauses"]}


def test_a_fork_baseline_passes_its_patch_and_fails_a_new_change(tmp_path):
    tree = _copy(tmp_path)
    baseline = tmp_path / "fork-baseline.toml"
    baseline.write_text(FORK_BASELINE, encoding="utf-8")
    _patch(tree, "compute_grpo_outcome_advantage", GRPO_STD, GRPO_POPULATION_STD)

    code, report, _ = _certify(tree, tmp_path / "fork.json", baseline)
    assert report["target"]["framework_path"] == str(tree.resolve())
    assert report["target"]["location"] == str((tree / "verl").resolve())
    assert code == 0, report["clauses"]
    assert _status(report)["adv.grpo"][0] == "deviation"
    assert _status(report)["adv.rloo"][0] == "pass"

    _patch(tree, "compute_rloo_outcome_advantage", RLOO_SCALE, RLOO_BROKEN)
    code, report, stdout = _certify(tree, tmp_path / "changed.json", baseline)
    assert code == 1
    assert _status(report)["adv.rloo"] == ("fail", "advantages")
    assert _status(report)["adv.grpo"][0] == "deviation"
    assert "adv.rloo" in stdout


def test_a_stale_fork_entry_is_reported_by_name(tmp_path):
    tree = _copy(tmp_path)
    baseline = tmp_path / "fork-baseline.toml"
    baseline.write_text(FORK_BASELINE, encoding="utf-8")
    code, report, _ = _certify(tree, tmp_path / "pristine.json", baseline)
    assert code == 1
    (grpo,) = [r for r in report["clauses"] if r["id"] == "adv.grpo"]
    assert grpo["status"] == "fail"
    assert "stale" in grpo["message"]
    assert "fork patch: GRPO divides by the population std" in grpo["message"]

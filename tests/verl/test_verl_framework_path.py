"""A fork's source tree: ``certify verl --framework-path COPY`` on a scratch copy of the
installed verl package (not installed itself) exits 0 against the shipped baseline, and
exits 1 naming the clause and check once one function in the copy is changed. Needs verl."""

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


def _certify(tree: Path, out: Path) -> tuple[int, dict]:
    proc = subprocess.run(
        [
            str(Path(sys.executable).parent / "rlconform"),
            "certify",
            "verl",
            "--framework-path",
            str(tree),
            "--only",
            "adv.grpo",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.exists(), proc.stderr[-2000:]
    return proc.returncode, json.loads(out.read_text())


def test_a_changed_copy_fails_its_clause_and_the_unchanged_copy_passes(tmp_path):
    tree = _copy(tmp_path)
    code, report = _certify(tree, tmp_path / "same.json")
    assert report["target"]["framework_path"] == str(tree.resolve())
    assert report["target"]["location"] == str((tree / "verl").resolve())
    assert code == 0, report["clauses"]

    core_algos = tree / "verl" / "trainer" / "ppo" / "core_algos.py"
    source = core_algos.read_text(encoding="utf-8")
    assert GRPO_STD in source
    core_algos.write_text(source.replace(GRPO_STD, GRPO_POPULATION_STD), encoding="utf-8")
    code, report = _certify(tree, tmp_path / "changed.json")
    assert code == 1
    (result,) = report["clauses"]
    assert (result["id"], result["status"], result["check"]) == ("adv.grpo", "fail", "advantages")

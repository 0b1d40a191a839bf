"""The pytest11 plugin route: a fork runs the certification inside its own pytest run."""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _pytest(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "rlconform", str(tmp_path), *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_plugin_passes_on_torchref_and_tags_junit_with_clause_ids(tmp_path):
    junit = tmp_path / "junit.xml"
    run = _pytest(
        tmp_path,
        "--rlc-target",
        "torchref",
        "--rlc-only",
        "reward.place_last",
        f"--junitxml={junit}",
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "rlconform target: torchref" in run.stdout
    case = next(ET.parse(junit).getroot().iter("testcase"))
    assert case.get("name") == "reward.place_last"
    props = {p.get("name"): p.get("value") for p in case.iter("property")}
    assert props["clause"] == "reward.place_last"


def test_plugin_fails_on_broken_target_with_reproducer(tmp_path):
    run = _pytest(
        tmp_path,
        "--rlc-target",
        "tests.engine.targets:broken_reward_target",
        "--rlc-only",
        "reward.place_last",
    )
    assert run.returncode == 1, run.stdout + run.stderr
    assert "[reward.place_last]" in run.stdout
    assert "replay('reward.place_last'" in run.stdout


def test_plugin_is_inert_without_target(tmp_path):
    (tmp_path / "test_x.py").write_text("def test_x():\n    pass\n")
    run = _pytest(tmp_path)
    assert run.returncode == 0
    assert "1 passed" in run.stdout

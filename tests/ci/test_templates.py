"""The CI templates' commands work: run the same scripts the templates run."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CI = ROOT / "ci"


def _run(script: str, tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    bin_dir = str(Path(sys.executable).parent)
    full_env = dict(
        os.environ, PATH=bin_dir + os.pathsep + os.environ["PATH"], PYTHONPATH=str(ROOT)
    )
    full_env.pop("GITHUB_STEP_SUMMARY", None)
    full_env.update(env)
    return subprocess.run(
        ["bash", str(CI / script)],
        cwd=tmp_path,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_templates_call_the_shared_script():
    for template in ("github-actions.yml", "gitlab-ci.yml"):
        text = (CI / template).read_text()
        assert "bash ci/rlconform-certify.sh" in text
        assert "RLC_TARGET" in text
        assert "rlc-out" in text


def test_certify_script_passes_and_writes_reports(tmp_path):
    summary = tmp_path / "step-summary.md"
    run = _run(
        "rlconform-certify.sh",
        tmp_path,
        RLC_TARGET="torchref",
        RLC_ONLY="reward.*",
        RLC_OUT="out",
        GITHUB_STEP_SUMMARY=str(summary),
    )
    assert run.returncode == 0, run.stdout + run.stderr
    report = json.loads((tmp_path / "out" / "rlc-report.json").read_text())
    assert report["target"]["name"] == "torchref"
    ET.parse(tmp_path / "out" / "rlc-junit.xml")
    assert "rlconform certification: torchref" in summary.read_text()


def test_certify_script_fails_on_a_broken_target(tmp_path):
    run = _run(
        "rlconform-certify.sh",
        tmp_path,
        RLC_TARGET="tests.engine.targets:broken_reward_target",
        RLC_ONLY="reward.place_last",
    )
    assert run.returncode == 1, run.stdout + run.stderr
    report = json.loads((tmp_path / "rlc-out" / "rlc-report.json").read_text())
    assert report["summary"]["fail"] == 1


def test_certify_script_needs_a_target(tmp_path):
    run = _run("rlconform-certify.sh", tmp_path)
    assert run.returncode != 0
    assert "RLC_TARGET" in run.stderr


def test_pytest_plugin_script(tmp_path):
    run = _run("pytest-plugin.sh", tmp_path, RLC_TARGET="torchref", RLC_ONLY="reward.place_last")
    assert run.returncode == 0, run.stdout + run.stderr
    junit = ET.parse(tmp_path / "rlc-out" / "rlc-pytest-junit.xml").getroot()
    assert [c.get("name") for c in junit.iter("testcase")] == ["reward.place_last"]


def _yaml(name: str) -> dict:
    yaml = __import__("pytest").importorskip("yaml")
    return yaml.safe_load((CI / name).read_text())


def test_github_workflow_wires_reports_to_the_script_outputs():
    workflow = _yaml("github-actions.yml")
    job = workflow["jobs"]["certify"]
    out = job["env"]["RLC_OUT"]
    steps = {step.get("name"): step for step in job["steps"]}
    certify = steps["Certify the postprocess contract (with the committed baseline)"]
    regenerate = steps["Regenerate the baseline"]
    assert certify["run"].strip() == regenerate["run"].strip() == "bash ci/rlconform-certify.sh"
    assert job["env"]["RLC_BASELINE"] == "rlconform-baseline.toml"
    assert regenerate["env"]["RLC_WRITE_BASELINE"].startswith(out + "/")
    assert "regenerate_baseline" in regenerate["if"] and "regenerate_baseline" in certify["if"]
    upload = steps["Upload reports (and a regenerated baseline)"]
    assert upload["if"] == "always()" and upload["with"]["path"].rstrip("/") == out
    junit = steps["Publish JUnit"]
    assert junit["if"] == "always()" and junit["with"]["report_paths"] == f"{out}/rlc-junit.xml"


def test_gitlab_job_wires_reports_to_the_script_outputs():
    job = _yaml("gitlab-ci.yml")["rlconform"]
    out = job["variables"]["RLC_OUT"]
    assert "bash ci/rlconform-certify.sh" in job["script"]
    assert job["artifacts"]["when"] == "always"
    assert job["artifacts"]["paths"] == [f"{out}/"]
    assert job["artifacts"]["reports"]["junit"] == f"{out}/rlc-junit.xml"


def test_script_writes_the_files_the_templates_publish(tmp_path):
    run = _run(
        "rlconform-certify.sh", tmp_path, RLC_TARGET="oracle", RLC_ONLY="mask.loss", RLC_OUT="x"
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert sorted(p.name for p in (tmp_path / "x").iterdir()) == [
        "rlc-junit.xml",
        "rlc-report.json",
        "rlc-summary.md",
    ]


def test_fork_workflow_regenerate_then_certify_with_the_committed_baseline(tmp_path):
    """A scratch fork: regenerate its baseline, commit it, certify with it; a new break of
    another check fails, and so does a stale entry once the inherited break is fixed."""
    fork = tmp_path / "fork"
    fork.mkdir()
    common = {"RLC_ONLY": "reward.place_last", "RLC_OUT": "out"}
    regenerate = _run(
        "rlconform-certify.sh",
        fork,
        RLC_TARGET="tests.engine.targets:edge_reward_target",
        RLC_WRITE_BASELINE="rlconform-baseline.toml",
        **common,
    )
    assert regenerate.returncode == 0, regenerate.stdout + regenerate.stderr
    baseline = (fork / "rlconform-baseline.toml").read_text()
    assert 'clause = "reward.place_last"' in baseline and '"empty_response"' in baseline

    # the fork reviews the entry (its own rationale) and regenerates: the review survives
    path = fork / "rlconform-baseline.toml"
    reviewed = re.sub(
        r'rationale = ".*"', 'rationale = "reviewed: verl writes column -1"', baseline
    )
    assert reviewed != baseline
    path.write_text(reviewed)
    again = _run(
        "rlconform-certify.sh",
        fork,
        RLC_TARGET="tests.engine.targets:edge_reward_target",
        RLC_WRITE_BASELINE="rlconform-baseline.toml",
        **common,
    )
    assert again.returncode == 0, again.stdout + again.stderr
    assert 'rationale = "reviewed: verl writes column -1"' in path.read_text()

    inherited = _run(
        "rlconform-certify.sh", fork, RLC_TARGET="tests.engine.targets:edge_reward_target", **common
    )
    assert inherited.returncode == 0, inherited.stdout + inherited.stderr
    report = json.loads((fork / "out" / "rlc-report.json").read_text())
    assert report["clauses"][0]["status"] == "deviation"
    assert report["target"]["baselines"] == "rlconform-baseline.toml"

    new_break = _run(
        "rlconform-certify.sh",
        fork,
        RLC_TARGET="tests.engine.targets:broken_reward_target",
        **common,
    )
    assert new_break.returncode == 1
    fixed = _run("rlconform-certify.sh", fork, RLC_TARGET="torchref", **common)
    assert fixed.returncode == 1
    (entry,) = json.loads((fork / "out" / "rlc-report.json").read_text())["clauses"]
    assert "stale deviation" in entry["message"]

    # --fail-on nominal: the inherited edge break would not fail the job even undeclared.
    (fork / "rlconform-baseline.toml").unlink()
    lenient = _run(
        "rlconform-certify.sh",
        fork,
        RLC_TARGET="tests.engine.targets:edge_reward_target",
        RLC_FAIL_ON="nominal",
        **common,
    )
    assert lenient.returncode == 0, lenient.stdout + lenient.stderr


def test_pytest_plugin_script_applies_the_fork_baseline(tmp_path):
    """The plugin route reads the same committed baseline as the certify script."""
    fork = tmp_path / "fork"
    fork.mkdir()
    env = {"RLC_ONLY": "reward.place_last", "RLC_OUT": "out"}
    target = "tests.engine.targets:edge_reward_target"
    written = _run(
        "rlconform-certify.sh",
        fork,
        RLC_TARGET=target,
        RLC_WRITE_BASELINE="rlconform-baseline.toml",
        **env,
    )
    assert written.returncode == 0, written.stdout + written.stderr
    run = _run("pytest-plugin.sh", fork, RLC_TARGET=target, **env)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "1 passed" in run.stdout
    (fork / "rlconform-baseline.toml").unlink()
    assert _run("pytest-plugin.sh", fork, RLC_TARGET=target, **env).returncode == 1

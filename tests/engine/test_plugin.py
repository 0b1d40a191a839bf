"""The pytest11 plugin route: a fork runs the certification inside its own pytest run."""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import tests.engine.targets  # noqa: F401  (imported before any pytester snapshot)
from rlconform.conformance.registry import load_all
from rlconform.conformance.runner import certify  # noqa: F401

ROOT = Path(__file__).resolve().parents[2]
load_all()  # before any pytester snapshot: see _inprocess


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


def _inprocess(pytester, *args: str) -> subprocess.CompletedProcess:
    """pytest with the plugin, in this process (pytester): torch and the clauses are imported
    once for every run of this file, where a subprocess imports them again each time. The
    clause modules are imported here first: pytester drops modules first imported by the
    inner run, and a clause module imported twice would register its clauses twice."""
    result = pytester.runpytest_inprocess("-p", "rlconform", "--rlc-max-examples", "8", *args)
    return subprocess.CompletedProcess(
        args, int(result.ret), "\n".join(result.outlines), "\n".join(result.errlines)
    )


_EDGE = "tests.engine.targets:edge_reward_target"
_BASELINE = """
format = 1
target = "reward-column-minus-1"
version = "1"

[[deviation]]
clause = "reward.place_last"
checks = ["padding_zero"]
features = ["empty_response"]
rationale = "L_i = 0 writes the score at column -1"
"""


def test_plugin_items_have_selectable_node_ids_and_true_collection_counts(pytester):
    listed = _inprocess(
        pytester, "--rlc-target", "torchref", "--rlc-only", "reward.*", "--collect-only", "-q"
    )
    assert listed.returncode == 0, listed.stdout + listed.stderr
    ids = [line for line in listed.stdout.splitlines() if line.startswith("rlconform::")]
    assert "rlconform::reward.place_last" in ids and len(ids) > 1
    assert f"{len(ids)} tests collected" in listed.stdout
    picked = _inprocess(pytester, "--rlc-target", "torchref", "-k", "place_last", "-q")
    assert picked.returncode == 0, picked.stdout + picked.stderr
    assert "1 passed" in picked.stdout and "deselected" in picked.stdout
    positional = _inprocess(pytester, "--rlc-target", "torchref", "rlconform::reward.place_last")
    assert positional.returncode == 0, positional.stdout + positional.stderr
    assert "1 passed" in positional.stdout
    folder = pytester.mkdir("rlconform")  # a real folder of that name stays a path
    (folder / "test_own.py").write_text("def test_own():\n    pass\n")
    own = _inprocess(pytester, "rlconform")
    assert own.returncode == 0 and "1 passed" in own.stdout, own.stdout + own.stderr


def test_plugin_last_failed_reruns_only_the_failed_clause(pytester):
    broken = ("--rlc-target", "tests.engine.targets:broken_reward_target")
    first = _inprocess(pytester, *broken, "--rlc-only", "reward.place_last,agg.token_mean")
    assert first.returncode == 1 and "1 failed, 1 passed" in first.stdout, first.stdout
    again = _inprocess(pytester, *broken, "--rlc-only", "reward.place_last,agg.token_mean", "--lf")
    assert "1 failed, 1 deselected" in again.stdout, again.stdout


def test_plugin_failure_below_fail_on_is_xfail_and_junit_names_the_class(pytester):
    junit = pytester.path / "junit.xml"
    run = _inprocess(
        pytester,
        "--rlc-target",
        _EDGE,
        "--rlc-only",
        "reward.place_last",
        "--rlc-fail-on",
        "nominal",
        "--rlc-seed",
        "3",
        f"--junitxml={junit}",
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "1 xfailed" in run.stdout and "seed 3" in run.stdout
    case = next(ET.parse(junit).getroot().iter("testcase"))
    assert case.get("classname") == "rlconform" and case.get("name") == "reward.place_last"
    assert case.find("skipped") is not None  # JUnit's form of xfail
    failing = _inprocess(pytester, "--rlc-target", _EDGE, "--rlc-only", "reward.place_last")
    assert failing.returncode == 1 and "[edge: empty_response" in failing.stdout


def test_plugin_baseline_declares_the_break(pytester):
    path = pytester.path / "baseline.toml"
    path.write_text(_BASELINE, encoding="utf-8")
    junit = pytester.path / "junit.xml"
    run = _inprocess(
        pytester,
        "--rlc-target",
        _EDGE,
        "--rlc-only",
        "reward.place_last",
        "--rlc-baseline",
        str(path),
        f"--junitxml={junit}",
    )
    assert run.returncode == 0, run.stdout + run.stderr
    props = {p.get("name"): p.get("value") for p in ET.parse(junit).getroot().iter("property")}
    assert props["status"] == "deviation" and "column -1" in props["deviation"]


def test_plugin_bad_options_are_one_usage_error_each(pytester):
    cases = {
        ("--rlc-target", "torchreff"): "did you mean 'torchref'",
        ("--rlc-target", "torchref", "--rlc-only", "adv.grop"): "matches no clause",
        ("--rlc-target", "torchref", "--rlc-profile", "fast"): "fast",
        ("--rlc-target", "torchref", "--rlc-baseline", "missing.toml"): "missing.toml",
        ("--rlc-target", "torchref", "--rlc-config", "nope"): "unknown trainer config 'nope'",
        ("--rlc-target", "torchref", "--rlc-framework-path", "nowhere"): "no such directory",
        ("--rlc-target", "torchref", "--rlc-fail-on-consequence", "loss"): "unknown loss",
        ("--rlc-target", "torchref", "--rlc-max-examples", "0"): "must be positive",
        ("rlconform::adv.grpo",): "give --rlc-target",
    }
    for args, words in cases.items():
        run = _inprocess(pytester, *args)
        errors = [line for line in run.stderr.splitlines() if line.startswith("ERROR: ")]
        assert run.returncode == 4 and len(errors) == 1, (args, run.stdout, run.stderr)
        assert "rlconform: " in errors[0] and words in errors[0], (args, errors)
        assert "Traceback" not in run.stdout + run.stderr, args

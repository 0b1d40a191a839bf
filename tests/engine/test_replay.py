"""Counterexamples a user can replay: the reproducer names the target by the spec the user
passed (a module:attribute target too), and ``rlconform replay REPORT.json CLAUSE`` re-runs
the report's minimal case (exit 1 while it fails, 0 once it passes, 2 on a bad call)."""

from __future__ import annotations

import json

from rlconform.conformance.cli import main

BROKEN = "tests.engine.targets:broken_reward_target"


def _certify(tmp_path, target):
    out = tmp_path / "report.json"
    code = main(["certify", target, "--only", "reward.place_last", "--json", str(out)])
    return code, json.loads(out.read_text())


def test_reproducer_names_the_spec_the_user_passed(tmp_path):
    code, report = _certify(tmp_path, BROKEN)
    assert code == 1
    (clause,) = report["clauses"]
    assert report["target"]["spec"] == BROKEN
    assert (
        f"replay('reward.place_last', {BROKEN!r}, case=" in clause["counterexample"]["reproducer"]
    )
    # the snippet runs as printed and raises the same mismatch
    namespace: dict = {}
    try:
        exec(clause["counterexample"]["reproducer"], namespace)  # noqa: S102
    except AssertionError as failure:
        assert "reward.place_last" in str(failure)
    else:
        raise AssertionError("the reproducer did not fail")


def test_replay_reruns_the_reports_case(tmp_path, capsys):
    _, _ = _certify(tmp_path, BROKEN)
    capsys.readouterr()
    assert main(["replay", str(tmp_path / "report.json"), "reward.place_last"]) == 1
    out = capsys.readouterr().out
    assert "replay('reward.place_last'" in out and "still fails" in out


def test_replay_of_a_fixed_target_passes(tmp_path, capsys):
    _, report = _certify(tmp_path, BROKEN)
    report["target"]["spec"] = "torchref"  # the fix landed: the same case on a correct target
    fixed = tmp_path / "fixed.json"
    fixed.write_text(json.dumps(report))
    assert main(["replay", str(fixed), "reward.place_last"]) == 0
    assert "passes now" in capsys.readouterr().out


def test_replay_usage_errors_exit_2(tmp_path, capsys):
    _certify(tmp_path, BROKEN)
    assert main(["replay", str(tmp_path / "report.json"), "adv.nope"]) == 2
    assert "no clause 'adv.nope'" in capsys.readouterr().err
    assert main(["replay", str(tmp_path / "missing.json"), "reward.place_last"]) == 2
    assert "cannot read the report" in capsys.readouterr().err

"""The CLI contract: flags, exit codes and report formats are fixed points."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from rlconform.conformance.cli import main


def test_certify_torchref_exit_0_and_json_schema(tmp_path):
    out = tmp_path / "r.json"
    assert main(["certify", "torchref", "--only", "reward.place_last", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    # the original schema, extended by the step area's "configs" (CONTRACT §0b) and what a
    # rerun needs ("run": conformance/run_record.py)
    assert set(report) == {"target", "clauses", "summary", "configs", "run"}
    assert set(report["configs"]) >= {"default"}
    # the fixed keys, plus how to load the target again (rlconform replay)
    assert set(report["target"]) == {"name", "version", "profile", "spec"}
    assert report["target"]["spec"] == "torchref"
    assert report["target"]["name"] == "torchref"
    assert report["target"]["profile"] == "ci"
    assert set(report["summary"]) == {
        "pass",
        "fail",
        "deviation",
        "skip",
        "error",
        "by_severity",
        "by_consequence",
    }
    for entry in report["clauses"]:
        assert {"id", "status", "message", "counterexample"} <= set(entry)
    first = report["clauses"][0]
    assert {k: first[k] for k in ("id", "status", "message", "counterexample")} == {
        "id": "reward.place_last",
        "status": "pass",
        "message": "",
        "counterexample": None,
    }
    assert first["severity"] is None and first["features"] == []


def test_certify_broken_target_exit_1_with_reports(tmp_path):
    paths = {fmt: tmp_path / f"r.{fmt}" for fmt in ("json", "xml", "md")}
    code = main(
        [
            "certify",
            "tests.engine.targets:broken_reward_target",
            "--only",
            "reward.*",
            "--json",
            str(paths["json"]),
            "--junit",
            str(paths["xml"]),
            "--markdown",
            str(paths["md"]),
        ]
    )
    assert code == 1
    report = json.loads(paths["json"].read_text())
    failing = [c for c in report["clauses"] if c["id"] == "reward.place_last"][0]
    assert failing["status"] == "fail"
    assert failing["counterexample"]["reproducer"].startswith("from rlconform")
    suite = ET.parse(paths["xml"]).getroot()
    case = [c for c in suite.iter("testcase") if c.get("name") == "reward.place_last"][0]
    assert case.find("failure") is not None
    assert "reward.place_last" in paths["md"].read_text()
    assert "**FAIL**" in paths["md"].read_text()


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["certify", "no-such-target"], "unknown target 'no-such-target'"),
        (["certify", "no_such_module_xyz:thing"], "cannot import 'no_such_module_xyz'"),
        (["certify", "tests.engine.targets:NOT_A_TARGET"], "neither a Target"),
        (["certify", "torchref", "--profile", "fast"], "invalid choice: 'fast'"),
        (["certify", "torchref", "--only", "zzz.*"], "matches no clause"),
        (["certify", "torchref", "--seed", "x"], "invalid int value"),
        (["frobnicate"], "invalid choice"),
    ],
)
def test_bad_input_exits_2_with_one_line(argv, needle, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert needle in err
    assert err.count("\n") == 1
    assert "Traceback" not in err


def test_cuda_without_gpu_is_a_setup_error(capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present; the setup error cannot happen here")
    assert main(["certify", "torchref", "--device", "cuda"]) == 2
    assert "no CUDA device" in capsys.readouterr().err


def test_clauses_json_lists_ids(capsys):
    assert main(["clauses", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {"id", "area", "title", "statement"} <= set(rows[0])
    assert "reward.place_last" in {r["id"] for r in rows}

"""CLI conventions users know: --version, "did you mean" for a misspelt target or clause,
and a module:attribute target importable from the current directory (as pytest does)."""

from __future__ import annotations

import json
import sys

import pytest

from rlconform.conformance.cli import main


def test_version(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.startswith("rlconform ")


def test_misspelt_target_gets_a_suggestion(capsys):
    assert main(["certify", "verll"]) == 2
    assert "did you mean 'verl'?" in capsys.readouterr().err


def test_misspelt_clause_gets_a_suggestion(capsys):
    assert main(["certify", "torchref", "--only", "adv.grpoo"]) == 2
    assert "did you mean 'adv.grpo'?" in capsys.readouterr().err


def test_module_target_in_the_current_directory(tmp_path, monkeypatch):
    (tmp_path / "my_trainer_target.py").write_text(
        "from rlconform.adapters.torchref import TorchRef\ntarget = TorchRef()\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    sys.modules.pop("my_trainer_target", None)
    try:
        assert main(["certify", "my_trainer_target:target", "--only", "adv.grpo"]) == 0
    finally:
        sys.modules.pop("my_trainer_target", None)


@pytest.mark.parametrize("spec", ["torchref", "oracle"])
def test_registered_names_need_no_cwd(spec, capsys):
    assert main(["certify", spec, "--only", "adv.grpo"]) == 0


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--max-examples", "0", "must be at least 1"),
        ("--max-examples", "many", "not a whole number"),
        ("--timeout", "-5", "must be a positive number of seconds"),
        ("--timeout", "soon", "not a number"),
    ],
)
def test_bad_limits_are_usage_errors(flag, value, message, capsys):
    assert main(["certify", "torchref", "--only", "adv.grpo", flag, value]) == 2
    err = capsys.readouterr().err
    assert message in err and flag in err and "Traceback" not in err


def test_limits_reach_the_run_and_the_report(tmp_path):
    """--max-examples and --timeout override the run profile; the report's run key records
    what a rerun needs."""
    out = tmp_path / "r.json"
    args = ["certify", "torchref", "--only", "adv.grpo", "--json", str(out), "--seed", "7"]
    assert main([*args, "--max-examples", "3", "--timeout", "60"]) == 0
    run = json.loads(out.read_text())["run"]
    assert run["run_profile"] == {
        "name": "ci",
        "max_examples": 3,
        "derandomize": True,
        "clause_time_limit_s": 60.0,
    }
    assert run["seed"] == 7 and run["device"] == "cpu"
    assert run["target_profile"]["grpo_std_ddof"] == 1
    assert run["rlconform"] and run["torch"] and run["started"].endswith("+00:00")
    import hypothesis

    assert run["hypothesis"] == hypothesis.__version__


def test_a_clause_past_the_timeout_is_an_error(tmp_path):
    out = tmp_path / "r.json"
    code = main(
        ["certify", "torchref", "--only", "adv.grpo", "--timeout", "0.001", "--json", str(out)]
    )
    (clause,) = json.loads(out.read_text())["clauses"]
    assert code == 1 and clause["status"] == "error"
    assert "timed out after 0.001 s" in clause["message"]


def test_a_long_clause_prints_a_heartbeat_and_the_run_its_total_time():
    import io
    import time

    from rlconform.conformance.registry import get
    from rlconform.conformance.report.console import ConsoleReporter
    from rlconform.conformance.results import ClauseResult, RunReport

    out = io.StringIO()
    reporter = ConsoleReporter(stream=out, total=1, heartbeat_s=0.05)
    reporter.on_start(get("adv.grpo"))
    time.sleep(0.3)
    reporter.on_result(ClauseResult("adv.grpo", "pass", duration_s=0.3))
    beats = out.getvalue().count("adv.grpo still running")
    time.sleep(0.2)  # the heartbeat stopped with the clause
    assert out.getvalue().count("adv.grpo still running") == beats >= 2
    reporter.final(RunReport(target={"name": "t", "version": "1"}, clauses=[]))
    assert out.getvalue().rstrip().splitlines()[-1].startswith("total time: ")


def test_a_closed_stdout_is_no_traceback():
    """``rlconform clauses --json | head -c 1``: the reader of stdout is gone (here before the
    first write, so the broken pipe is certain whatever the pipe's buffer size)."""
    import os
    import subprocess

    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        run = subprocess.run(
            [sys.executable, "-c", "from rlconform.conformance.cli import entry; entry()"]
            + ["clauses", "--json"],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
        )
    finally:
        os.close(write_end)
    assert run.returncode == 141, run.stderr
    assert "Traceback" not in run.stderr and "BrokenPipe" not in run.stderr, run.stderr

"""``certify --require AREA|GLOB``: listed clauses are mandatory (issue: no false green when an
operation disappears from a target)."""

from __future__ import annotations

import json

import pytest

from rlconform.conformance.cli import main

NO_GSPO = "tests.engine.targets:without_gspo_target"


def test_a_required_clause_the_target_skips_fails_the_run(tmp_path):
    out = tmp_path / "r.json"
    code = main(
        [
            "certify",
            NO_GSPO,
            "--only",
            "loss.gspo,loss.cispo",
            "--require",
            "loss",
            "--json",
            str(out),
        ]
    )
    results = {c["id"]: c for c in json.loads(out.read_text())["clauses"]}
    assert code == 1
    assert results["loss.gspo"]["status"] == "fail"
    assert "required (--require) but did not run" in results["loss.gspo"]["message"]
    assert results["loss.cispo"]["status"] == "pass"


def test_without_require_the_same_skip_stays_a_skip():
    assert main(["certify", NO_GSPO, "--only", "loss.gspo,loss.cispo"]) == 0


def test_required_clauses_that_run_and_pass_keep_exit_0():
    assert main(["certify", "torchref", "--only", "adv.grpo", "--require", "adv.grpo"]) == 0


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--require", "nonsuch"], "matches no clause"),
        (["--only", "adv.grpo", "--require", "step"], "not in --only"),
    ],
)
def test_a_require_pattern_that_names_nothing_is_a_usage_error(argv, message, capsys):
    assert main(["certify", "torchref", *argv]) == 2
    assert message in capsys.readouterr().err

"""Baseline fingerprints (conformance/fingerprint.py): a featureless, model-less entry
excuses every failure of its check, so --write-baseline pins it by what the target returned
on its minimal case; a second bug in the same check changes that and fails the clause."""

from __future__ import annotations

import json

from rlconform.conformance import baseline
from rlconform.conformance.cli import main

SCALED = "tests.engine.targets:grpo_scaled_target"
SCALED_MORE = "tests.engine.targets:grpo_scaled_more_target"


def _written(tmp_path):
    path = tmp_path / "fork.toml"
    assert main(["certify", SCALED, "--only", "adv.grpo", "--write-baseline", str(path)]) == 0
    return path


def _report(tmp_path, target, path):
    out = tmp_path / "r.json"
    code = main(
        ["certify", target, "--only", "adv.grpo", "--baseline", str(path), "--json", str(out)]
    )
    (clause,) = json.loads(out.read_text())["clauses"]
    return code, clause


def test_write_baseline_pins_a_featureless_entry_by_its_case(tmp_path):
    path = _written(tmp_path)
    (entry,) = baseline.load(path)["adv.grpo"]
    assert entry.features == () and entry.model == ()
    case, digest = entry.fingerprint
    assert json.loads(case)["samples"] and digest.startswith("sha256:")
    assert "fingerprint = { case = " in path.read_text()


def test_the_same_break_stays_excused(tmp_path):
    code, clause = _report(tmp_path, SCALED, _written(tmp_path))
    assert code == 0 and clause["status"] == "deviation", clause["message"]


def test_a_second_bug_in_the_same_check_fails_the_clause(tmp_path):
    """Without the fingerprint the featureless entry would excuse the 2x bug too."""
    path = _written(tmp_path)
    code, clause = _report(tmp_path, SCALED_MORE, path)
    assert code == 1 and clause["status"] == "fail"
    assert (
        "declared deviation changed on its recorded case (baseline fingerprint)"
        in clause["message"]
    )
    unpinned = tmp_path / "unpinned.toml"
    unpinned.write_text(
        "\n".join(
            line for line in path.read_text().splitlines() if not line.startswith("fingerprint")
        )
    )
    code, clause = _report(tmp_path, SCALED_MORE, unpinned)
    assert code == 0 and clause["status"] == "deviation"  # what the fingerprint prevents


def test_a_fix_of_the_pinned_break_is_reported(tmp_path):
    code, clause = _report(tmp_path, "torchref", _written(tmp_path))
    assert code == 1 and clause["status"] != "pass"

"""The committed fixture JSON files are exactly what the builders generate."""

from __future__ import annotations

import json

from rlconform.conformance.cli import main
from rlconform.fixtures.registry import CASES_DIR, build_all, regenerate


def test_regeneration_is_a_no_op_on_a_clean_tree():
    assert regenerate(check=True) == []


def test_check_mode_reports_a_tampered_file(tmp_path, capsys):
    for path in CASES_DIR.glob("*.json"):
        (tmp_path / path.name).write_text(path.read_text())
    victim = sorted(tmp_path.glob("*.json"))[0]
    victim.write_text(victim.read_text().replace("1", "2", 1))
    assert regenerate(tmp_path, check=True) == [victim.name]


def test_cli_check_exit_code(capsys):
    assert main(["fixtures", "regenerate", "--check"]) == 0
    assert "up to date" in capsys.readouterr().out


def test_every_case_carries_clause_inputs_expected_and_tolerance():
    names = set()
    for path in CASES_DIR.glob("*.json"):
        for entry in json.loads(path.read_text()):
            assert set(entry) == {
                "clause",
                "name",
                "description",
                "inputs",
                "expected",
                "tolerance",
            }
            assert path.name == f"{entry['clause']}.json"
            assert entry["description"]
            names.add((entry["clause"], entry["name"]))
    assert names == {(c.clause, c.name) for c in build_all()}

"""The shipped catalogue, the operation Protocol and the shipped CONTRACT.md stay equal to
their sources (conformance/catalogue.py), and `rlconform clauses` / `contract` read them
without torch."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from rlconform.adapters.oracle_target import OracleTarget
from rlconform.adapters.torchref import TorchRef
from rlconform.conformance import catalogue
from rlconform.conformance.cli import main


def test_shipped_catalogue_and_protocol_are_those_of_the_registry():
    rows = catalogue.build()
    assert catalogue.load() == rows, "run python -m rlconform.conformance.catalogue --write"
    text = catalogue.PROTOCOL.read_text(encoding="utf-8")
    assert text == catalogue.protocol_source(rows), "adapters/operations.py is stale"


def test_the_check_reports_a_stale_file(tmp_path, monkeypatch, capsys):
    stale = tmp_path / "catalogue.json"
    stale.write_text(json.dumps(catalogue.load()[1:]), encoding="utf-8")
    monkeypatch.setattr(catalogue, "CATALOGUE", stale)
    assert catalogue.main([]) == 1
    assert "stale: " in capsys.readouterr().out


@pytest.mark.skipif(
    not catalogue.SHARED_CONTRACT.exists(),
    reason="no ../shared/CONTRACT.md beside this checkout: only the copy shipped in the "
    "package is there to read",
)
def test_shipped_contract_is_the_spec():
    shipped = catalogue.CONTRACT.read_text(encoding="utf-8")
    assert shipped == catalogue.SHARED_CONTRACT.read_text(encoding="utf-8")


def test_rows_name_operations_signatures_and_profile_keys():
    rows = {r["id"]: r for r in catalogue.load()}
    grpo = rows["adv.grpo"]
    assert [op["name"] for op in grpo["operations"]] == ["advantage_grpo"]
    signature = grpo["operations"][0]["signature"]
    assert signature.startswith("(self, token_level_rewards: torch.Tensor, response_mask: ")
    assert {"grpo_std_ddof", "grpo_eps"} <= set(grpo["profile_keys"])
    assert rows["filter.reasons"]["profile_keys"] == ["reward_key"]


def test_profile_keys_are_found_through_helpers():
    """A key read in a helper the check calls counts; a key no code reads does not."""

    def helper(ctx):
        return ctx.profile.get("helper_key")

    def check(ctx, case):
        return ctx.profile.grpo_std_ddof, ctx.profile.not_a_field, helper(ctx)

    module = sys.modules[__name__]
    module.helper = helper  # module-level, as a clause module's helpers are
    try:
        clause = type("C", (), {"check": staticmethod(check)})
        assert catalogue.profile_keys(clause) == ["grpo_std_ddof", "helper_key"]
    finally:
        del module.helper


def test_reference_targets_have_every_protocol_operation():
    from rlconform.adapters.operations import Operations

    names = [n for n in vars(Operations) if not n.startswith("_") and callable(vars(Operations)[n])]
    assert len(names) == len({op["name"] for r in catalogue.load() for op in r["operations"]})
    for target in (TorchRef(), OracleTarget()):
        missing = [n for n in names if not callable(getattr(target, n, None))]
        assert not missing, (type(target).__name__, missing)


def test_help_usage_errors_clauses_and_contract_need_no_torch():
    """What keeps them under a second (benchmarks/cli_latency.py)."""
    code = (
        "import sys, contextlib, io\n"
        "from rlconform.conformance.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    assert main(['clauses', '--json']) == 0\n"
        "    assert main(['clauses']) == 0\n"
        "    assert main(['contract', '0a']) == 0\n"
        "    assert main(['--help']) == 0\n"
        "with contextlib.redirect_stderr(io.StringIO()):\n"
        "    assert main(['certify', 'torchreff']) == 2\n"
        "print(sorted(m for m in ('torch', 'hypothesis', 'numpy') if m in sys.modules))\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[]"


def test_contract_prints_a_section_and_names_the_sections_on_a_miss(capsys):
    assert main(["contract", "§0b"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("## 0b. Consequence") and "## 1. Data model" not in out
    assert main(["contract", "step"]) == 0
    assert capsys.readouterr().out.startswith("### step (the training step")
    assert main(["contract", "nope"]) == 2
    assert "sections: 0. Principles, 0a." in capsys.readouterr().err

"""CLI conventions users know: --version, "did you mean" for a misspelt target or clause,
and a module:attribute target importable from the current directory (as pytest does)."""

from __future__ import annotations

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

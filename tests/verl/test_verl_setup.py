"""Loading the verl adapter: a missing verl or an unsupported version is a one-line setup
error (exit 2), never a crash inside a clause. Runs with or without verl installed."""

from __future__ import annotations

import sys
import types

from rlconform.adapters.verl import SUPPORTED_VERSIONS
from rlconform.conformance.cli import main


def _certify_error(capsys, monkeypatch, verl_module) -> tuple[int, str]:
    monkeypatch.setitem(sys.modules, "verl", verl_module)
    code = main(["certify", "verl", "--only", "mask.response_from_eos"])
    return code, capsys.readouterr().err


def test_missing_verl_is_exit_2_with_the_pip_hint(capsys, monkeypatch):
    code, err = _certify_error(capsys, monkeypatch, None)  # None: `import verl` fails
    assert code == 2
    assert err.strip().count("\n") == 0
    assert "verl is not installed: pip install -e '.[verl]'" in err


def test_unsupported_version_is_exit_2_naming_both_versions(capsys, monkeypatch):
    old = types.ModuleType("verl")
    old.__version__ = "0.4.0"
    code, err = _certify_error(capsys, monkeypatch, old)
    assert code == 2
    assert err.strip().count("\n") == 0
    assert "verl 0.4.0 is not supported" in err
    assert all(version in err for version in SUPPORTED_VERSIONS)

"""Loading TRL: supported releases only (exit 2 with the range otherwise), clear errors."""

from __future__ import annotations

import pytest

from rlconform.adapters.base import SetupError
from rlconform.adapters.trl.releases import bindings_for, release_of, supported_range


@pytest.mark.parametrize(
    ("version", "release"),
    [
        ("1.16.0", "1.16.0"),
        ("1.16.0+standin", "1.16.0"),
        ("1.13.0.dev0", "1.13.0"),
        ("1.14", "1.14"),
    ],
)
def test_release_of(version, release):
    assert release_of(version) == release


def test_supported_releases_share_one_table():
    assert bindings_for("1.16.0").name == "trl-1.9"
    assert bindings_for("1.9.0") is bindings_for("1.15.0")


@pytest.mark.parametrize("version", ["0.9.6", "1.8.0", "1.17.0", "2.0.0", "unknown"])
def test_unknown_release_is_refused_with_the_range(version):
    with pytest.raises(SetupError) as info:
        bindings_for(version)
    assert f"trl {version} is not supported" in str(info.value)
    assert supported_range() in str(info.value)


def _fake_trl(tmp_path, version):
    package = tmp_path / "trl"
    package.mkdir()
    (package / "__init__.py").write_text(f"__version__ = {version!r}\n")
    return tmp_path


def test_cli_exits_2_on_an_unsupported_release(tmp_path, isolated_imports, capsys):
    from rlconform.conformance.cli import main

    root = _fake_trl(tmp_path, "0.9.6")
    code = main(["certify", "trl", "--framework-path", str(root), "--only", "adv.grpo"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "trl 0.9.6 is not supported" in err
    assert "1.9.0 .. 1.16.0" in err


def test_framework_path_without_trl(tmp_path, isolated_imports):
    from rlconform.adapters.trl import load

    with pytest.raises(SetupError, match="no trl/__init__.py"):
        load(framework_path=str(tmp_path))


def test_missing_trainer_module_is_a_setup_error(tmp_path, isolated_imports):
    from rlconform.adapters.trl import load

    root = _fake_trl(tmp_path, "1.16.0")
    with pytest.raises(SetupError, match="cannot import GRPOTrainer"):
        load(framework_path=str(root))


def test_shipped_baseline_is_valid_and_every_entry_has_its_minimal_case():
    from rlconform.adapters.trl.manifest import baseline_path
    from rlconform.adapters.trl.notes import MINIMAL, _key
    from rlconform.conformance import baseline

    entries = baseline.load(baseline_path("1.16.0"))
    assert entries, "trl-1.16.0.toml declares nothing"
    for clause_id, deviations in entries.items():
        for entry in deviations:
            assert entry.checks, clause_id  # never a whole clause
            assert _key(clause_id, entry) in MINIMAL, (clause_id, entry)

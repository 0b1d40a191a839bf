"""Loading the verl adapter: which release line a version gets, a release outside the
supported range, a missing verl, and ``--framework-path`` source trees (path and git commit
in the report header). Runs with or without verl installed: versions are faked with
stand-in ``verl`` packages in scratch folders, each imported in a fresh interpreter."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest

from rlconform.adapters.base import SetupError
from rlconform.adapters.verl.releases import (
    ALTERNATES,
    DEFAULTS,
    RELEASES,
    SUPPORTED_RANGE,
    release_for,
)
from rlconform.conformance.cli import main


def _certify_error(capsys, monkeypatch, verl_module) -> tuple[int, str]:
    monkeypatch.setitem(sys.modules, "verl", verl_module)
    code = main(["certify", "verl", "--only", "mask.response_from_attention"])
    return code, capsys.readouterr().err


def test_missing_verl_is_exit_2_with_the_pip_hint(capsys, monkeypatch):
    code, err = _certify_error(capsys, monkeypatch, None)  # None: `import verl` fails
    assert code == 2
    assert err.strip().count("\n") == 0
    assert "verl is not installed: pip install -e '.[verl]'" in err


@pytest.mark.parametrize("version", ["0.6.1", "0.4.0", "0.10.0", "1.0.0", "unknown"])
def test_a_release_outside_the_range_is_exit_2_naming_the_range(capsys, monkeypatch, version):
    old = types.ModuleType("verl")
    old.__version__ = version
    old.__file__ = __file__
    code, err = _certify_error(capsys, monkeypatch, old)
    assert code == 2
    assert err.strip().count("\n") == 0
    assert f"verl {version} is not supported" in err
    assert SUPPORTED_RANGE in err


@pytest.mark.parametrize(
    ("version", "line"),
    [("0.7.0", "0.7"), ("0.7.1", "0.7"), ("0.8.0", "0.8"), ("0.8.3", "0.8"), ("0.9.1", "0.9")],
)
def test_each_supported_version_gets_its_line_table(version, line):
    release = release_for(version)
    assert release.line == line
    assert release.describe()["bindings"] == f"verl-{line}"


def test_a_line_prefix_does_not_match_a_longer_minor():
    with pytest.raises(SetupError, match="0.70.1 is not supported"):
        release_for("0.70.1")


def test_every_line_binds_the_same_operations_apart_from_what_it_lacks():
    tables = {r.line: set(r.bindings) for r in RELEASES}
    # 0.7 / 0.8 unpad with flash_attn (no CPU build); 0.7 pads inside the async agent loop and
    # has no IcePop band; the training step is bound on every line (the v1 trainer on 0.9,
    # RayPPOTrainer with the engine workers on 0.8 and with the legacy workers on 0.7)
    remove_padding = {"pack_batch", "unpad_batch", "unpack_batch"}
    assert tables["0.9"] - tables["0.8"] == remove_padding
    assert tables["0.9"] - tables["0.7"] == remove_padding | {"pad_batch", "icepop_weights"}
    assert tables["0.8"] <= tables["0.9"] and tables["0.7"] <= tables["0.8"]
    assert all("train_step" in t for t in tables.values())
    for release in RELEASES:
        for op, binding in release.bindings.items():
            assert binding["functions"] and binding["path"], (release.line, op)
            assert all(f.startswith("verl.") for f in binding["functions"]), (release.line, op)


def test_alternate_settings_swap_functions_only_for_the_ops_they_change():
    release = release_for("0.9.1")
    default, alternate = DEFAULTS.bindings(release), ALTERNATES.bindings(release)
    changed = set(ALTERNATES.changed_ops(release))
    assert {op for op in default if default[op] != alternate[op]} == changed
    assert any("vectorized" in f for f in alternate["advantage_grpo"]["functions"])
    assert any("chunking" in f for f in alternate["entropy_from_logits"]["functions"])


def _stand_in_tree(root: Path, version: str) -> Path:
    package = root / "verl"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(f"__version__ = {version!r}\n", encoding="utf-8")
    return root


def _describe_in_fresh_interpreter(tree: Path) -> dict:
    script = textwrap.dedent(
        f"""
        import json
        from rlconform.adapters.base import SetupError
        from rlconform.adapters.verl import load
        try:
            print(json.dumps(load(framework_path={str(tree)!r}).describe()))
        except SetupError as exc:
            print(json.dumps({{"error": str(exc)}}))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_framework_path_imports_that_tree_and_records_path_and_commit(tmp_path):
    tree = _stand_in_tree(tmp_path / "fork", "0.8.0")
    git = ["git", "-C", str(tree), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "fork"], check=True)
    commit = subprocess.run(
        [*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    header = _describe_in_fresh_interpreter(tree)
    assert header["version"] == "0.8.0"
    assert header["release"] == "0.8.x"
    assert header["bindings"] == "verl-0.8"
    assert header["framework_path"] == str(tree.resolve())
    assert header["location"] == str((tree / "verl").resolve())
    assert header["commit"] == commit


def test_framework_path_without_git_has_no_commit(tmp_path):
    header = _describe_in_fresh_interpreter(_stand_in_tree(tmp_path / "plain", "0.7.1"))
    assert header["bindings"] == "verl-0.7"
    assert "commit" not in header


def test_framework_path_with_an_unsupported_release_names_the_range(tmp_path):
    header = _describe_in_fresh_interpreter(_stand_in_tree(tmp_path / "old", "0.6.0"))
    assert "verl 0.6.0 is not supported" in header["error"]
    assert SUPPORTED_RANGE in header["error"]


def test_framework_path_without_a_verl_package_is_a_setup_error(tmp_path, capsys):
    code = main(["certify", "verl", "--framework-path", str(tmp_path), "--only", "adv.grpo"])
    assert code == 2
    err = capsys.readouterr().err
    assert err.strip().count("\n") == 0
    assert "holds no verl package" in err

"""Finding ROLL: a missing framework, or the unrelated PyPI ``roll``, is exit 2 with what to do."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlconform.conformance.cli import main


def _certify_in_subprocess(tmp_path: Path, *args: str, pythonpath: Path | None = None):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    code = "import sys; from rlconform.conformance.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run(
        [sys.executable, "-c", code, "certify", "roll", "--only", "reward.place_last", *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=120,
    )


def test_framework_path_without_roll_is_exit_2(tmp_path, capsys):
    code = main(["certify", "roll", "--framework-path", str(tmp_path), "--only", "reward.*"])
    err = capsys.readouterr().err
    assert code == 2
    assert "roll/utils/functionals.py" in err and "--framework-path" in err
    assert err.count("\n") == 1  # one line


def test_not_installed_is_exit_2(tmp_path):
    if importlib.util.find_spec("roll") is not None:
        pytest.skip("a package named roll is installed here")
    result = _certify_in_subprocess(tmp_path)
    assert result.returncode == 2, result.stderr
    assert "ROLL is not importable" in result.stderr
    assert "github.com/alibaba/ROLL" in result.stderr


def test_unrelated_pypi_roll_is_exit_2(tmp_path):
    """The PyPI package named ``roll`` (an async HTTP framework) has no roll.utils.functionals."""
    site = tmp_path / "site"
    (site / "roll").mkdir(parents=True)
    (site / "roll" / "__init__.py").write_text('"""Not ROLL: a web framework."""\n')
    result = _certify_in_subprocess(tmp_path, pythonpath=site)
    assert result.returncode == 2, result.stderr
    assert "is not ROLL" in result.stderr and "unrelated HTTP framework" in result.stderr


STANDIN = Path(__file__).parent / "standin"


@pytest.mark.parametrize(
    "module", ["roll/pipeline/agentic/utils.py", "roll/utils/train_infer_corrections.py"]
)
def test_a_missing_third_party_package_is_exit_2_naming_it_and_the_extra(tmp_path, module):
    """A ROLL module importing a package this environment lacks (as the agentic utils need
    requests) is a setup problem, never clause errors."""
    import shutil

    checkout = tmp_path / "roll-checkout"
    shutil.copytree(STANDIN, checkout)
    path = checkout / module
    path.write_text(
        path.read_text() + "\nimport rlconform_absent_package_xyz  # noqa: E402, F401\n"
    )
    result = _certify_in_subprocess(tmp_path, "--framework-path", str(checkout))
    assert result.returncode == 2, result.stderr
    assert "'rlconform_absent_package_xyz'" in result.stderr
    assert "pip install 'rlconform[roll]'" in result.stderr
    assert "Traceback" not in result.stderr and result.stderr.count("\n") == 1


def test_missing_package_names_only_third_party_modules():
    from rlconform.adapters.dependencies import missing_package

    assert (
        missing_package(ModuleNotFoundError("x", name="requests.adapters"), ("roll",)) == "requests"
    )
    assert missing_package(ModuleNotFoundError("x", name="roll.pipeline.x"), ("roll",)) is None
    assert missing_package(ImportError("cannot import name"), ("roll",)) is None

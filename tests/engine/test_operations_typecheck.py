"""The typed Protocol of every operation (``rlconform.adapters.operations.Operations``) is
what a type checker compares an adapter with: the reference binding (torchref) satisfies
it, and an adapter whose operation has a wrong signature is a type-checker error naming
the operation. mypy analyses torch's own annotations (about 20 s cold), so this sits in
the slow tier."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("adapters", "conformance", "oracle", "fixtures", "audit")

MYPY_INI = """\
[mypy]
follow_imports = silent
ignore_missing_imports = True
# frameworks and heavy libraries the annotations do not need
[mypy-tensordict.*,numpy.*,hypothesis.*,verl.*,trl.*,transformers.*,sympy.*,openrlhf.*]
follow_imports = skip
"""

CONFORMING = """\
from rlconform.adapters.operations import Operations
from rlconform.adapters.torchref import TorchRef

ops: Operations = TorchRef()
"""

WRONG_SIGNATURE = """\
from typing import Any

from rlconform.adapters.operations import Operations
from rlconform.adapters.oracle_target import OracleTarget


class Forked(OracleTarget):
    # lam forgotten: the clause would call it with one argument too many
    def advantage_gae(self, token_level_rewards: Any, values: Any,  # type: ignore[override]
                      response_mask: Any, gamma: float) -> Any:
        return None


ops: Operations = Forked()
"""


def _mypy(tmp_path: Path, name: str, source: str) -> subprocess.CompletedProcess:
    pytest.importorskip("mypy", reason="mypy comes with the dev extra (pip install -e '.[dev]')")
    shadow = tmp_path / "shadow" / "rlconform"
    shadow.mkdir(parents=True, exist_ok=True)
    for package in PACKAGES:  # the installed layout, rlconform.<package>, over the source
        link = shadow / package
        if not link.exists():
            link.symlink_to(REPO / package)
    (tmp_path / "mypy.ini").write_text(MYPY_INI)
    (tmp_path / name).write_text(source)
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--config-file",
            "mypy.ini",
            "--cache-dir",
            str(tmp_path.parent / "mypy-cache"),
            name,
        ],
        cwd=tmp_path,
        env={"MYPYPATH": str(tmp_path / "shadow"), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_the_reference_binding_satisfies_the_protocol(tmp_path):
    done = _mypy(tmp_path, "conforming.py", CONFORMING)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_wrong_signature_is_a_type_checker_error_naming_the_operation(tmp_path):
    done = _mypy(tmp_path, "forked.py", WRONG_SIGNATURE)
    assert done.returncode == 1, done.stdout + done.stderr
    assert 'variable has type "Operations"' in done.stdout
    assert "advantage_gae" in done.stdout and "lam: float" in done.stdout

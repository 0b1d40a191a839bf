"""Loading the OpenRLHF adapter: release tables, the supported range, clear setup errors."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rlconform.adapters.base import SetupError
from rlconform.adapters.openrlhf import releases, runtime
from rlconform.adapters.registry import load_target

STANDIN = Path(__file__).parent / "standin"


def _standin_copy(tmp_path: Path, version: str) -> Path:
    root = tmp_path / f"openrlhf-{version}"
    shutil.copytree(STANDIN, root)
    (root / "version.txt").write_text(version + "\n")
    return root


def test_release_tables_cover_a_contiguous_range():
    assert list(releases.RELEASES) == ["0.11.2", "0.11.1", "0.11.0", "0.10.4", "0.10.3"]
    assert releases.RELEASES["0.11.2"].is_api == "gate"
    assert releases.RELEASES["0.11.1"].is_api == "vllm_is"
    assert releases.RELEASES["0.11.1"].kl_straight_through
    assert not releases.RELEASES["0.11.0"].kl_straight_through
    assert "0.10.3 to 0.11.2" in releases.supported_range()


@pytest.mark.parametrize("version", ["0.11.2.post1", "0.11.2+fork", "0.10.3"])
def test_patch_suffixes_and_older_releases_pick_their_table(tmp_path, version):
    target = load_target("openrlhf", framework_path=str(_standin_copy(tmp_path, version)))
    assert target.version == version
    assert target.runtime.release.name == runtime._base_release(version)


def test_unsupported_release_exits_2_naming_the_range(tmp_path):
    root = _standin_copy(tmp_path, "0.9.10")
    with pytest.raises(SetupError, match=r"0\.9\.10 is not supported .*0\.10\.3 to 0\.11\.2"):
        load_target("openrlhf", framework_path=str(root))
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "from rlconform.conformance.cli import entry; entry()",
            "certify",
            "openrlhf",
            "--framework-path",
            str(root),
            "--only",
            "kl.estimators",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert "0.10.3 to 0.11.2" in done.stderr + done.stdout


def test_a_path_without_openrlhf_is_a_setup_error(tmp_path):
    with pytest.raises(SetupError, match="openrlhf/models/loss.py"):
        load_target("openrlhf", framework_path=str(tmp_path))


def test_missing_openrlhf_says_how_to_install(monkeypatch):
    monkeypatch.setattr(runtime, "_importable", lambda name: False)
    with pytest.raises(SetupError, match="pip install --no-deps"):
        runtime.load_runtime(None)


def test_a_fork_missing_a_bound_function_is_named(tmp_path):
    root = _standin_copy(tmp_path, "0.11.2")
    path = root / "openrlhf" / "utils" / "loss_utils.py"
    path.write_text(path.read_text().replace("def get_loss_batch_info", "def renamed_info"))
    with pytest.raises(SetupError, match="get_loss_batch_info"):
        load_target("openrlhf", framework_path=str(root))

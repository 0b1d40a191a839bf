"""Output paths never overwrite what a run reads, and a bad one is refused before the run."""

from __future__ import annotations

import pytest
import torch

from rlconform.audit import record
from rlconform.conformance.cli import main

safetensors = pytest.importorskip("safetensors")


@pytest.fixture()
def recording(tmp_path):
    path = tmp_path / "pad.safetensors"
    record(
        {
            "responses": torch.tensor([[5, 6, 0]]),
            "response_mask": torch.tensor([[1, 1, 0]]),
            "token_level_scores": torch.tensor([[0.0, 1.0, 0.0]]),
        },
        path,
    )
    return path


def _unchanged(path):
    return path.read_bytes()


@pytest.mark.parametrize("flag", ["--json", "--markdown"])
def test_audit_refuses_to_write_its_recording_or_its_sidecar(recording, flag, capsys):
    sidecar = recording.with_suffix(".json")
    before = {p: p.read_bytes() for p in (recording, sidecar) if p.exists()}
    for target in (recording, sidecar):
        assert main(["audit", str(recording), flag, str(target)]) == 2
        assert "would overwrite the input" in capsys.readouterr().err
    assert {p: p.read_bytes() for p in before} == before


def test_audit_refuses_a_file_inside_an_input_folder(tmp_path, capsys):
    folder = tmp_path / "td"
    folder.mkdir()
    (folder / "meta.json").write_text("{}")
    assert main(["audit", str(folder), "--json", str(folder / "meta.json")]) == 2
    assert "would overwrite the input" in capsys.readouterr().err
    assert (folder / "meta.json").read_text() == "{}"


def test_an_output_in_a_missing_directory_is_refused_before_the_run(tmp_path, capsys):
    missing = tmp_path / "no" / "such" / "r.json"
    assert main(["certify", "torchref", "--json", str(missing)]) == 2
    err = capsys.readouterr()
    assert "does not exist" in err.err and "[  1/" not in err.out


def test_two_outputs_on_one_file_and_a_baseline_overwritten_are_refused(tmp_path, capsys):
    out = tmp_path / "r.json"
    assert main(["certify", "torchref", "--json", str(out), "--markdown", str(out)]) == 2
    assert "the same file" in capsys.readouterr().err
    base = tmp_path / "b.toml"
    base.write_text("format = 1\n")
    before = base.read_bytes()
    assert main(["certify", "torchref", "--baseline", str(base), "--junit", str(base)]) == 2
    assert "would overwrite the input" in capsys.readouterr().err
    assert base.read_bytes() == before

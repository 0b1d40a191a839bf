"""End-to-end certifications: the README's main job must pass on the built-in targets."""

from __future__ import annotations

import json

import pytest

from rlconform.conformance.cli import main


@pytest.mark.parametrize("target", ["torchref", "oracle"])
def test_full_certification_passes(target, tmp_path):
    out = tmp_path / "r.json"
    code = main(["certify", target, "--json", str(out)])
    report = json.loads(out.read_text())
    bad = [c for c in report["clauses"] if c["status"] in ("fail", "error")]
    assert code == 0, bad
    assert report["summary"]["pass"] >= 1
    assert report["summary"]["skip"] == 0, [c for c in report["clauses"] if c["status"] == "skip"]


@pytest.mark.slow
@pytest.mark.parametrize("target", ["torchref", "oracle"])
def test_dev_profile_certification_passes(target, tmp_path):
    """The thorough tier: four times the ci examples (profile dev, seeded so that CI is
    reproducible), every clause still passes on the reference targets."""
    out = tmp_path / "r.json"
    code = main(["certify", target, "--profile", "dev", "--seed", "0", "--json", str(out)])
    report = json.loads(out.read_text())
    assert code == 0, [c for c in report["clauses"] if c["status"] in ("fail", "error")]
    assert report["summary"]["skip"] == 0

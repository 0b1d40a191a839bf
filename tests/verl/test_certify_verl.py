"""The full certification of the installed verl against its shipped baseline: exit 0, every
declared break observed, the report header naming the release, its binding table and the
source; the alternate trainer settings likewise. Needs verl (any supported line)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("verl")

from rlconform.adapters.verl import alternates, load  # noqa: E402
from rlconform.conformance.cli import main  # noqa: E402
from rlconform.conformance.registry import load_all  # noqa: E402


def _certify(tmp_path, spec: str) -> tuple[int, dict]:
    out = tmp_path / "verl.json"
    code = main(["certify", spec, "--json", str(out)])
    return code, json.loads(out.read_text())


def _by_status(report: dict) -> dict[str, list[str]]:
    by_status: dict[str, list[str]] = {}
    for result in report["clauses"]:
        by_status.setdefault(result["status"], []).append(result["id"])
    return by_status


def test_full_certification_exits_0_with_every_declared_break_observed(tmp_path):
    target = load()
    assert target.baseline_file is not None, f"no shipped baseline for verl {target.version}"
    code, report = _certify(tmp_path, "verl")
    assert code == 0, [c for c in report["clauses"] if c["status"] in ("fail", "error")]
    header = report["target"]
    assert header["version"] == target.version
    assert header["release"] == target.release.line + ".x"
    assert header["bindings"] == f"verl-{target.release.line}"
    assert header["baseline"] == target.baseline_file.name
    registered = load_all()
    declared = sorted(c for c in target.deviations if c in registered)
    assert sorted(_by_status(report).get("deviation", [])) == declared, "stale or missing"
    bound = {row["op"] for row in report["bindings"]}
    assert bound and bound <= set(target.bindings)
    assert {"actor_loss", "gmpo_loss", "response_logprobs"} <= bound


def test_alternate_settings_certify_only_the_ops_they_change(tmp_path):
    target = alternates()
    if target.baseline_file is None:
        pytest.skip(f"the alternate settings are certified on 0.9.x only, not {target.version}")
    code, report = _certify(tmp_path, "rlconform.adapters.verl:alternates")
    assert code == 0, [c for c in report["clauses"] if c["status"] in ("fail", "error")]
    ran = {row["op"] for row in report["bindings"]}
    assert ran == set(target.bindings)

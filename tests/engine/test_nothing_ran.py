"""A run that checks nothing is never green: no clause ran -> exit 1; a clause whose every
call raised is not a pass; a declared entry of a clause that does not run is stale."""

from __future__ import annotations

import json

import pytest

from rlconform.adapters.base import Deviation, Target, with_overrides
from rlconform.adapters.torchref import TorchRef
from rlconform.conformance.cli import main
from rlconform.conformance.profiles import get_run_profile
from rlconform.conformance.registry import get, load_all
from rlconform.conformance.runner import run_clause


class Nothing(Target):
    """Implements no operation."""

    name = "nothing"


def nothing() -> Target:
    return Nothing()


def _raise(self, *args, **kwargs):
    raise RuntimeError("always raises")


def _operations(target: Target) -> list[str]:
    """Every contract operation the reference target implements: the clauses' own and the
    ones adv.invariants and the purity clauses probe."""
    from rlconform.conformance.clauses.advantage import ESTIMATORS
    from rlconform.conformance.clauses.purity import PROBES

    ops = {op for c in load_all().values() for op in c.ops}
    ops |= {spec.op for spec in ESTIMATORS.values()} | set(PROBES)
    return sorted(op for op in ops if target.implements(op))


def always_raising() -> Target:
    ref = TorchRef()
    return with_overrides(ref, name="raising", **{op: _raise for op in _operations(ref)})


def test_a_target_that_implements_nothing_exits_1(tmp_path, capsys):
    out = tmp_path / "r.json"
    code = main(["certify", "tests.engine.test_nothing_ran:nothing", "--json", str(out)])
    report = json.loads(out.read_text())
    assert code == 1
    assert {c["status"] for c in report["clauses"]} == {"skip"}
    assert "no clause ran" in capsys.readouterr().out


@pytest.mark.parametrize("clause_id", sorted(load_all()))
def test_no_clause_passes_when_every_call_raises(clause_id):
    target = always_raising()
    result = run_clause(get(clause_id), target, get_run_profile("ci"), grading=False)
    assert result.status != "pass", (clause_id, result.message)


def test_invariants_with_every_estimator_raising_is_a_skip_that_says_why():
    result = run_clause(get("adv.invariants"), always_raising(), get_run_profile("ci"))
    assert result.status == "skip"
    assert "every call to the target raised" in result.message


def test_an_entry_of_a_clause_that_does_not_run_is_stale():
    target = Nothing()
    target.deviations = {"adv.grpo": Deviation("ddof 0", checks=("advantages",))}
    result = run_clause(get("adv.grpo"), target, get_run_profile("ci"))
    assert result.status == "fail" and "stale deviation" in result.message
    assert "does not run" in result.message

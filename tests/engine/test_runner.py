"""The runner isolates clauses: crashes and hangs fail only their clause; manifests apply."""

from __future__ import annotations

import time

import pytest

from rlconform.adapters.base import with_overrides
from rlconform.conformance.profiles import RunProfile
from rlconform.conformance.registry import get
from rlconform.conformance.runner import certify, run_clause

FAST = RunProfile("test", max_examples=5, derandomize=True, clause_time_limit_s=2.0)


def crashing(self, scores, response_mask, loss_mask):
    raise RuntimeError("boom inside the implementation")


def hanging(self, scores, response_mask, loss_mask):
    while True:
        time.sleep(0.01)


def test_exception_in_target_is_an_error_with_traceback(torchref):
    broken = with_overrides(torchref, place_reward_last=crashing)
    result = run_clause(get("reward.place_last"), broken, FAST)
    assert result.status == "error"
    assert result.message == (
        "reward.place_last/runs: place_reward_last raised RuntimeError: boom inside the implementation"
    )
    assert "Traceback" in result.traceback
    assert "reproducer" in result.counterexample


def test_hang_in_target_times_out_and_run_continues(torchref):
    broken = with_overrides(torchref, place_reward_last=hanging)
    clauses = [get("reward.place_last"), get("reward.place_last")]
    started = time.perf_counter()
    report = certify(broken, clauses, FAST)
    assert time.perf_counter() - started < 10
    assert [r.status for r in report.clauses] == ["error", "error"]
    assert "timed out after 2 s" in report.clauses[0].message
    assert report.exit_code == 1


def test_missing_operation_is_skipped(torchref):
    lacking = with_overrides(torchref, place_reward_last=None)
    result = run_clause(get("reward.place_last"), lacking, FAST)
    assert result.status == "skip"
    assert result.message == "not implemented by target: place_reward_last"


def test_declared_deviation_that_fails_is_reported_as_deviation(torchref):
    def last_column(self, scores, response_mask, loss_mask):
        out = scores.new_zeros(response_mask.shape)
        if out.shape[-1]:
            out[:, -1] = scores
        return out

    broken = with_overrides(torchref, place_reward_last=last_column)
    broken.deviations = {"reward.place_last": "writes the reward at column -1"}
    result = run_clause(get("reward.place_last"), broken, FAST)
    assert result.status == "deviation"
    assert result.message.startswith(
        "declared deviation: [every check] writes the reward at column -1 (observed "
    )
    assert "reproducer" in result.counterexample


def test_stale_deviation_fails(torchref):
    stale = with_overrides(torchref)
    stale.deviations = {"reward.place_last": "used to write into padding"}
    result = run_clause(get("reward.place_last"), stale, FAST)
    assert result.status == "fail"
    assert result.message.startswith("stale deviation")


def test_counterexample_reproducer_replays(torchref):
    def off_by_one(self, scores, response_mask, loss_mask):
        out = scores.new_zeros(response_mask.shape)
        lengths = response_mask.sum(-1)
        for i, n in enumerate(lengths.tolist()):
            if n >= 2:
                out[i, n - 2] = scores[i]
            elif n == 1:
                out[i, 0] = scores[i]
        return out

    broken = with_overrides(torchref, place_reward_last=off_by_one)
    result = run_clause(get("reward.place_last"), broken, FAST)
    assert result.status == "fail"
    namespace: dict = {}
    code = result.counterexample["reproducer"]
    assert code.startswith("from rlconform.conformance.repro import replay\n")
    import pytest

    from rlconform.conformance.errors import ClauseMismatch
    from rlconform.conformance.repro import replay

    case = eval(code.split("case=", 1)[1][:-1], {"float": float})
    with pytest.raises(ClauseMismatch):
        replay("reward.place_last", broken, case)
    namespace["ok"] = True
    assert namespace["ok"]


def test_committed_fixture_cases_run_as_pinned_examples():
    from rlconform.conformance.runner import pinned_cases
    from rlconform.fixtures.registry import committed_cases

    clause = get("reward.place_last")
    fixture_inputs = [c["inputs"] for c in committed_cases("reward.place_last")]
    assert fixture_inputs
    pinned = pinned_cases(clause)
    for inputs in fixture_inputs:
        assert inputs in pinned


def _last_column_for_empty(self, scores, response_mask, loss_mask):
    """Correct placement except that an L = 0 row gets its reward at column -1 (verl)."""
    out = self.place_reward_last(scores, response_mask, loss_mask)
    if out.shape[-1]:
        empty = response_mask.sum(-1) == 0
        out[empty, -1] = scores[empty]
    return out


def _last_column_always(self, scores, response_mask, loss_mask):
    out = scores.new_zeros(response_mask.shape)
    if out.shape[-1]:
        out[:, -1] = scores
    return out


def test_legacy_scope_names_are_translated_to_feature_ids(torchref):
    from rlconform.adapters.base import Deviation

    variant = with_overrides(torchref, place_reward_last=_last_column_for_empty)
    variant.deviations = {
        "reward.place_last": Deviation("L=0 goes to column -1", scope=("empty_response",))
    }
    result = run_clause(get("reward.place_last"), variant, FAST)
    assert result.status == "deviation", result.message
    assert "[every check on empty_response] L=0 goes to column -1" in result.message
    assert Deviation("x", scope=("padding_garbage",)).features == (
        "padding_finite",
        "padding_nonfinite",
        "overflow",
        "padding_rewards",
    )


def test_a_feature_scoped_deviation_does_not_hide_a_break_outside_it(torchref):
    from rlconform.adapters.base import Deviation

    variant = with_overrides(torchref, place_reward_last=_last_column_always)
    variant.deviations = {
        "reward.place_last": Deviation("L=0 goes to column -1", features=("empty_response",))
    }
    result = run_clause(get("reward.place_last"), variant, FAST)
    assert result.status == "fail"
    assert all(len(s["mask"]) > 0 for s in result.counterexample["case"]["samples"])


def test_a_swallowed_alarm_still_ends_the_block_as_a_timeout():
    """The alarm's raise can land in a gc callback, where Python prints and drops it (seen
    in CI): the limit must hold anyway, whether the block then finishes or keeps going."""
    import time

    from rlconform.conformance.runner import _TimeLimitExceeded, time_limit

    def swallow_once_then_finish():
        try:
            time.sleep(1.0)
        except BaseException:
            pass  # the dropped raise

    with pytest.raises(_TimeLimitExceeded):
        with time_limit(0.01):
            swallow_once_then_finish()

    def swallow_once_then_hang():
        swallow_once_then_finish()
        time.sleep(5.0)

    started = time.monotonic()
    with pytest.raises(_TimeLimitExceeded):
        with time_limit(0.01):
            swallow_once_then_hang()
    assert time.monotonic() - started < 2.0


def test_an_ordinary_block_under_the_limit_is_left_alone():
    from rlconform.conformance.runner import time_limit

    with time_limit(5.0):
        value = sum(range(1000))
    assert value == 499500

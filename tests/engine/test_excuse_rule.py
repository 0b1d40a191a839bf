"""What a baseline entry excuses (conformance/baseline.py): a failing case only when the
entry's features are what make it fail (the same case without them passes), or when the
entry's model (profile values) explains the output. A second bug in the same check whose
failing cases merely carry the entry's features is a new failure."""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch

from rlconform.adapters.base import Deviation, with_overrides
from rlconform.conformance.context import overridden
from rlconform.conformance.literal import from_jsonable
from rlconform.conformance.profiles import get_run_profile
from rlconform.conformance.registry import get
from rlconform.conformance.runner import run_clause

NAN_PADDING = Deviation(
    "values at padding reach the advantages", ("advantages",), ("padding_nonfinite",)
)


def gae_reads_padding(self, token_level_rewards, values, response_mask, gamma, lam, **kw):
    """A NaN written at padding reaches the whole row (the break the entry declares)."""
    adv, ret = self.advantage_gae(token_level_rewards, values, response_mask, gamma, lam, **kw)
    leak = torch.where(response_mask.bool(), torch.zeros_like(values), values).sum(-1, keepdim=True)
    return adv + 0 * leak, ret


def gae_reads_padding_and_scales(
    self, token_level_rewards, values, response_mask, gamma, lam, **kw
):
    """The declared leak, plus an unrelated second bug on every case."""
    adv, ret = gae_reads_padding(self, token_level_rewards, values, response_mask, gamma, lam, **kw)
    return adv * 1.5, ret


@pytest.fixture
def only_nan_padding_cases(monkeypatch):
    """adv.gae drawing only cases with NaN at padding (no pinned cases): every failing case
    carries the entry's feature, so the old rule (any feature present) excused them all."""
    import rlconform.fixtures.registry as fixtures

    monkeypatch.setattr(fixtures, "committed_cases", lambda clause_id: [])
    clause = get("adv.gae")

    strategy = clause.strategy.filter(lambda case: "padding_nonfinite" in clause.features(case))
    return dataclasses.replace(clause, strategy=strategy, examples=())


def _certify(target, clause):
    return run_clause(clause, target, get_run_profile("ci"))


def test_a_declared_nan_leak_is_excused_because_the_case_without_nan_passes(
    torchref, only_nan_padding_cases
):
    target = with_overrides(torchref, advantage_gae=gae_reads_padding)
    target.deviations = {"adv.gae": [NAN_PADDING]}
    result = _certify(target, only_nan_padding_cases)
    assert result.status == "deviation", result.message
    assert result.deviations[0].excused_by.get("features", 0) > 0
    assert result.deviations[0].as_json()["excused_by"] == result.deviations[0].excused_by


def test_a_second_bug_whose_cases_carry_the_feature_is_a_new_failure(
    torchref, only_nan_padding_cases
):
    target = with_overrides(torchref, advantage_gae=gae_reads_padding_and_scales)
    target.deviations = {"adv.gae": [NAN_PADDING]}
    result = _certify(target, only_nan_padding_cases)
    assert result.status == "fail", result.message
    assert result.check == "advantages"
    # the old rule would have excused it: the failing case has the entry's feature
    case = from_jsonable(result.counterexample["case"])
    assert NAN_PADDING.covers("advantages", only_nan_padding_cases.features(case))


GRPO_DDOF0 = Deviation("population std", ("advantages",), (), model={"grpo_std_ddof": 0})


def grpo_ddof0(self, *args, **kwargs):
    """torchref's GRPO computed with ddof 0 while the target's profile says 1: exactly what
    the model ``grpo_std_ddof = 0`` describes."""
    population = copy.copy(self)
    population.profile = overridden(self.profile, {"grpo_std_ddof": 0})
    return type(self).advantage_grpo(population, *args, **kwargs)


def grpo_ddof0_shifted(self, *args, **kwargs):
    """The same, plus a second bug in the same check."""
    adv, ret = grpo_ddof0(self, *args, **kwargs)
    return adv + 0.25 * (adv != 0), ret


def test_a_model_excuses_what_the_profile_value_explains(torchref):
    target = with_overrides(torchref, advantage_grpo=grpo_ddof0)
    target.deviations = {"adv.grpo": [GRPO_DDOF0]}
    result = _certify(target, get("adv.grpo"))
    assert result.status == "deviation", result.message
    assert set(result.deviations[0].excused_by) == {"model"}


def test_a_model_does_not_excuse_a_second_bug_in_the_same_check(torchref):
    target = with_overrides(torchref, advantage_grpo=grpo_ddof0_shifted)
    target.deviations = {"adv.grpo": [GRPO_DDOF0]}
    result = _certify(target, get("adv.grpo"))
    assert result.status == "fail", result.message
    assert result.check == "advantages"


def test_an_entry_with_the_wrong_model_does_not_excuse(torchref):
    wrong = Deviation("population std", ("advantages",), (), model={"grpo_std_ddof": 1})
    target = with_overrides(torchref, advantage_grpo=grpo_ddof0)
    target.deviations = {"adv.grpo": [wrong]}
    assert _certify(target, get("adv.grpo")).status == "fail"


NO_BOOTSTRAP = Deviation(
    "truncated samples end with next value 0",
    ("advantages", "returns"),
    (),
    model={"truncated_bootstrap": False},
)


def gae_terminates_all_and_reads_padding(
    self, token_level_rewards, values, response_mask, gamma, lam, **kw
):
    """Two declared breaks at once: every sample treated as terminated (the model's
    ``truncated_bootstrap = false``) and the NaN-at-padding leak (the features entry)."""
    return gae_reads_padding(self, token_level_rewards, values, response_mask, gamma, lam)


def gae_terminates_all_reads_padding_and_scales(
    self, token_level_rewards, values, response_mask, gamma, lam, **kw
):
    adv, ret = gae_terminates_all_and_reads_padding(
        self, token_level_rewards, values, response_mask, gamma, lam
    )
    return adv * 1.5, ret


def test_a_features_entry_and_a_model_entry_explain_a_case_with_both_breaks_together(
    torchref, only_nan_padding_cases
):
    target = with_overrides(torchref, advantage_gae=gae_terminates_all_and_reads_padding)
    target.deviations = {"adv.gae": [NAN_PADDING, NO_BOOTSTRAP]}
    result = _certify(target, only_nan_padding_cases)
    assert result.status == "deviation", result.message
    nan_entry, model_entry = result.deviations
    assert model_entry.excused_by.get("model", 0) > 0
    assert nan_entry.excused_by.get("features", 0) > 0


def test_either_entry_alone_does_not_excuse_a_case_with_both_breaks(
    torchref, only_nan_padding_cases
):
    target = with_overrides(torchref, advantage_gae=gae_terminates_all_and_reads_padding)
    for alone in (NAN_PADDING, NO_BOOTSTRAP):
        target.deviations = {"adv.gae": [alone]}
        assert _certify(target, only_nan_padding_cases).status == "fail", alone


def test_a_third_bug_beside_both_declared_breaks_is_a_new_failure(torchref, only_nan_padding_cases):
    target = with_overrides(torchref, advantage_gae=gae_terminates_all_reads_padding_and_scales)
    target.deviations = {"adv.gae": [NAN_PADDING, NO_BOOTSTRAP]}
    result = _certify(target, only_nan_padding_cases)
    assert result.status == "fail", result.message
    assert result.check == "advantages"

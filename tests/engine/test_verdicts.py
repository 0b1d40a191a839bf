"""Verdicts a user can act on: severity per CONTRACT §0a, deviations scoped by check and
feature, per-case inexpressible inputs, purity on every call, --fail-on."""

from __future__ import annotations

import json

import pytest

from rlconform.adapters.base import Deviation, Inexpressible, with_overrides
from rlconform.conformance.cli import main
from rlconform.conformance.profiles import get_run_profile
from rlconform.conformance.registry import get
from rlconform.conformance.runner import run_clause
from tests.engine import targets

CI = get_run_profile("ci")


@pytest.mark.parametrize(
    ("factory", "clause_id", "severity", "cause"),
    [
        (targets.nominal_grpo_target, "adv.grpo", "nominal", set()),
        (targets.edge_reward_target, "reward.place_last", "edge", {"empty_response"}),
        (targets.hardening_token_mean_target, "agg.token_mean", "hardening", {"padding_nonfinite"}),
    ],
)
def test_broken_variants_are_graded_by_the_mildest_domain_they_fail_on(
    factory, clause_id, severity, cause
):
    result = run_clause(get(clause_id), factory(), CI)
    assert result.status == "fail"
    assert result.severity == severity
    assert cause <= set(result.features)
    if severity == "nominal":
        from rlconform.conformance.features import domain_of_features

        assert domain_of_features(result.features) == "nominal"


@pytest.mark.parametrize(
    ("attribute", "clause_id", "fail_on", "code"),
    [
        ("nominal_grpo_target", "adv.grpo", "nominal", 1),
        ("edge_reward_target", "reward.place_last", "nominal", 0),
        ("edge_reward_target", "reward.place_last", "edge", 1),
        ("hardening_token_mean_target", "agg.token_mean", "nominal", 0),
        ("hardening_token_mean_target", "agg.token_mean", "edge", 0),
        ("hardening_token_mean_target", "agg.token_mean", "hardening", 1),
    ],
)
def test_fail_on_sets_the_exit_code_by_severity(attribute, clause_id, fail_on, code, tmp_path):
    out = tmp_path / "r.json"
    argv = ["certify", f"tests.engine.targets:{attribute}", "--only", clause_id]
    argv += ["--fail-on", fail_on, "--json", str(out)]
    assert main(argv) == code
    report = json.loads(out.read_text())
    (entry,) = report["clauses"]
    assert entry["status"] == "fail" and entry["severity"] in ("nominal", "edge", "hardening")
    assert report["summary"]["by_severity"][entry["severity"]]["fail"] == 1


def test_json_report_keeps_the_schema_and_adds_severity_keys(tmp_path):
    out = tmp_path / "r.json"
    main(
        [
            "certify",
            "tests.engine.targets:edge_reward_target",
            "--only",
            "reward.*",
            "--json",
            str(out),
        ]
    )
    report = json.loads(out.read_text())
    assert {"target", "clauses", "summary"} <= set(report)
    for entry in report["clauses"]:
        assert {"id", "status", "message", "counterexample", "severity", "features"} <= set(entry)
        assert (entry["severity"] is None) == (entry["status"] in ("pass", "skip"))
    for status in ("pass", "fail", "deviation", "skip", "error"):
        assert isinstance(report["summary"][status], int)
    assert set(report["summary"]["by_severity"]) == {"nominal", "edge", "hardening"}


def test_markdown_opens_with_severity_counts_and_root_causes(tmp_path):
    out = tmp_path / "r.md"
    main(
        [
            "certify",
            "tests.engine.targets:edge_reward_target",
            "--only",
            "reward.*",
            "--markdown",
            str(out),
        ]
    )
    text = out.read_text()
    assert text.index("| severity |") < text.index("## Root causes") < text.index("## Clauses")
    assert "`empty_response`" in text.split("## Root causes")[1].split("## Clauses")[0]


# ---- a deviation never hides a different break --------------------------------------------


def _column_minus_one_and_doubled_holes(self, scores, response_mask, loss_mask):
    """The declared break (L_i = 0 -> column -1) plus a different one: rows with a mask hole
    get twice their reward (the values check, on ordinary cases)."""
    out = targets._last_column_when_empty(self, scores, response_mask, loss_mask)
    holed = ((response_mask - loss_mask).abs().sum(-1) > 0).unsqueeze(-1)
    return out * (1 + holed.to(out.dtype))


_DECLARED = {
    "reward.place_last": Deviation(
        "L_i = 0 writes the score at column -1",
        checks=("padding_zero",),
        features=("empty_response",),
    )
}


def test_a_declared_deviation_is_observed_with_its_severity():
    target = targets.edge_reward_target()
    target.deviations = dict(_DECLARED)
    result = run_clause(get("reward.place_last"), target, CI)
    assert result.status == "deviation"
    assert result.severity == "edge"
    (entry,) = result.deviations
    assert entry.observed and entry.count > 0 and entry.severity == "edge"


def test_a_break_of_another_check_in_a_deviating_clause_fails():
    target = with_overrides(
        targets.TorchRef(), name="two-breaks", place_reward_last=_column_minus_one_and_doubled_holes
    )
    target.deviations = dict(_DECLARED)
    result = run_clause(get("reward.place_last"), target, CI)
    assert result.status == "fail"
    assert result.check == "values"
    assert result.message.startswith("reward.place_last/values:")
    assert "also declared" in result.message


def test_a_break_outside_the_declared_features_fails():
    target = with_overrides(
        targets.TorchRef(), name="always-last-column", place_reward_last=targets._last_column
    )
    target.deviations = dict(_DECLARED)
    result = run_clause(get("reward.place_last"), target, CI)
    assert result.status == "fail"
    assert "empty_response" not in result.features


def test_a_stale_entry_fails_and_is_named():
    target = targets.TorchRef()
    target.deviations = dict(_DECLARED)
    result = run_clause(get("reward.place_last"), target, CI)
    assert result.status == "fail" and result.severity is None
    assert "stale deviation" in result.message
    assert "padding_zero on empty_response" in result.message
    assert "L_i = 0 writes the score at column -1" in result.message


def test_an_entry_naming_an_unknown_check_or_feature_is_an_error():
    for entry in (
        Deviation("x", checks=("no_such_check",)),
        Deviation("x", checks=("values",), features=("no_such_feature",)),
    ):
        target = targets.TorchRef()
        target.deviations = {"reward.place_last": entry}
        result = run_clause(get("reward.place_last"), target, CI)
        assert result.status == "error"
        assert "unknown" in result.message


# ---- purity on every call -------------------------------------------------------------------


def _writes_into_its_loss_mask(self, scores, response_mask, loss_mask):
    out = type(self).place_reward_last(self, scores, response_mask, loss_mask)
    loss_mask.fill_(1)
    return out


def test_an_operation_that_writes_into_its_inputs_fails_no_mutation():
    target = with_overrides(
        targets.TorchRef(), name="mutating", place_reward_last=_writes_into_its_loss_mask
    )
    result = run_clause(get("reward.place_last"), target, CI)
    assert result.status == "fail"
    assert result.check == "no_mutation"
    assert "place_reward_last modified its input" in result.message


def test_no_mutation_can_be_declared_and_then_hides_nothing_else():
    target = with_overrides(
        targets.TorchRef(), name="mutating", place_reward_last=_writes_into_its_loss_mask
    )
    target.deviations = {
        "reward.place_last": Deviation("writes its loss mask", checks=("no_mutation",))
    }
    assert run_clause(get("reward.place_last"), target, CI).status == "deviation"


# ---- per-case inexpressible inputs ---------------------------------------------------------


def _grpo_without_unequal_groups(self, token_level_rewards, response_mask, index, **kwargs):
    labels = list(index)
    sizes = {labels.count(label) for label in labels}
    if len(sizes) > 1:
        raise Inexpressible("groups of different sizes do not fit a (groups, n) grid")
    return type(self).advantage_grpo(self, token_level_rewards, response_mask, index, **kwargs)


def test_an_inexpressible_case_is_skipped_and_counted_and_other_cases_still_run():
    target = with_overrides(
        targets.TorchRef(), name="grid-grpo", advantage_grpo=_grpo_without_unequal_groups
    )
    result = run_clause(get("adv.grpo"), target, CI)
    assert result.status == "pass"
    assert result.skipped_cases > 0
    assert "inexpressible: groups of different sizes" in result.message


def test_an_inexpressible_case_does_not_hide_a_break_in_the_others():
    def broken(self, token_level_rewards, response_mask, index, **kwargs):
        advantages, returns = _grpo_without_unequal_groups(
            self, token_level_rewards, response_mask, index, **kwargs
        )
        return advantages * 2, returns

    target = with_overrides(targets.TorchRef(), name="grid-grpo-broken", advantage_grpo=broken)
    result = run_clause(get("adv.grpo"), target, CI)
    assert result.status == "fail" and result.check == "advantages"


def test_every_case_inexpressible_is_a_skip():
    def never(self, *args, **kwargs):
        raise Inexpressible("this framework takes no batch at all")

    target = with_overrides(targets.TorchRef(), name="never", advantage_grpo=never)
    result = run_clause(get("adv.grpo"), target, CI)
    assert result.status == "skip"
    assert "inexpressible: this framework takes no batch at all" in result.message


def test_an_unsupported_variant_skips_only_the_cases_that_ask_for_it():
    target = with_overrides(
        targets.TorchRef(), name="no-token-sum", agg_loss=targets.agg_without_token_sum
    )
    assert run_clause(get("agg.token_sum"), target, CI).status == "skip"
    result = run_clause(get("agg.shard_invariance"), target, CI)
    assert result.status == "pass" and result.skipped_cases > 0


def _noisy_placement(self, scores, response_mask, loss_mask):
    import torch

    out = type(self).place_reward_last(self, scores, response_mask, loss_mask)
    return out + 1e-3 * torch.rand(()) * (out != 0)


def test_an_operation_with_unseeded_randomness_fails_deterministic():
    target = with_overrides(targets.TorchRef(), name="noisy", place_reward_last=_noisy_placement)
    result = run_clause(get("reward.place_last"), target, CI)
    assert result.status == "fail" and result.check == "deterministic"
    assert "returned a different output on a second call" in result.message

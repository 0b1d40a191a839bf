"""Mutants of the step clauses ("step.update", "step.metrics", "step.state") and CONTRACT §0b:
each kind of break gets its consequence, measured on torchref's step."""

from __future__ import annotations

import dataclasses

import pytest

from rlconform.conformance.profiles import get_run_profile
from rlconform.conformance.registry import select
from rlconform.conformance.runner import certify
from tests.mutants import step_plants as m

CASES = [
    # (mutant ops, clause glob, clause, consequence, configs that must be named)
    ({"advantage_grpo": m.grpo_scaled}, "adv.grpo", "adv.grpo", "update", {"default", "dr_grpo"}),
    (
        {"advantage_grpo": m.grpo_padding},
        "adv.invariants",
        "adv.invariants",
        "contained",
        {"default", "dr_grpo"},
    ),
    (
        {"kl_controller_update": m.controller_nan},
        "kl.adaptive_controller",
        "kl.adaptive_controller",
        "state",
        {"reinforce_pp_kl_in_reward"},
    ),
    ({"ppo_clip_loss": m.clipfrac_zero}, "loss.ppo_clip", "loss.ppo_clip", "metric", {"default"}),
    ({"advantage_opo": m.opo_shifted}, "adv.opo", "adv.opo", "unreached", set()),
    ({"sapo_loss": m.sapo_swapped}, "loss.sapo", "loss.sapo", "update", {"sapo"}),
]


@pytest.mark.parametrize(
    ("ops", "glob", "clause_id", "consequence", "configs"), CASES, ids=[c[3] for c in CASES]
)
def test_break_gets_its_consequence(ops, glob, clause_id, consequence, configs):
    target = m.mutant(f"mutant-{consequence}", **ops)
    report = certify(target, select(glob), get_run_profile("ci"), seed=0)
    result = next(r for r in report.clauses if r.id == clause_id)
    assert result.status == "fail", result.message
    assert result.consequence == consequence, result.consequence_basis
    assert configs <= set(result.configs)
    if consequence == "unreached":
        assert result.configs == []


def test_update_names_the_first_diverging_stage():
    target = m.mutant("grpo-scaled", advantage_grpo=m.grpo_scaled)
    report = certify(target, select("step.update"), get_run_profile("ci"), seed=0)
    (result,) = report.clauses
    assert (result.status, result.check, result.consequence) == ("fail", "advantages", "update")
    assert "under trainer config" in result.message


def test_local_denominator_is_caught_at_the_loss_stage():
    target = m.mutant("agg-local", agg_loss=m.agg_local)
    report = certify(target, select("step.update"), get_run_profile("ci"), seed=0)
    (result,) = report.clauses
    assert result.status == "fail"
    assert result.check == "loss"
    assert "uneven_shards" in result.features or result.severity == "nominal"


def test_gradient_at_a_tool_token_is_caught():
    target = m.mutant("entropy-over-response", train_step=m.entropy_over_response)
    report = certify(target, select("step.update"), get_run_profile("ci"), seed=0)
    (result,) = report.clauses
    assert (result.status, result.check) == ("fail", "gradient_off_actions")
    assert result.consequence == "update"


def test_metric_break_fails_step_metrics_only():
    target = m.mutant("clipfrac", ppo_clip_loss=m.clipfrac_zero)
    report = certify(target, select("step.*"), get_run_profile("ci"), seed=0)
    status = {r.id: (r.status, r.check, r.consequence) for r in report.clauses}
    assert status["step.metrics"] == ("fail", "clip_fraction", "metric")
    assert status["step.update"][0] == "pass"


def test_fail_on_consequence_gates_the_exit_code():
    target = m.mutant("clipfrac", ppo_clip_loss=m.clipfrac_zero)
    report = certify(target, select("loss.ppo_clip"), get_run_profile("ci"), seed=0)
    assert report.exit_code == 1
    report.fail_on_consequence = frozenset({"update", "crash", "state"})
    assert report.exit_code == 0
    data = report.as_json()
    assert data["summary"]["by_consequence"]["metric"] == 1
    assert set(data["configs"]) >= {"default", "dr_grpo"}
    clause = data["clauses"][0]
    assert clause["consequence"] == "metric" and "default" in clause["configs"]


@pytest.mark.parametrize(("configs", "status"), [(["dr_grpo"], "deviation"), (["default"], "fail")])
def test_a_baseline_entry_scoped_by_config_covers_only_that_config(configs, status):
    """A step entry with ``configs`` excuses failures under those trainer configs only."""
    from rlconform.adapters.base import Deviation

    target = m.mutant("scaled_dr_grpo", train_step=m.loss_scaled_under_dr_grpo)
    target.deviations = {
        "step.update": [
            Deviation(
                "the loss is doubled under Dr. GRPO",
                ("loss", "gradient", "entropy_gradient"),
                configs=tuple(configs),
            )
        ]
    }
    report = certify(target, select("step.update"), get_run_profile("ci"))
    (result,) = report.clauses
    assert result.status == status, result.message


@pytest.mark.parametrize(
    ("plant", "check"),
    [(m.entropy_mean_per_micro_batch, "entropy/mean"), (m.kl_mean_doubled, "kl_loss/mean")],
)
def test_token_mean_metrics_are_checked(plant, check):
    """step.metrics' entropy/mean and kl_loss/mean: the batch's action-token means."""
    target = m.mutant(check, train_step=plant)
    report = certify(target, select("step.metrics"), get_run_profile("ci"), seed=0)
    (result,) = report.clauses
    assert (result.status, result.check, result.consequence) == ("fail", check, "metric")


def test_a_declared_break_under_one_config_does_not_hide_another():
    """A case that fails a declared check under one config still runs under the others:
    the new break under another config is reported, not lost behind the declared one."""
    from rlconform.adapters.base import Deviation

    target = m.mutant("two-breaks", train_step=m.doubled_under_two_configs)
    target.deviations = {
        "step.update": [
            Deviation(
                "the reported loss is off by one under Dr. GRPO",
                ("loss",),
                configs=("dr_grpo",),
            )
        ]
    }
    report = certify(target, select("step.update"), get_run_profile("ci"), seed=0)
    (result,) = report.clauses
    assert (result.status, result.check) == ("fail", "entropy_gradient"), result.message
    assert "rloo_kl_loss" in result.message


def test_a_case_one_config_cannot_express_still_runs_under_the_others():
    target = m.mutant(
        "refuses-default", train_step=m.inexpressible_under_default_doubled_under_dr_grpo
    )
    report = certify(target, select("step.update"), get_run_profile("ci"), seed=0)
    (result,) = report.clauses
    assert result.status == "fail", result.message
    assert "dr_grpo" in result.message


def test_a_case_every_config_refuses_is_a_skip():
    from rlconform.adapters.base import Inexpressible

    def refuses(orig, batch, config, state=None):
        raise Inexpressible("no case")

    report = certify(
        m.mutant("refuses-all", train_step=refuses),
        select("step.update"),
        get_run_profile("ci"),
        seed=0,
    )
    (result,) = report.clauses
    assert result.status == "skip", result.message


def _mode_finding(target, configs):
    from rlconform.adapters.base import with_overrides

    if configs is not None:
        every = {c.name: c for c in target.trainer_configs()}
        target = with_overrides(
            target, target.name, trainer_configs=lambda self: [every[n] for n in configs]
        )
    report = certify(target, select("agg.seq_mean_token_sum"), get_run_profile("ci"), seed=0)
    (result,) = report.clauses
    assert result.status == "fail", result.message
    return result


def test_an_aggregation_mode_break_is_judged_under_the_configs_with_that_mode():
    """A seq-mean-token-sum break changes the update only where a config aggregates with it,
    even when another operation's break (the critic loss doubled) makes the step diverge at
    a loss stage under the other configs (ppo_gae's token-mean value loss)."""
    target = m.mutant(
        "mode-and-critic",
        agg_loss=m.agg_seq_mean_token_sum_doubled,
        value_loss=m.value_loss_doubled,
    )
    result = _mode_finding(target, None)
    assert result.consequence == "update", result.consequence_basis
    assert result.configs == ["reinforce_pp_baseline_token_sum"]


def test_an_aggregation_mode_no_config_uses_is_unreached():
    target = m.mutant("mode-only", agg_loss=m.agg_seq_mean_token_sum_doubled)
    result = _mode_finding(target, ["default", "ppo_gae"])
    assert result.consequence == "unreached", result.consequence_basis
    assert "seq-mean-token-sum" in result.consequence_basis


def test_an_aggregation_mode_the_trainer_takes_as_an_option_is_unmeasured():
    """Where the trainer selects the mode by an option no step config sets (the target's
    ``step_unbound_agg_modes``), the finding is unmeasured and names the option."""
    target = m.mutant("mode-option", agg_loss=m.agg_seq_mean_token_sum_doubled)
    target.step_unbound_agg_modes = {"seq-mean-token-sum": "loss_agg_mode=seq-mean-token-sum"}
    result = _mode_finding(target, ["default", "ppo_gae"])
    assert result.consequence is None, result.consequence_basis
    assert result.consequence_basis.startswith("unmeasured"), result.consequence_basis
    assert "loss_agg_mode=seq-mean-token-sum" in result.consequence_basis


def test_a_controller_updated_in_place_is_not_a_state_break():
    """step.state's pinned example runs the determinism check: each call of a step gets its
    own copy of the carried state, so a controller that updates itself in place passes."""
    target = m.mutant("in-place-controller", train_step=m.controller_in_place)
    report = certify(target, select("step.state"), get_run_profile("ci"), seed=0)
    (result,) = report.clauses
    assert result.status == "pass", result.message


@pytest.mark.parametrize(
    ("plant", "consequence", "agrees"),
    [
        (m.nan_loss_when_no_action_token, "metric", True),
        (m.nan_loss_and_gradient_when_no_action_token, "update", False),
    ],
)
def test_a_loss_whose_gradient_agrees_changes_only_the_logged_value(plant, consequence, agrees):
    """§0b: a back-propagated loss that differs while its gradient is the contract's (a NaN
    token mean of an all-masked mini-batch, gradient 0) is ``metric``: the optimizer applies
    the contract's update. The same loss with a wrong gradient is ``update``."""
    target = m.mutant(f"empty-batch-{consequence}", train_step=plant)
    report = certify(target, select("step.update"), get_run_profile("ci"), seed=0)
    (result,) = report.clauses
    assert (result.status, result.check, result.severity) == ("fail", "loss", "edge")
    assert "empty_batch" in result.features
    assert result.consequence == consequence, result.consequence_basis
    assert ("only the loss value differs" in result.message) is agrees


def test_a_declared_gradient_break_does_not_make_the_loss_value_only():
    """The gradient comparison behind ``gradient_agrees`` ignores the baseline: a gradient
    that differs is a differing gradient even where an entry declares it."""
    from rlconform.adapters.base import Deviation

    target = m.mutant(
        "nan-gradient-declared", train_step=m.nan_loss_and_gradient_when_no_action_token
    )
    target.deviations = {
        "step.update": [
            Deviation("a NaN gradient on an empty batch", ("gradient", "gradient_off_actions"))
        ]
    }
    report = certify(target, select("step.update"), get_run_profile("ci"), seed=0)
    (result,) = report.clauses
    assert (result.status, result.check) == ("fail", "loss"), result.message
    assert "only the loss value differs" not in result.message


@pytest.mark.parametrize(
    ("configs", "status"), [(["dr_grpo"], "deviation"), (["default"], "error")]
)
def test_a_crash_under_one_config_is_covered_only_by_an_entry_scoped_to_it(configs, status):
    """A crash names the trainer config it happened under, so a ``runs`` entry scoped by
    config covers it there and nowhere else (without the name no scoped entry covered it)."""
    from rlconform.adapters.base import Deviation

    target = m.mutant("raises_dr_grpo", train_step=m.raises_under_dr_grpo)
    target.deviations = {
        "step.update": [Deviation("the dr_grpo step raises", ("runs",), configs=tuple(configs))]
    }
    report = certify(target, select("step.update"), get_run_profile("ci"))
    (result,) = report.clauses
    assert result.status == status, result.message


def test_a_crash_is_graded_under_the_configs_that_run_the_operation():
    """CONTRACT §0b: an operation that raises is ``crash`` under the configs whose step runs
    it (torchref: only ``rloo_kl_loss`` runs adv.rloo), not under every declared config."""
    target = m.mutant("rloo-raises", advantage_rloo=m.rloo_raises)
    report = certify(target, select("adv.rloo"), get_run_profile("ci"), seed=0)
    (result,) = report.clauses
    assert result.status == "error", result.message
    assert (result.consequence, result.configs) == ("crash", ["rloo_kl_loss"])


@pytest.mark.parametrize(("passed", "consequence"), [(3, None), (10, "contained")])
def test_contained_needs_enough_passing_cases(monkeypatch, passed, consequence):
    """CONTRACT §0b ``contained`` claims the trainer masks the wrong values away: a search
    where only a few cases carried the finding's features says nothing (undetermined)."""
    from rlconform.conformance import consequence as c
    from rlconform.conformance.registry import get

    target = m.mutant("grpo-padding", advantage_grpo=m.grpo_padding)
    monkeypatch.setattr(c, "_step_outcome", lambda *args, **kwargs: (None, passed))
    configs = [config for config in target.trainer_configs() if config.name == "default"]
    kind, names, basis = c.measured(
        get("adv.invariants"), None, "nominal", ["padding_finite"], target, configs, "cpu", 0
    )
    assert kind == consequence, basis
    if consequence is None:
        assert f"only {passed} such cases ran" in basis


@pytest.mark.parametrize(("ordinary", "consequence"), [("gradient", None), (None, "update")])
def test_a_divergence_ordinary_cases_share_is_not_the_features_own(
    monkeypatch, ordinary, consequence
):
    """CONTRACT §0b: under a config whose step diverges at a stage on ordinary cases too (a
    nominal finding there, e.g. a loss type whose normaliser is wrong on every batch), an
    edge finding whose cases diverge at that same stage is not credited with it."""
    from rlconform.conformance import consequence as c
    from rlconform.conformance.registry import get

    def outcome(target, config, domain, required, *args, **kwargs):
        if domain == "nominal" and not required:
            return ordinary, 0 if ordinary else 20
        return "gradient", 5

    target = m.mutant("agg-local", agg_loss=m.agg_local)
    monkeypatch.setattr(c, "_step_outcome", outcome)
    configs = [config for config in target.trainer_configs() if config.name == "default"]
    kind, names, basis = c.measured(
        get("loss.ppo_clip"), "grad", "edge", ["extreme_log_ratio"], target, configs, "cpu", 0
    )
    assert kind == consequence, basis
    if consequence is None:
        assert "on ordinary cases too" in basis
    else:
        assert names == ["default"]


def test_ordinary_cases_carry_none_of_the_findings_features(monkeypatch):
    """CONTRACT §0b: the ordinary cases a divergence is compared with leave out the
    finding's own features (a nominal-domain draw can still carry an edge feature: verl's
    GAE dropping a reward on a mask-0 token would otherwise be 'ordinary' and its own
    update consequence lost)."""
    from rlconform.conformance import consequence as c
    from rlconform.conformance.registry import get

    seen = []

    def outcome(target, config, domain, required, *args, excluded=frozenset(), **kwargs):
        if domain == "nominal" and not required:
            seen.append(excluded)
            # only cases with the finding's feature diverge
            return (None, 20) if "hole_reward" in excluded else ("advantages", 0)
        return "advantages", 5

    target = m.mutant("agg-local", agg_loss=m.agg_local)
    monkeypatch.setattr(c, "_step_outcome", outcome)
    configs = [config for config in target.trainer_configs() if config.name == "ppo_gae"]
    kind, names, basis = c.measured(
        get("adv.gae"), "advantages", "edge", ["hole_reward"], target, configs, "cpu", 0
    )
    assert seen == [frozenset({"hole_reward"})]
    assert kind == "update", basis
    assert names == ["ppo_gae"]


def test_an_operation_the_trainer_runs_outside_the_bound_configs_is_unmeasured():
    """A finding on an operation no bound config runs is ``unreached`` only when the trainer
    cannot run it at all: where the target names it in ``step_unbound_ops`` (its trainer runs
    it under an option the step binding does not cover), the consequence is unmeasured."""
    target = m.mutant("opo-unbound", advantage_opo=m.opo_shifted)
    target.step_unbound_ops = {"advantage_opo": "algorithm.adv_estimator=opo"}
    report = certify(target, select("adv.opo"), get_run_profile("ci"), seed=0)
    (result,) = report.clauses
    assert result.status == "fail", result.message
    assert result.consequence is None, result.consequence
    assert result.consequence_basis.startswith("unmeasured"), result.consequence_basis
    assert "algorithm.adv_estimator=opo" in result.consequence_basis


def test_a_step_that_runs_where_its_profile_refuses_the_batch_fails_at_advantages():
    """Under a profile whose whitening raises on a batch with one action token
    (``whiten_degenerate="raise"``), a trainer step that goes on and produces advantages is
    not the contract's: step.update fails at the advantages stage instead of erroring."""

    def step_with_zeros(orig, batch, config, state=None):
        return orig.train_step(batch, config, state)  # the original's profile: zeros

    target = m.mutant("whitens-degenerate", train_step=step_with_zeros)
    target.profile = dataclasses.replace(
        target.profile, extra={**target.profile.extra, "whiten_degenerate": "raise"}
    )
    report = certify(target, select("step.update"), get_run_profile("ci"), seed=0)
    (result,) = report.clauses
    assert (result.status, result.check) == ("fail", "advantages"), result.message
    assert "refuses this batch under the target's profile" in result.message


def _nan_padding_finding(plant):
    from rlconform.adapters.base import Deviation

    target = m.mutant(plant.__name__, train_step=plant)
    target.deviations = {
        "step.update": [
            Deviation(
                "a separate break: the gradient + 0.1 under Dr. GRPO",
                ("loss", "gradient", "entropy_gradient"),
                configs=("dr_grpo",),
            )
        ]
    }
    report = certify(target, select("step.update"), get_run_profile("ci"), seed=0)
    (result,) = report.clauses
    assert (result.status, result.check) == ("fail", "loss"), result.message
    assert "padding_nonfinite" in result.features or "overflow" in result.features
    return result


@pytest.mark.parametrize(
    ("plant", "consequence"),
    [
        (m.nan_loss_at_padding, "metric"),
        (m.nan_loss_at_padding_beside_a_gradient_shifted_under_dr_grpo, "metric"),
        (m.nan_loss_and_gradient_at_padding, "update"),
    ],
)
def test_a_nan_loss_from_nan_inputs_beside_finite_gradients_is_the_logged_value(plant, consequence):
    """§0b: a NaN at padding that makes the back-propagated loss NaN changes the update only
    if it reaches a gradient (then the gradient is NaN too). Under a config with a second,
    separate finite gradient break (declared), the finding's case fails the gradient check
    as well, but the non-finite input did not reach it: still ``metric``. A NaN gradient is
    ``update``."""
    result = _nan_padding_finding(plant)
    assert result.failure_consequence == consequence, result.failure_basis


def test_a_finite_gradient_break_beside_a_nan_loss_is_its_own_update_elsewhere():
    """The same two-break plant: the gradient break keeps its own consequence, ``update``
    under dr_grpo, in the declared entry's verdict."""
    result = _nan_padding_finding(m.nan_loss_at_padding_beside_a_gradient_shifted_under_dr_grpo)
    (entry,) = [d for d in result.deviations if "+ 0.1" in d.rationale]
    assert (entry.consequence, entry.configs) == ("update", ["dr_grpo"]), entry.basis
    assert (result.consequence, result.configs) == ("update", ["dr_grpo"])


@pytest.mark.parametrize(
    ("checks", "consequence"), [(("loss",), "metric"), (("loss", "gradient_off_actions"), "update")]
)
def test_an_entry_observed_failing_a_gradient_check_is_an_update(monkeypatch, checks, consequence):
    """A declared step entry whose minimal case differs only in the loss value is ``metric``
    only when the entry was never observed failing a gradient check: a NaN at padding that
    leaves the minimal case's gradient alone but reaches it on other cases (observed
    ``gradient_off_actions``) changes the update."""
    from rlconform.conformance import consequence as c
    from rlconform.conformance.registry import get

    def failing(*args, **kwargs):
        # _failing_configs(clause_id, case, checks, target, configs, device, seed,
        # elsewhere, loss_only, nonfinite_inputs): every config fails on the loss only
        loss_only = args[8]
        loss_only.add("default")
        return ["default"]

    target = m.mutant("agg-local", agg_loss=m.agg_local)
    monkeypatch.setattr(c, "_failing_configs", failing)
    configs = [config for config in target.trainer_configs() if config.name == "default"]
    kind, names, basis = c.judge(
        get("step.update"),
        "loss",
        "hardening",
        ["padding_nonfinite"],
        target,
        configs,
        "cpu",
        0,
        case={"samples": []},
        checks=checks,
    )
    assert (kind, names) == (consequence, ["default"]), basis
    if consequence == "update":
        assert "observed failing gradient_off_actions" in basis


@pytest.mark.parametrize("composition", [False, True])
def test_a_declared_composition_break_is_not_credited_to_an_operation(composition):
    """AReaL's case: an operation's off-action values are masked downstream (contained), and
    a separate, declared break between operations makes every step case with a tool token
    diverge at the same stage. Without ``composition`` the harness credits that divergence
    to the operation ("update"); with it those cases are passed over and the operation's
    finding is judged on the rest."""
    from rlconform.adapters.base import Deviation

    target = m.mutant(
        "off-actions-and-composition",
        advantage_grpo=m.grpo_padding,
        train_step=m.advantages_lost_on_rows_with_a_hole,
    )
    target.deviations = {
        "step.update": [
            Deviation(
                "a sample with a tool token loses its advantages",
                ("advantages",),
                ("mask_holes",),
                composition=composition,
            )
        ]
    }
    report = certify(target, select("adv.invariants"), get_run_profile("ci"), seed=0)
    (result,) = report.clauses
    assert result.status == "fail", result.message
    if composition:
        assert result.consequence != "update", result.consequence_basis
        assert "composition break" in result.consequence_basis
    else:
        assert result.consequence == "update", result.consequence_basis


def test_a_clause_is_headed_by_an_unmeasured_finding_before_a_harmless_one():
    """A clause's headline consequence: measured training consequences first, then a finding
    whose consequence is unknown (it may change the update), then the rest; an unmeasured
    finding beside an unreached one does not make the clause read "unreached"."""
    from rlconform.conformance.consequence import headline_rank

    found = ["unreached", None, "contained", "metric", "update", "crash"]
    assert sorted(found, key=headline_rank) == [
        "update",
        "crash",
        None,
        "metric",
        "contained",
        "unreached",
    ]


@pytest.mark.parametrize("unbound", [False, True, "path"])
def test_a_definitional_finding_under_an_unbound_option_keeps_its_kind(unbound):
    """A metric finding on an operation no bound config runs is ``unreached`` only when the
    trainer cannot run it; when the trainer runs it under an option no step config covers
    (``step_unbound_ops``), what the check is still says the consequence: ``metric``."""
    target = m.mutant("gap-shifted", logprob_gap=m.logprob_gap_shifted)
    if unbound == "path":  # named by the binding's trainer path
        target.step_unbound = ("logprob_gap",)
        target.bindings = {
            "logprob_gap": {"path": "old-log-prob step, rollout.calculate_log_probs=True"}
        }
    elif unbound:
        target.step_unbound_ops = {"logprob_gap": "rollout.calculate_log_probs=True"}
    report = certify(target, select("offpolicy.logprob_gap"), get_run_profile("ci"), seed=0)
    (result,) = report.clauses
    assert result.status == "fail", result.message
    if unbound:
        assert result.consequence == "metric", result.consequence_basis
        assert "rollout.calculate_log_probs=True" in result.consequence_basis
    else:
        assert result.consequence == "unreached", result.consequence_basis


def _critic_in_its_own_mode(self):
    """torchref's configs with a critic, the critic aggregating over sequences."""
    from rlconform.conformance.trainer_config import TrainerConfig

    return [
        TrainerConfig(
            "gae_critic_seq_mean",
            {"estimator": "gae", "critic": True, "critic_loss_agg_mode": "seq-mean-token-mean"},
        )
    ]


def _critic_in_the_actors_mode(orig, batch, config, state=None):
    """The critic aggregated like the actor (token-mean), whatever the config says."""
    settings = {**config.settings, "critic_loss_agg_mode": None}
    return orig.train_step(batch, dataclasses.replace(config, settings=settings), state)


@pytest.mark.parametrize("broken", [False, True])
def test_a_critic_aggregating_in_the_wrong_mode_is_caught_at_the_value_loss(broken):
    """step.update's critic_loss_agg_mode: torchref honours it; a critic that aggregates like
    the actor instead fails at the value loss."""
    ops = {"trainer_configs": _critic_in_its_own_mode}
    if broken:
        ops["train_step"] = _critic_in_the_actors_mode
    target = m.mutant("critic-mode", **ops)
    report = certify(target, select("step.update"), get_run_profile("ci"), seed=0)
    (result,) = report.clauses
    if broken:
        assert (result.status, result.check) == ("fail", "value_loss"), result.message
    else:
        assert result.status == "pass", result.message


def _ordinary_outcome(seen):
    """A step whose advantages diverge on ordinary cases (no required feature) and that has
    no case with the minimal case's features (as AReaL's GAE bootstrap: its minimal case
    carries a truncated sample, which the step cannot carry)."""

    def outcome(target, config, domain, required, *args, excluded=frozenset(), **kwargs):
        seen.append((required, excluded))
        if not required:
            return "advantages", 0
        return None, 0

    return outcome


@pytest.mark.parametrize(("ordinary", "consequence"), [(frozenset(), "update"), (None, None)])
def test_an_entry_declaring_no_features_is_measured_on_ordinary_cases(
    monkeypatch, ordinary, consequence
):
    """CONTRACT §0b: a declared break on any case (features []) is searched on ordinary
    cases first, where a divergence at its operation's stage is its update; the minimal
    case's incidental features (here none the step can draw) do not make it undetermined."""
    from rlconform.conformance import consequence as c
    from rlconform.conformance.registry import get

    seen: list = []
    monkeypatch.setattr(c, "_step_outcome", _ordinary_outcome(seen))
    target = m.mutant("grpo-scaled", advantage_grpo=m.grpo_scaled)
    configs = [config for config in target.trainer_configs() if config.name == "default"]
    kind, names, basis = c.measured(
        get("adv.grpo"),
        "advantages",
        "nominal",
        ["mask_holes"],
        target,
        configs,
        "cpu",
        0,
        ordinary=ordinary,
    )
    assert kind == consequence, basis
    if consequence == "update":
        assert names == ["default"] and "ordinary nominal cases" in basis
        assert seen[0] == (frozenset(), frozenset())
    else:
        assert all(required for required, _ in seen)  # only cases with the features


def test_an_ordinary_search_without_a_divergence_falls_back_to_the_features(monkeypatch):
    """Passing ordinary cases prove nothing about the cases the break was seen on: the
    search falls back to cases with the minimal case's features (contained only there)."""
    from rlconform.conformance import consequence as c
    from rlconform.conformance.registry import get

    def outcome(target, config, domain, required, *args, **kwargs):
        return None, 0 if not required else c.CONTAINED_EVIDENCE

    monkeypatch.setattr(c, "_step_outcome", outcome)
    target = m.mutant("grpo-padding", advantage_grpo=m.grpo_padding)
    configs = [config for config in target.trainer_configs() if config.name == "default"]
    kind, _, basis = c.measured(
        get("adv.grpo"),
        "advantages",
        "nominal",
        ["mask_holes"],
        target,
        configs,
        "cpu",
        0,
        ordinary=frozenset({"padding_nonfinite"}),
    )
    assert kind == "contained", basis
    assert "ordinary" not in basis


def test_ordinary_rivals_share_a_stage_or_stand_aside():
    """Which other findings keep a features-[] entry from the ordinary search: one on an
    operation of the same stage that declares no features (or an undeclared failure) could
    cause the same divergence (None); one that declares features only has its cases left
    out; one on another stage does not matter."""
    from rlconform.adapters.torchref import TorchRef
    from rlconform.conformance.consequence import ordinary_rivals
    from rlconform.conformance.registry import get

    target = TorchRef()
    grpo, invariants, ppo = get("adv.grpo"), get("adv.invariants"), get("loss.ppo_clip")
    entry = object()
    alone = [(entry, grpo, "advantages", [])]
    assert ordinary_rivals(alone, entry, grpo, "advantages", target) == frozenset()
    other_stage = [*alone, (object(), ppo, "loss", [])]
    assert ordinary_rivals(other_stage, entry, grpo, "advantages", target) == frozenset()
    featured = [*alone, (object(), invariants, "grpo_zero_off_actions", ["mask_holes"])]
    assert ordinary_rivals(featured, entry, grpo, "advantages", target) == {"mask_holes"}
    rival = [*alone, (object(), invariants, "grpo_zero_off_actions", [])]
    assert ordinary_rivals(rival, entry, grpo, "advantages", target) is None
    failure = [*alone, (object(), grpo, "advantages", None)]
    assert ordinary_rivals(failure, entry, grpo, "advantages", target) is None

"""Baseline files: declared breaks as data, --write-baseline and --baseline."""

from __future__ import annotations

import json

import pytest

from rlconform.adapters.base import Deviation, SetupError
from rlconform.conformance import baseline
from rlconform.conformance.cli import main

EDGE = "tests.engine.targets:edge_reward_target"

_VALID = """
format = 1
target = "x"
version = "1"

[[deviation]]
clause = "reward.place_last"
checks = ["padding_zero"]
features = ["empty_response"]
rationale = "L_i = 0 writes the score at column -1"
"""


def _write(tmp_path, text, name="b.toml"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_a_valid_file_loads_into_entries(tmp_path):
    entries = baseline.load(_write(tmp_path, _VALID))
    assert entries == {
        "reward.place_last": [
            Deviation(
                "L_i = 0 writes the score at column -1", ("padding_zero",), ("empty_response",)
            )
        ]
    }


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            ('clause = "reward.place_last"', 'clause = "reward.nope"'),
            "unknown clause id 'reward.nope'",
        ),
        (('checks = ["padding_zero"]', 'checks = ["nope"]'), "unknown check(s) ['nope']"),
        (('checks = ["padding_zero"]', "checks = []"), "never covers a whole clause"),
        (
            ('features = ["empty_response"]', 'features = ["nope"]'),
            "unknown feature id(s) ['nope']",
        ),
        (('rationale = "L_i = 0 writes the score at column -1"', 'rationale = ""'), "rationale"),
        (("format = 1", "format = 2"), "format 2"),
        (('target = "x"', 'target = "x"\nsurprise = 1'), "unknown key(s) ['surprise']"),
        (('checks = ["padding_zero"]', 'checks = "padding_zero"'), "must be a list of strings"),
        (("[[deviation]]", "[[deviation]"), "not valid TOML"),
    ],
)
def test_invalid_files_are_one_line_setup_errors(tmp_path, edit, message):
    path = _write(tmp_path, _VALID.replace(*edit))
    with pytest.raises(SetupError) as raised:
        baseline.load(path)
    text = str(raised.value)
    assert message in text and "\n" not in text
    assert str(path) in text


def test_cli_exits_2_on_a_bad_or_missing_baseline(tmp_path, capsys):
    assert (
        main(
            [
                "certify",
                "torchref",
                "--only",
                "reward.place_last",
                "--baseline",
                str(tmp_path / "none.toml"),
            ]
        )
        == 2
    )
    bad = _write(tmp_path, _VALID.replace('checks = ["padding_zero"]', 'checks = ["nope"]'))
    assert main(["certify", "torchref", "--only", "reward.place_last", "--baseline", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert all(line.startswith("rlconform: error: baseline ") for line in err)


def test_merged_keeps_the_shipped_entries_and_adds_the_file_once():
    shipped = {"adv.gae": Deviation("a", ("advantages",)), "kl.in_reward": "whole clause"}
    extra = {"adv.gae": [Deviation("b", ("returns",)), Deviation("a", ("advantages",))]}
    out = baseline.merged(shipped, extra)
    assert out["adv.gae"] == [Deviation("a", ("advantages",)), Deviation("b", ("returns",))]
    assert out["kl.in_reward"] == [Deviation("whole clause")]


def test_write_then_apply_a_baseline(tmp_path):
    written = tmp_path / "fork.toml"
    assert main(["certify", EDGE, "--only", "reward.*", "--write-baseline", str(written)]) == 0
    entries = baseline.load(written)
    (entry,) = entries["reward.place_last"]
    assert entry.checks == ("padding_zero",) and entry.features == ("empty_response",)
    assert main(["certify", EDGE, "--only", "reward.*"]) == 1
    assert main(["certify", EDGE, "--only", "reward.*", "--baseline", str(written)]) == 0


def test_write_baseline_with_only_merges_into_the_existing_file(tmp_path):
    """--only refreshes a subset: entries of other clauses stay, a reviewed rationale of an
    entry the run writes again is kept."""
    written = tmp_path / "fork.toml"
    other = (
        '\n[[deviation]]\nclause = "adv.grpo"\nchecks = ["advantages"]\nfeatures = []\n'
        'rationale = "reviewed: population std"\n'
    )
    assert main(["certify", EDGE, "--only", "reward.*", "--write-baseline", str(written)]) == 0
    text = written.read_text().replace(
        baseline.load(written)["reward.place_last"][0].rationale, "reviewed: column -1"
    )
    written.write_text(text + other)
    assert main(["certify", EDGE, "--only", "reward.*", "--write-baseline", str(written)]) == 0
    entries = baseline.load(written)
    assert [e.rationale for e in entries["reward.place_last"]] == ["reviewed: column -1"]
    assert [e.rationale for e in entries["adv.grpo"]] == ["reviewed: population std"]


def test_write_baseline_with_only_keeps_other_entries_whole(tmp_path):
    """An entry of a clause outside the run keeps its model, fingerprint, configs,
    composition, severity and observed message: without its model or fingerprint it would
    excuse any failure of its check (a written baseline hiding a second bug)."""
    written = tmp_path / "fork.toml"
    others = (
        '\n[[deviation]]\nclause = "adv.grpo"\nchecks = ["advantages"]\nfeatures = []\n'
        'rationale = "population std"\nmodel = { grpo_std_ddof = 0 }\nseverity = "nominal"\n'
        'observed = "seen"\n'
        '\n[[deviation]]\nclause = "kl.estimators"\nchecks = ["value"]\nfeatures = []\n'
        'rationale = "a clamp"\nfingerprint = { case = "{}", digest = "sha256:00" }\n'
        '\n[[deviation]]\nclause = "step.update"\nchecks = ["gradient"]\nfeatures = []\n'
        'rationale = "between ops"\nconfigs = ["ppo"]\ncomposition = true\n'
    )
    assert main(["certify", EDGE, "--only", "reward.*", "--write-baseline", str(written)]) == 0
    written.write_text(written.read_text() + others)
    assert main(["certify", EDGE, "--only", "reward.*", "--write-baseline", str(written)]) == 0
    entries = baseline.load(written)
    assert entries["adv.grpo"][0].model == (("grpo_std_ddof", 0),)
    assert entries["kl.estimators"][0].fingerprint == ("{}", "sha256:00")
    (step,) = entries["step.update"]
    assert step.configs == ("ppo",) and step.composition
    text = written.read_text()
    assert 'severity = "nominal"' in text and 'observed = "seen"' in text


def test_a_stale_baseline_entry_is_reported_by_name(tmp_path):
    path = _write(tmp_path, _VALID)
    out = tmp_path / "r.json"
    argv = ["certify", "torchref", "--only", "reward.place_last", "--baseline", str(path)]
    assert main([*argv, "--json", str(out)]) == 1
    (entry,) = json.loads(out.read_text())["clauses"]
    assert entry["status"] == "fail" and "stale deviation" in entry["message"]
    assert (
        "[padding_zero on empty_response] L_i = 0 writes the score at column -1" in entry["message"]
    )


def test_render_round_trips_through_load(tmp_path):
    rows = [
        {
            "clause": "adv.gae",
            "checks": ["advantages", "returns"],
            "features": ["padding_nonfinite"],
            "rationale": 'quotes " and \\ backslashes survive',
            "severity": "hardening",
            "observed": "line one",
        }
    ]
    path = _write(tmp_path, baseline.render({"name": "t", "version": "1"}, rows))
    (entry,) = baseline.load(path)["adv.gae"]
    assert entry == Deviation(
        'quotes " and \\ backslashes survive', ("advantages", "returns"), ("padding_nonfinite",)
    )


def test_an_entry_may_be_scoped_by_trainer_config(tmp_path):
    text = _VALID.replace('clause = "reward.place_last"', 'clause = "step.update"').replace(
        'checks = ["padding_zero"]', 'checks = ["loss"]\nconfigs = ["dr_grpo"]'
    )
    (entry,) = baseline.load(_write(tmp_path, text))["step.update"]
    assert entry.configs == ("dr_grpo",)
    assert entry.covers("loss", frozenset({"empty_response"}), "dr_grpo")
    assert not entry.covers("loss", frozenset({"empty_response"}), "default")
    rendered = baseline.render(
        {"name": "x", "version": "1"},
        [{"clause": "step.update", "checks": ["loss"], "configs": ["dr_grpo"], "rationale": "r"}],
    )
    assert 'configs = ["dr_grpo"]' in rendered
    assert baseline.parse(tomllib_loads(rendered), "rendered")["step.update"][0].configs == (
        "dr_grpo",
    )


def test_a_step_entry_may_be_a_composition_break(tmp_path):
    """``composition = true`` (a break between operations) loads, renders and round-trips;
    it is a bool, and only a step clause's entry may carry it."""
    step = _VALID.replace('clause = "reward.place_last"', 'clause = "step.update"').replace(
        'checks = ["padding_zero"]', 'checks = ["advantages"]'
    )
    (entry,) = baseline.load(_write(tmp_path, step + "composition = true\n"))["step.update"]
    assert entry.composition
    (plain,) = baseline.load(_write(tmp_path, step, "plain.toml"))["step.update"]
    assert not plain.composition
    row = {"clause": "step.update", "checks": ["advantages"], "rationale": "r"}
    rendered = baseline.render({"name": "x", "version": "1"}, [{**row, "composition": True}])
    assert "composition = true" in rendered
    assert baseline.parse(tomllib_loads(rendered), "rendered")["step.update"][0].composition
    assert "composition" not in baseline.render({"name": "x", "version": "1"}, [row])
    for text, message in (
        (step + 'composition = "yes"\n', "'composition' must be true or false"),
        (_VALID + "composition = true\n", "only a step clause's entry"),
    ):
        with pytest.raises(SetupError, match=message):
            baseline.load(_write(tmp_path, text, "bad.toml"))


def tomllib_loads(text):
    import tomllib

    return tomllib.loads(text)


NOMINAL = "tests.engine.targets:nominal_grpo_target"


def test_write_baseline_writes_a_model_when_a_profile_value_explains_the_break(tmp_path):
    """A population std seen on ordinary cases is not written as a featureless entry (which
    would excuse any bug of adv.grpo/advantages) but pinned by its model."""
    written = tmp_path / "fork.toml"
    assert main(["certify", NOMINAL, "--only", "adv.grpo", "--write-baseline", str(written)]) == 0
    (entry,) = baseline.load(written)["adv.grpo"]
    assert entry.checks == ("advantages",) and entry.features == ()
    assert entry.model == (("grpo_std_ddof", 0),)
    assert "model = { grpo_std_ddof = 0 }" in written.read_text()
    assert main(["certify", NOMINAL, "--only", "adv.grpo", "--baseline", str(written)]) == 0


def test_the_report_names_the_profile_value_under_which_the_minimal_case_passes(tmp_path):
    out = tmp_path / "r.json"
    assert main(["certify", NOMINAL, "--only", "adv.grpo", "--json", str(out)]) == 1
    (clause,) = json.loads(out.read_text())["clauses"]
    assert clause["profile_hint"] == {"grpo_std_ddof": 0}
    assert "the minimal case passes with profile grpo_std_ddof=0" in clause["message"]


def test_no_profile_hint_when_no_legitimate_value_explains_it(tmp_path):
    out = tmp_path / "r.json"
    assert main(["certify", EDGE, "--only", "reward.place_last", "--json", str(out)]) == 1
    (clause,) = json.loads(out.read_text())["clauses"]
    assert clause["profile_hint"] == {} and "passes with profile" not in clause["message"]


@pytest.mark.parametrize(
    ("model", "message"),
    [
        ("model = { grpo_std_dof = 0 }", "unknown profile key 'grpo_std_dof'"),
        ("model = { grpo_std_ddof = [0] }", "must be a number, bool or string"),
        ("model = 0", "must be a table"),
    ],
)
def test_a_bad_model_is_a_one_line_setup_error(tmp_path, model, message):
    path = _write(tmp_path, _VALID + model + "\n")
    with pytest.raises(SetupError) as raised:
        baseline.load(path)
    assert message in str(raised.value) and "\n" not in str(raised.value)


def test_a_model_round_trips_through_render_and_load(tmp_path):
    row = {
        "clause": "adv.grpo",
        "checks": ["advantages"],
        "features": [],
        "rationale": "population std",
        "model": {"grpo_std_ddof": 0, "grpo_singleton": "zero"},
    }
    path = _write(tmp_path, baseline.render({"name": "x", "version": "1"}, [row]))
    (entry,) = baseline.load(path)["adv.grpo"]
    assert dict(entry.model) == {"grpo_std_ddof": 0, "grpo_singleton": "zero"}

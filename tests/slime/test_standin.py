"""The adapter's plumbing, exercised against the stand-in package (no slime needed).

The stand-in has slime's module paths and signatures and the contract's math, so a
certification through the adapter passes every clause the adapter binds, except where
slime's *signature* cannot carry what the clause needs (listed below, with the reason);
those are checked to fail in exactly that way.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest
import torch

from rlconform.adapters.base import Deviation, SetupError
from rlconform.conformance.profiles import get_run_profile
from rlconform.conformance.registry import select
from rlconform.conformance.runner import certify
from tests.slime.conftest import STANDIN

# Clauses the stand-in cannot pass through slime's signatures, whatever its math: clause
# -> a phrase of the failure message.
SIGNATURE_LIMITED = {
    # get_advantages_and_returns_batch takes no loss mask (GAE over every response token).
    "adv.gae": "advantage_gae",
    # get_grpo_returns / GAE write every response token (the reducer applies the mask).
    "adv.invariants": "mask-0 token",
    # loss_function receives the step's rollout count from the trainer (all samples).
    "agg.seq_mean_token_mean": "local denominators",
    # the ratio exp(logp - old) is formed before compute_approx_kl, in float32, as
    # policy_loss_function does: at |logp - old| ~ 100 it is a denormal, whatever follows.
    "kl.importance_weighted": "importance_weighted_kl",
    # the dynamic-sampling filter is one keep/drop predicate per group: no per-sample
    # reasons (a NaN log-prob is kept), no filter statistics beyond dropped-group counts.
    "filter.reasons": "non_finite",
    "filter.order": "uids of the kept samples",
    "filter.stats": "counts per reason",
    # compute_metrics_from_samples logs no statistics without aborted samples.
    "metrics.response_length": "missing",
}


# What slime's trainer does around a function, whatever the function's math: the adapter
# torch.cat()s per-sample lists as policy_loss_function does, which raises for a batch of
# zero samples. Declared for the stand-in (the real baseline has the same entries).
TRAINER_FORCED = {
    clause_id: [
        Deviation(
            "policy_loss_function torch.cat()s per-sample lists",
            checks=("runs",),
            features=("no_samples",),
        )
    ]
    for clause_id in ("loss.ppo_clip", "loss.dual_clip", "loss.cispo", "loss.gspo")
}


def test_standin_certification_passes_every_bound_clause(standin_target):
    target = standin_target
    target.deviations = dict(TRAINER_FORCED)  # the manifest describes real slime
    # the stand-in's compute_policy_loss clamps every log-ratio at 20 (loss.ppo_clip), the
    # sequence ratio of GSPO included, where slime's profile says unclamped
    extra = {**target.profile.extra, "gspo_log_ratio_max": 20.0}
    target.profile = dataclasses.replace(target.profile, extra=extra)
    report = certify(target, select(None), get_run_profile("ci"))
    statuses = {r.id: r for r in report.clauses}
    bound = [r for r in report.clauses if r.status != "skip"]
    assert len(bound) >= 10, [r.id for r in bound]
    for result in bound:
        if result.id in SIGNATURE_LIMITED:
            assert result.status == "fail", (result.id, result.status, result.message)
            assert SIGNATURE_LIMITED[result.id] in result.message, result.message
        elif result.id in TRAINER_FORCED:
            assert result.status == "deviation", (result.id, result.status, result.message)
        else:
            assert result.status == "pass", (result.id, result.status, result.message)
    for clause_id in (
        "logprob.alignment",
        "reward.place_last",
        "adv.grpo",
        "mask.loss",
        "batch.seqlen_balance",
        "kl.in_reward",
        "offpolicy.is_correction",
        "offpolicy.logprob_gap",
    ):
        assert statuses[clause_id].status == "pass", (clause_id, statuses[clause_id].message)
    # modes slime does not have are skips with the reason, not errors
    assert statuses["agg.token_sum"].status == "skip"
    assert "slime has no 'token-sum'" in statuses["agg.token_sum"].message


def test_standin_describe_version_and_shims(standin_target):
    info = standin_target.describe()
    assert info["name"] == "slime"
    assert info["version"] == "0.0.0+standin+git.unknown"  # setup.py version, no .git
    assert standin_target.missing == []
    import slime

    assert str(STANDIN) in slime.__file__
    for shim in standin_target.shims:  # only modules that were absent are shimmed
        name = shim.split()[0].split(".")[0]
        assert getattr(sys.modules[name], "__rlconform_shim__", None)


def test_uncompiled_unwraps_torch_compile():
    from rlconform.adapters.slime.loader import uncompiled

    def f(x):
        return x + 1

    compiled = torch.compile(f, dynamic=True)
    assert uncompiled(compiled) is f
    assert uncompiled(f) is f


def test_missing_checkout_path_is_a_setup_error(tmp_path, isolated_imports):
    from rlconform.adapters.slime import load

    with pytest.raises(SetupError, match="no slime/__init__.py"):
        load(framework_path=str(tmp_path))


def test_git_head_of_a_checkout(tmp_path):
    from rlconform.adapters.slime.loader import version

    (tmp_path / "setup.py").write_text('setup(name="slime", version="9.9")\n')
    git = tmp_path / ".git"
    (git / "refs" / "heads").mkdir(parents=True)
    (git / "HEAD").write_text("ref: refs/heads/main\n")
    (git / "refs" / "heads" / "main").write_text("abc123\n")
    assert version(tmp_path) == "9.9+git.abc123"
    (git / "HEAD").write_text("def456\n")
    assert version(tmp_path) == "9.9+git.def456"


def test_cli_without_slime_exits_2_with_what_to_do(tmp_path):
    code = (
        "import sys, importlib.util\n"
        "if importlib.util.find_spec('slime') is not None: sys.exit(99)\n"
        "from rlconform.conformance.cli import main\n"
        "sys.exit(main(['certify', 'slime', '--only', 'kl.*']))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=120
    )
    if done.returncode == 99:
        pytest.skip("slime is installed in this environment")
    assert done.returncode == 2, done.stderr
    assert "--framework-path" in done.stderr + done.stdout


def _certify_checkout(tmp_path, checkout):
    """``certify slime --framework-path CHECKOUT --only logprob.alignment`` in a subprocess."""
    code = (
        "import sys\n"
        "from rlconform.conformance.cli import main\n"
        f"sys.exit(main(['certify', 'slime', '--framework-path', {str(checkout)!r}, "
        "'--only', 'logprob.alignment']))\n"
    )
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=120
    )


def test_cli_with_standin_path_runs(tmp_path):
    done = _certify_checkout(tmp_path, STANDIN)
    assert done.returncode == 0, done.stdout + done.stderr


def test_report_notes_list_every_baseline_entry():
    from rlconform.adapters.slime.manifest import deviations
    from rlconform.adapters.slime.notes import render

    entries = deviations()
    text = render({"clauses": [{"id": i, "status": "deviation"} for i in entries]})
    for clause_id in entries:
        assert f"| `{clause_id}` |" in text
    assert "624b824a898ab0ec1fcb4d373004c7f3852bf515" in text


def test_baseline_entries_are_scoped_by_check():
    from rlconform.adapters.slime.manifest import deviations

    for clause_id, entries in deviations().items():
        for entry in entries:
            assert entry.checks, f"{clause_id}: a shipped entry never covers a whole clause"


def test_bindings_name_the_functions_of_every_bound_op(standin_target):
    bindings = standin_target.bindings
    for op in ("seqlen_partitions", "filter_samples", "apply_kl_in_reward", "logprob_gap"):
        assert op in bindings and bindings[op]["functions"] and bindings[op]["path"]
    for op, entry in bindings.items():
        assert standin_target.implements(op), op
        assert all(name.count(".") >= 2 for name in entry["functions"]), entry


def test_target_pickles_as_a_recipe(standin_target):
    import pickle

    standin_target.deviations = {}
    again = pickle.loads(pickle.dumps(standin_target))
    assert again.framework_path == standin_target.framework_path
    assert again.deviations == {} and again.profile == standin_target.profile


def test_gae_bootstrap_is_inexpressible_unless_the_profile_says_none(standin_target):
    from rlconform.adapters.base import Inexpressible

    assert standin_target.profile.get("truncated_bootstrap") is False
    rewards = torch.tensor([[0.0, 1.0]])
    args = (rewards, torch.zeros(1, 2), torch.ones(1, 2, dtype=torch.int64), 1.0, 1.0)
    kwargs = {"bootstrap_value": torch.tensor([0.5]), "terminated": torch.tensor([False])}
    standin_target.advantage_gae(*args, **kwargs)  # declared: treated as terminated
    extra = {**standin_target.profile.extra, "truncated_bootstrap": True}
    standin_target.profile = dataclasses.replace(standin_target.profile, extra=extra)
    with pytest.raises(Inexpressible, match="bootstrap"):
        standin_target.advantage_gae(*args, **kwargs)


def test_a_missing_third_party_package_is_exit_2_naming_it_and_the_extra(tmp_path):
    """slime's observability modules import wandb: without it the operations they serve must
    not be skipped silently (their baseline entries would turn stale) but refused at setup."""
    import shutil

    checkout = tmp_path / "slime-checkout"
    shutil.copytree(STANDIN, checkout)
    path = checkout / "slime" / "observability" / "train_metric_utils.py"
    path.write_text(
        path.read_text() + "\nimport rlconform_absent_package_xyz  # noqa: E402, F401\n"
    )
    done = _certify_checkout(tmp_path, checkout)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "'rlconform_absent_package_xyz'" in done.stderr
    assert "pip install 'rlconform[slime]'" in done.stderr and "Traceback" not in done.stderr

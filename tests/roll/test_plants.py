"""Planted breaks in the ROLL functions the adapter binds: each must fail its clause.

The stand-in (``standin/``) passes these clauses; every plant breaks one function the way a
fork could, either by editing a copy of the stand-in's source file (the functions the
adapter compiles from source: ``loss_func``, the strategy's ops and counters, the workload
inside ``batch_balance``) or by replacing a module attribute (functions it imports).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from rlconform.adapters.registry import load_target
from rlconform.conformance.registry import load_all

STANDIN = Path(__file__).parent / "standin"


def _failing_examples(target, clause_id: str) -> list:
    """The clause's pinned examples on which ``target`` fails (a fast certification)."""
    from rlconform.conformance.context import CheckContext
    from rlconform.conformance.errors import ClauseMismatch, TargetError
    from rlconform.conformance.runner import pinned_cases

    clause = load_all()[clause_id]
    failing = []
    for case in pinned_cases(clause):
        try:
            clause.check(CheckContext(target=target, clause_id=clause_id), case)
        except (ClauseMismatch, TargetError) as failure:
            failing.append((case, failure))
    return failing


@pytest.fixture
def planted(tmp_path):
    """``planted(file, old, new)``: a target over a copy of the stand-in with one edit."""
    loaded = []

    def make(relative: str, old: str, new: str):
        root = tmp_path / "roll-planted"
        shutil.copytree(STANDIN, root)
        path = root / relative
        text = path.read_text()
        assert old in text, f"plant anchor not found in {relative}: {old!r}"
        path.write_text(text.replace(old, new))
        target = load_target("roll", framework_path=str(root), shipped_baseline=False)
        loaded.append(target)
        return target

    yield make
    if loaded:  # later tests import the stand-in again, not the planted copy
        load_target("roll", framework_path=str(STANDIN), shipped_baseline=False)


@pytest.fixture
def standin():
    return load_target("roll", framework_path=str(STANDIN), shipped_baseline=False)


# (clause, file, old, new): edits of functions the adapter compiles from source.
SOURCE_PLANTS = [
    # The strategy counts every row, empty ones too (agg_loss's own default of B).
    (
        "agg.seq_mean_token_mean",
        "roll/distributed/strategy/strategy.py",
        "count = mask.bool().any(dim=-1).to(torch.int64).sum()",
        "count = torch.tensor(mask.shape[0])",
    ),
    # The rlvr actor's dual-clip constant 1 + pg_clip instead of 1 + 2 pg_clip.
    (
        "loss.dual_clip",
        "roll/pipeline/rlvr/actor_worker.py",
        "-adv * (1 + 2 * cfg.pg_clip)",
        "-adv * (1 + cfg.pg_clip)",
    ),
    # The agentic actor (responses with tool observations) takes the optimistic surrogate.
    (
        "loss.ppo_clip",
        "roll/pipeline/agentic/agentic_actor_worker.py",
        "loss = -torch.min(surr1, surr2)",
        "loss = -torch.max(surr1, surr2)",
    ),
    # The rlvr actor reduces each micro-batch with its own counts, not the strategy's.
    (
        "loss.ppo_clip",
        "roll/pipeline/rlvr/actor_worker.py",
        'global_valid_samples=valid["final_response_mask"],',
        "global_valid_samples=None,",
    ),
    # The critic drops the clipped branch of the value loss.
    (
        "loss.value_clip",
        "roll/pipeline/base_worker.py",
        "torch.max(surr1, surr2)",
        "surr1",
    ),
    # batch_balance weighs a sequence by its length only.
    (
        "batch.seqlen_balance",
        "roll/utils/functionals.py",
        "return 24576 * seq_len_list + seq_len_list * seq_len_list",
        "return seq_len_list",
    ),
    # The strategy's entropy op reads the next position's logits row.
    (
        "entropy.from_logits",
        "roll/distributed/strategy/fsdp2_strategy.py",
        "entropy = entropy_from_logits(logits)[:, :-1]",
        "entropy = entropy_from_logits(logits)[:, 1:]",
    ),
]


@pytest.mark.parametrize("clause_id,relative,old,new", SOURCE_PLANTS, ids=lambda x: str(x)[:40])
def test_source_plant_fails_its_clause(standin, planted, clause_id, relative, old, new):
    """On the clause's pinned examples: none fails unplanted (test_standin.py certifies the
    unplanted stand-in in full), some fail planted."""
    assert _failing_examples(standin, clause_id) == []
    assert _failing_examples(planted(relative, old, new), clause_id), clause_id


def test_log_prob_row_off_by_one_fails_alignment(planted):
    """The strategy's log-prob op scores token t + 1 with logits row t + 1: every
    temperature-1 case of logprob.alignment fails (temperatures other than 1 fail on the
    stand-in too: ROLL's op takes no temperature)."""
    from rlconform.conformance.context import CheckContext
    from rlconform.conformance.errors import ClauseMismatch
    from rlconform.conformance.registry import load_all

    clause = load_all()["logprob.alignment"]
    cases = [c for c in clause.examples if c["temperature"] == 1.0]
    assert cases
    good = load_target("roll", framework_path=str(STANDIN), shipped_baseline=False)
    for case in cases:
        clause.check(CheckContext(target=good), case)
    bad = planted(
        "roll/distributed/strategy/fsdp2_strategy.py",
        "log_probs_from_logits(logits[:, :-1], labels)",
        "log_probs_from_logits(logits[:, 1:], labels)",
    )
    failed = 0
    for case in cases:
        try:
            clause.check(CheckContext(target=bad), case)
        except ClauseMismatch:
            failed += 1
    assert failed == len(cases)


def test_agentic_advantage_ignoring_the_mask_fails_gae(standin, monkeypatch):
    """agentic_compute_advantage reading an all-ones mask (holes treated as actions)."""
    import torch

    agentic = standin.runtime.agentic
    original = agentic.agentic_compute_advantage

    def planted(data, *args, response_mask=None, **kwargs):
        mask = data.batch["response_mask"][:, 1:]
        return original(data, *args, response_mask=torch.ones_like(mask), **kwargs)

    assert _failing_examples(standin, "adv.gae") == []
    monkeypatch.setattr(agentic, "agentic_compute_advantage", planted)
    failing = _failing_examples(standin, "adv.gae")
    clause = load_all()["adv.gae"]
    assert failing and all("mask_holes" in clause.features(case) for case, _ in failing)


def test_agentic_reward_norm_over_the_batch_fails_grpo(standin, monkeypatch):
    """compute_response_level_rewards normalising every group with one batch label: the
    agentic path (unequal groups) then breaks adv.grpo."""
    import numpy as np

    agentic = standin.runtime.agentic
    original = agentic.compute_response_level_rewards

    def planted(batch, pipeline_config):
        key = pipeline_config.reward_normalization.grouping
        labels = batch.non_tensor_batch[key]
        batch.non_tensor_batch[key] = np.array(["all"] * len(labels), dtype=object)
        return original(batch, pipeline_config)

    assert _failing_examples(standin, "adv.grpo") == []
    monkeypatch.setattr(agentic, "compute_response_level_rewards", planted)
    assert _failing_examples(standin, "adv.grpo")


def test_sample_mask_ignoring_filters_fails_mask_loss(standin, monkeypatch):
    """get_sample_level_mask keeping every sample (the filters' outcome ignored)."""
    functionals = standin.runtime.functionals
    original = functionals.get_sample_level_mask

    def planted(data, pipeline_config):
        pipeline_config.error_max_len_clip = False
        return original(data, pipeline_config)

    assert _failing_examples(standin, "mask.loss") == []
    monkeypatch.setattr(functionals, "get_sample_level_mask", planted)
    assert _failing_examples(standin, "mask.loss")

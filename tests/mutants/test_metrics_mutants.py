"""Broken metrics implementations must fail on their metrics.* clause."""

from __future__ import annotations

import torch

from rlconform.adapters.base import with_overrides
from tests.conftest import assert_caught, assert_graded


def length_mean_without_aborted(self, response_mask):
    out = self.response_length_metrics(response_mask)
    lengths = response_mask.sum(-1).to(torch.float64)
    out["response_length/mean"] = lengths[lengths > 0].mean().item()
    return out


def clip_ratio_against_longest(self, response_mask):
    out = self.response_length_metrics(response_mask)
    lengths = response_mask.sum(-1)
    out["response_length/clip_ratio"] = (lengths == lengths.max()).double().mean().item()
    return out


def std_with_ddof_1(self, uids, values, preds, seed):
    out = self.validation_metrics(uids, values, preds, seed)
    for uid, stats in out.items():
        members = torch.tensor([i for i, u in enumerate(uids) if u == uid])
        for key in list(stats):
            if key.startswith("std@"):
                stats[key] = values[members].std(correction=1).item()
    return out


def best_without_replacement(self, uids, values, preds, seed):
    out = self.validation_metrics(uids, values, preds, seed)
    for uid, stats in out.items():
        members = [i for i, u in enumerate(uids) if u == uid]
        size = len(members)
        if size > 1:
            stats[f"best@{size}/mean"] = values[torch.tensor(members)].max().item()
    return out


def maj_ties_to_best_value(self, uids, values, preds, seed):
    """Ties go to the tied prediction with the highest value (an optimistic tie-break)."""
    out = self.validation_metrics(uids, values, preds, seed)
    if preds is None:
        return out
    for uid, stats in out.items():
        members = [i for i, u in enumerate(uids) if u == uid]
        size = len(members)
        if size > 1:
            generator = torch.Generator().manual_seed(seed)
            draws = torch.randint(size, (1000, size), generator=generator).tolist()
            picked = []
            for row in draws:
                votes = [preds[members[i]] for i in row]
                worth = [float(values[members[i]]) for i in row]
                top = max(votes.count(v) for v in votes)
                picked.append(
                    max(w for v, w in zip(votes, worth, strict=True) if votes.count(v) == top)
                )
            stats[f"maj@{size}/mean"] = sum(picked) / len(picked)
    return out


def reduce_mean_for_max(self, metrics):
    out = self.reduce_metrics(metrics)
    for key, values in metrics.items():
        if "max" in key:
            out[key] = sum(values) / len(values)
    return out


def accounting_dropped_as_kept(self, response_lengths, keep):
    out = self.token_accounting(response_lengths, keep)
    return {"generated": out["generated"], "kept": out["generated"], "discarded": out["discarded"]}


def test_length_mean_without_aborted_is_caught(torchref):
    result = assert_graded(
        with_overrides(torchref, response_length_metrics=length_mean_without_aborted),
        "metrics.response_length",
    )
    assert "response_length/mean" in result.message
    assert result.check == "all_samples" and result.severity == "edge"


def test_clip_ratio_against_longest_is_caught(torchref):
    result = assert_graded(
        with_overrides(torchref, response_length_metrics=clip_ratio_against_longest),
        "metrics.response_length",
    )
    assert result.check == "clip_ratio" and result.severity == "nominal"


def test_std_with_ddof_1_is_caught(torchref):
    result = assert_graded(
        with_overrides(torchref, validation_metrics=std_with_ddof_1), "metrics.validation_at_n"
    )
    assert "std@" in result.message and "uid=" in result.message
    assert result.check == "std" and result.severity == "nominal"


def test_best_without_replacement_is_caught(torchref):
    result = assert_caught(
        with_overrides(torchref, validation_metrics=best_without_replacement),
        "metrics.validation_at_n",
    )
    assert "best@" in result.message and result.check == "bootstrap"


def test_maj_ties_to_best_value_is_caught(torchref):
    result = assert_caught(
        with_overrides(torchref, validation_metrics=maj_ties_to_best_value),
        "metrics.validation_at_n",
    )
    assert "maj@" in result.message and result.check == "bootstrap"


def test_reduce_mean_for_max_key_is_caught(torchref):
    result = assert_caught(
        with_overrides(torchref, reduce_metrics=reduce_mean_for_max), "metrics.reduce"
    )
    assert "max" in result.message and result.check == "reduction"


def test_accounting_dropped_as_kept_is_caught(torchref):
    result = assert_caught(
        with_overrides(torchref, token_accounting=accounting_dropped_as_kept),
        "metrics.token_accounting",
    )
    assert "kept" in result.message and result.check == "kept"

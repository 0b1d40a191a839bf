"""Per-sample CONTRACT §0a features of a recorded batch, read off its padded tensors.

The engine's walker (``conformance.features.generic_features``) describes a whole generated
case; an audit names single samples, so this module tags each row with the features its
*inputs to one clause* have: a reward a placement bug wrote into padding is the output of
``reward.place_last`` but an input (``padding_rewards``) of the estimator that reads it.
The feature ids, their domains and the thresholds come from ``conformance.features``.
Vectorised over the (B, R) tensors, so a million tokens take milliseconds.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch

from rlconform.audit.batch import AuditBatch
from rlconform.conformance.features import (
    EXTREME_LOG_RATIO,
    FEATURES,
    NEAR_EQUAL,
    OVERFLOW,
    OVERFLOW_LOGPROB,
)
from rlconform.oracle.advantage import group_members


def _rows_with(flags: torch.Tensor) -> list[bool]:
    return flags.any(dim=1).tolist() if flags.dim() == 2 else flags.tolist()


def _tag(found: list[set[str]], feature: str, rows: Iterable[bool]) -> None:
    assert feature in FEATURES, feature
    for i, hit in enumerate(rows):
        if hit:
            found[i].add(feature)


def _structure(batch: AuditBatch, found: list[set[str]]) -> None:
    lengths = torch.tensor(batch.lengths, dtype=torch.int64)
    actions = batch.action.sum(dim=1)
    _tag(found, "empty_response", (lengths == 0).tolist())
    _tag(found, "actionless_sample", ((lengths > 0) & (actions == 0)).tolist())
    _tag(found, "mask_holes", _rows_with(batch.response & ~batch.action))
    truncated = torch.zeros(batch.size, dtype=torch.bool)
    if "terminated" in batch.fields:
        truncated |= ~batch.fields["terminated"]
    if "truncated" in batch.fields:
        truncated |= batch.fields["truncated"]
    if batch.config.max_response_length is not None:
        truncated |= lengths == batch.config.max_response_length
    _tag(found, "truncated_sample", truncated.tolist())
    everyone = [True] * batch.size
    if batch.width > max(batch.lengths):
        _tag(found, "extra_padding", everyone)
    if batch.width == 0:
        _tag(found, "zero_width", everyone)
    if not bool(batch.action.any()):
        _tag(found, "empty_batch", everyone)


def _off_action_values(batch: AuditBatch, key: str, found: list[set[str]]) -> None:
    """A value a model computed, at padding or a mask-0 position (CONTRACT §0a)."""
    x = batch.fields[key]
    off = ~batch.action
    finite = torch.isfinite(x)
    _tag(found, "padding_nonfinite", _rows_with(off & ~finite))
    large = finite & (x.abs() > OVERFLOW)
    _tag(found, "overflow", _rows_with(off & large))
    _tag(found, "padding_finite", _rows_with(off & finite & ~large & (x != 0)))


def _off_action_rewards(batch: AuditBatch, key: str, found: list[set[str]]) -> None:
    """Token rewards on mask holes (edge) and at padding (hardening)."""
    x = batch.fields[key]
    holes = batch.response & ~batch.action
    padding = ~batch.response
    finite = torch.isfinite(x)
    _tag(found, "hole_reward", _rows_with(holes & (x != 0)))
    _tag(found, "padding_rewards", _rows_with(padding & (x != 0)))
    _tag(found, "padding_nonfinite", _rows_with(~batch.action & ~finite))
    _tag(found, "overflow", _rows_with(padding & finite & (x.abs() > OVERFLOW)))


def _log_ratios(batch: AuditBatch, keys: Sequence[str], found: list[set[str]]) -> None:
    """|log-ratio| > 20 (edge) or > 88, and log-probs <= -100 (hardening), on action tokens."""
    stack = torch.stack([batch.fields[k].to(torch.float64) for k in keys])
    finite = torch.isfinite(stack)
    on_actions = batch.action.unsqueeze(0) & finite
    _tag(found, "overflow", _rows_with((on_actions & (stack <= OVERFLOW_LOGPROB)).any(dim=0)))
    if len(keys) < 2:
        return
    big, small = torch.finfo(torch.float64).max, torch.finfo(torch.float64).min
    high = torch.where(on_actions, stack, small).amax(dim=0)
    low = torch.where(on_actions, stack, big).amin(dim=0)
    both = on_actions.sum(dim=0) >= 2
    gap = torch.where(both, high - low, torch.zeros_like(high))
    _tag(found, "overflow", _rows_with(gap > OVERFLOW))
    _tag(found, "extreme_log_ratio", _rows_with((gap > EXTREME_LOG_RATIO) & (gap <= OVERFLOW)))


def _nearly_equal(values: list[float]) -> bool:
    if len(values) < 2 or not all(v == v and abs(v) != float("inf") for v in values):
        return False
    return max(values) - min(values) <= NEAR_EQUAL * max(1.0, max(abs(v) for v in values))


def _groups(batch: AuditBatch, scores: Sequence[float] | None, found: list[set[str]]) -> None:
    if batch.groups is None:
        if scores is not None and _nearly_equal(list(scores)):
            _tag(found, "equal_scores", [True] * batch.size)
        return
    members = group_members(batch.groups)
    sizes = {len(m) for m in members.values()}
    if len(sizes) > 1:
        _tag(found, "unequal_groups", [True] * batch.size)
    for group in members.values():
        if len(group) == 1:
            found[group[0]].add("singleton_group")
        elif scores is not None and _nearly_equal([scores[i] for i in group]):
            for i in group:
                found[i].add("equal_scores")


def sample_features(
    batch: AuditBatch,
    *,
    rewards: Sequence[str] = (),
    values: Sequence[str] = (),
    logprobs: Sequence[str] = (),
    groups: bool = False,
    scores: Sequence[float] | None = None,
) -> list[frozenset[str]]:
    """The §0a features of each sample as a clause reading these inputs sees it.

    ``rewards``: token-reward keys; ``values``: keys of values a model computed (log-probs,
    values, losses; their padding and mask-0 positions are read); ``logprobs``: log-prob keys
    whose differences on action tokens are log-ratios; ``groups``: group features from
    ``uid`` (``scores``, one per sample, for ``equal_scores``).
    """
    found: list[set[str]] = [set() for _ in range(batch.size)]
    _structure(batch, found)
    for key in rewards:
        if key in batch.fields:
            _off_action_rewards(batch, key, found)
    for key in (*values, *logprobs):
        if key in batch.fields:
            _off_action_values(batch, key, found)
    present = [k for k in logprobs if k in batch.fields]
    if present:
        _log_ratios(batch, present, found)
    if groups:
        _groups(batch, scores, found)
    c = batch.config
    if present and (c.temperature != 1 or c.top_k > 0 or c.top_p < 1):
        _tag(found, "sampling_truncation", [True] * batch.size)
    return [frozenset(f) for f in found]


def batch_features(per_sample: Sequence[frozenset[str]]) -> frozenset[str]:
    """The features of the batch as one case: the union over its samples."""
    out: set[str] = set()
    for features in per_sample:
        out |= features
    return frozenset(out)

"""Case features and input domains (CONTRACT §0a): the one table of feature ids.

Every generated or pinned case is described by the features it exercises; each feature
belongs to a domain (``nominal``, ``edge``, ``hardening``). A case's domain is the most
severe domain among its features (no feature: ``nominal``). Feature ids are public
vocabulary: reports, baselines (deviation scopes) and docs use them.

Features are read off a case (plain data) by one generic walker that knows the case
conventions every clause module follows:

- ``samples``: a list of per-sample dicts (anywhere in the case: the invariants case has an
  ``extra_group`` list too). A sample's ``mask`` (or ``loss_mask``) has one 0/1 entry per
  response token, so ``len(mask)`` is L_i; a sample without a mask but with ``tokens`` or
  ``response_ids`` has that many response tokens, all of them action tokens.
- per-token float fields: lists of numbers as long as the mask. Fields named in
  ``REWARD_FIELDS`` are token rewards; ``LOGPROB_FIELDS`` are log-probabilities (their
  pairwise differences on action tokens are log-ratios); every other float list is a value
  a model computed (values, losses, logits, entropies, advantages ...).
- ``pad_value``: what the harness writes at padding of every float field except rewards;
  ``reward_pad_value`` (default 0) at padding of reward fields. ``extra_pad``: columns
  beyond the longest response; ``response_width``: an explicit padded width.
- ``group`` labels and per-sample scores (``reward``, or the sum of ``rewards``), sampling
  parameters (``temperature``, ``top_k``, ``top_p``), ``shards`` (sample counts per micro-batch
  or rank), ``terminated`` / ``truncated`` / ``status``, attention-mask ``rows``.

A clause whose cases carry a feature the walker cannot see (e.g. a rejection band that
removes every token) registers an extra feature function with its clause; the runner
takes the union.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import math
from collections.abc import Callable, Iterable, Iterator
from typing import Any

DOMAINS: tuple[str, ...] = ("nominal", "edge", "hardening")


def domain_rank(domain: str) -> int:
    """0 for nominal, 1 for edge, 2 for hardening."""
    return DOMAINS.index(domain)


@dataclasses.dataclass(frozen=True)
class Feature:
    id: str
    domain: str
    meaning: str


# fmt: off
_TABLE: tuple[Feature, ...] = (
    Feature("mask_holes", "nominal", "mask-0 tokens (tool observations) inside a response"),
    Feature("padding_finite", "nominal", "finite values a model computed at padding or at mask-0 positions (any finite number of moderate size)"),
    Feature("unequal_groups", "nominal", "groups of different sizes"),
    Feature("sampling_truncation", "nominal", "temperature != 1 or a top-k / top-p support"),
    Feature("truncated_sample", "nominal", "a sample stopped by a length limit"),
    Feature("uneven_shards", "nominal", "different token counts across micro-batches or ranks"),
    Feature("extra_padding", "nominal", "a padded width larger than the longest response"),
    Feature("empty_response", "edge", "L_i = 0 (aborted)"),
    Feature("actionless_sample", "edge", "a sample with L_i > 0 but no action token (every token a hole)"),
    Feature("singleton_group", "edge", "a group of one"),
    Feature("equal_scores", "edge", "all-equal or nearly-equal scores in a group (or in a batch without groups)"),
    Feature("hole_reward", "edge", "a reward on a mask-0 token inside the response"),
    Feature("empty_shard", "edge", "a micro-batch or rank with no action token"),
    Feature("empty_batch", "edge", "samples, but no action token in the whole batch"),
    Feature("no_samples", "edge", "a batch of zero samples"),
    Feature("extreme_log_ratio", "edge", "|log-ratio| > 20 on an action token (stale off-policy data)"),
    Feature("all_rejected", "edge", "a rule (IcePop band, OPSM, a rejection mask, a filter) removes every action token or sample of the batch"),
    Feature("padding_nonfinite", "hardening", "NaN or +-inf at padding or at mask-0 positions"),
    Feature("padding_rewards", "hardening", "nonzero rewards at padding (t >= L_i)"),
    Feature("overflow", "hardening", "magnitudes where float32 exp overflows: |log-ratio| > 88 or a log-prob <= -100 on an action token, |value| > 88 at padding or a mask-0 position"),
    Feature("zero_width", "hardening", "a zero-width tensor (padded width 0)"),
    Feature("layout_violation", "hardening", "a layout that breaks the padding convention (must be detected, not used)"),
)
# fmt: on

FEATURES: dict[str, Feature] = {f.id: f for f in _TABLE}

REWARD_FIELDS = frozenset({"rewards", "scores", "token_rewards", "token_level_rewards"})
LOGPROB_FIELDS = frozenset(
    {"logp", "old", "ref", "rollout", "new", "old_logprobs", "rollout_logprobs", "log_probs"}
)
_NOT_VALUES = frozenset(
    {
        "mask",
        "loss_mask",
        "response_ids",
        "prompt_ids",
        "prompt",
        "response",
        "tokens",
        "ids",
        "kept",
        "components",
        "keep",
    }
)

# Keys whose value is a batch of per-sample dicts (the invariants case adds a group).
SAMPLE_LISTS = ("samples", "extra_group")
# |log-ratio| above this on an action token is extreme (edge), above OVERFLOW it is hardening.
EXTREME_LOG_RATIO = 20.0
OVERFLOW = 88.0
OVERFLOW_LOGPROB = -100.0
# Scores within this relative distance count as nearly equal (1.0 vs 1.00001).
NEAR_EQUAL = 1e-4


def domain_of_features(features: Iterable[str]) -> str:
    """The most severe domain among ``features`` (none: nominal)."""
    rank = max((domain_rank(FEATURES[f].domain) for f in features), default=0)
    return DOMAINS[rank]


def unknown(ids: Iterable[str]) -> list[str]:
    """The ids in ``ids`` that are not feature ids."""
    return [i for i in ids if i not in FEATURES]


# ---------------------------------------------------------------------------------------
# The generic walker.


def _walk(value: Any) -> Iterator[tuple[str | None, Any]]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield key, item
            yield from _walk(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _walk(item)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _numbers_at(row: list[Any], t: int) -> list[float]:
    """The numbers a per-token row holds at token ``t`` (a logits row holds a vector)."""
    item = row[t]
    if _number(item):
        return [float(item)]
    if isinstance(item, list):
        return [float(v) for v in item if _number(v)]
    return []


def _sample_lists(case: Any) -> list[list[dict[str, Any]]]:
    return [
        [s for s in item if isinstance(s, dict)]
        for key, item in _walk(case)
        if key in SAMPLE_LISTS and isinstance(item, list)
    ]


def _mask_of(sample: dict[str, Any]) -> list[int] | None:
    mask = sample.get("mask", sample.get("loss_mask"))
    if isinstance(mask, list):
        return mask
    for key in ("tokens", "response_ids", "response"):
        tokens = sample.get(key)
        if isinstance(tokens, list):
            return [1] * len(tokens)
    return None


def _token_fields(
    samples: list[dict[str, Any]], masks: list[list[int]]
) -> tuple[set[str], set[str]]:
    """(value fields, reward fields): the per-token float lists the batch's samples carry."""
    values: set[str] = set()
    rewards: set[str] = set()
    for sample, mask in zip(samples, masks):
        for name, row in sample.items():
            if name in _NOT_VALUES or not isinstance(row, list) or len(row) != len(mask):
                continue
            if not all(_number(v) or isinstance(v, list) for v in row):
                continue
            if row and all(isinstance(v, int) and not isinstance(v, float) for v in row):
                continue  # token ids, not values
            (rewards if name in REWARD_FIELDS else values).add(name)
    return values, rewards


def _score(sample: dict[str, Any], mask: list[int]) -> float | None:
    reward = sample.get("reward")
    if _number(reward):
        return float(reward)
    rewards = sample.get("rewards")
    if isinstance(rewards, list) and all(_number(r) for r in rewards):
        return math.fsum(rewards[: len(mask)])
    return None


def _nearly_equal(values: list[float]) -> bool:
    finite = [v for v in values if math.isfinite(v)]
    if len(finite) < 2 or len(finite) < len(values):
        return False
    spread = max(finite) - min(finite)
    return spread <= NEAR_EQUAL * max(1.0, max(abs(v) for v in finite))


def _value_features(value: float) -> set[str]:
    """What a value a model wrote at padding or a mask-0 position makes of the case."""
    if value == 0:
        return set()
    if math.isnan(value) or math.isinf(value):
        return {"padding_nonfinite"}
    if abs(value) > OVERFLOW:
        return {"overflow"}
    return {"padding_finite"}


def pad_value_features(value: Any) -> set[str]:
    """The features a value written at padding or at mask-0 positions gives a case (for
    clauses whose case formats the walker cannot read: logits rows, batch containers)."""
    return _value_features(float(value)) if _number(value) else set()


def _log_ratio_features(sample: dict[str, Any], mask: list[int]) -> set[str]:
    rows = [
        sample[name]
        for name in sorted(LOGPROB_FIELDS)
        if isinstance(sample.get(name), list) and len(sample[name]) == len(mask)
    ]
    found: set[str] = set()
    for t, m in enumerate(mask):
        if not m:
            continue
        column = [v for row in rows for v in _numbers_at(row, t) if math.isfinite(v)]
        if any(v <= OVERFLOW_LOGPROB for v in column):
            found.add("overflow")
        if len(column) >= 2:
            gap = max(column) - min(column)
            if gap > OVERFLOW:
                found.add("overflow")
            elif gap > EXTREME_LOG_RATIO:
                found.add("extreme_log_ratio")
    return found


def _sample_features(
    sample: dict[str, Any],
    mask: list[int],
    value_fields: set[str],
    reward_fields: set[str],
    bootstraps: bool = True,
) -> set[str]:
    found: set[str] = set()
    if not mask:
        found.add("empty_response")
    elif not any(mask):
        found.add("actionless_sample")
    if 0 in mask:
        found.add("mask_holes")
    truncated = sample.get("terminated") is False and bootstraps
    if truncated or sample.get("truncated") is True or sample.get("status") == "truncated":
        found.add("truncated_sample")
    for name in value_fields | reward_fields:
        row = sample.get(name)
        if not isinstance(row, list) or len(row) != len(mask):
            continue
        for t, m in enumerate(mask):
            if m:
                continue
            for value in _numbers_at(row, t):
                if name in reward_fields:
                    if value != 0:
                        found.add("hole_reward")
                    if not math.isfinite(value):
                        found.add("padding_nonfinite")
                else:
                    found |= _value_features(value)
    return found | _log_ratio_features(sample, mask)


def _group_features(samples: list[dict[str, Any]], masks: list[list[int]]) -> set[str]:
    found: set[str] = set()
    labels = [s.get("group") for s in samples]
    scores = [_score(s, m) for s, m in zip(samples, masks)]
    if labels and all(label is not None for label in labels):
        members: dict[Any, list[int]] = {}
        for i, label in enumerate(labels):
            members.setdefault(label, []).append(i)
        sizes = {len(m) for m in members.values()}
        if 1 in sizes:
            found.add("singleton_group")
        if len(sizes) > 1:
            found.add("unequal_groups")
        for group in members.values():
            if len(group) < 2:
                continue
            group_scores = [scores[i] for i in group]
            if None not in group_scores and _nearly_equal(group_scores):
                found.add("equal_scores")
            components = [samples[i].get("components") for i in group]
            if all(isinstance(c, list) and c for c in components):
                for k in range(min(len(c) for c in components)):
                    if _nearly_equal([float(c[k]) for c in components]):
                        found.add("equal_scores")
    elif len(scores) > 1 and None not in scores and _nearly_equal(scores):
        found.add("equal_scores")
    return found


def _shard_features(case: dict[str, Any], masks: list[list[int]]) -> set[str]:
    shards = case.get("shards")
    if not (isinstance(shards, list) and shards and all(isinstance(n, int) for n in shards)):
        return set()
    found: set[str] = set()
    tokens, start = [], 0
    for size in shards:
        tokens.append(sum(sum(m) for m in masks[start : start + size]))
        start += size
    if len(set(tokens)) > 1:
        found.add("uneven_shards")
    if 0 in tokens:
        found.add("empty_shard")
    return found


def _padded_width(case: dict[str, Any], longest: int) -> int | None:
    width = case.get("response_width")
    if isinstance(width, int) and not isinstance(width, bool):
        return width
    extra = case.get("extra_pad")
    if isinstance(extra, int) and not isinstance(extra, bool):
        return longest + extra
    return None


def _batch_features(case: dict[str, Any], samples: list[dict[str, Any]]) -> set[str]:
    masks = [_mask_of(s) for s in samples]
    if any(m is None for m in masks):
        return set()
    found: set[str] = set()
    if not samples:
        found.add("no_samples")
    elif not any(any(m) for m in masks):
        found.add("empty_batch")
    longest = max((len(m) for m in masks), default=0)
    width = _padded_width(case, longest)
    if width is not None and width > longest:
        found.add("extra_padding")
    if width == 0 and samples:
        found.add("zero_width")
    value_fields, reward_fields = _token_fields(samples, masks)
    params = case.get("params")
    # a case whose params switch the bootstrap off treats every sample as terminated
    bootstraps = not (isinstance(params, dict) and params.get("bootstrap") is False)
    for sample, mask in zip(samples, masks):
        found |= _sample_features(sample, mask, value_fields, reward_fields, bootstraps)
        if width is None or width <= len(mask):
            continue
        if value_fields:
            pad = case.get("pad_value", 0.0)
            found |= _value_features(float(pad)) if _number(pad) else set()
        if reward_fields:
            pad = case.get("reward_pad_value", 0.0)
            if _number(pad) and pad != 0:
                found |= {"padding_rewards"} | _value_features(float(pad))
    found |= _group_features(samples, masks)
    return found | _shard_features(case, masks)


def _is_run(values: list[Any], first: int, second: int) -> bool:
    """values is ``first...first second...second`` (either run may be empty)."""
    switched = False
    for value in values:
        if value == second:
            switched = True
        elif value != first or switched:
            return False
    return True


def _layout_features(case: dict[str, Any]) -> set[str]:
    """Attention-mask ``rows`` split by the case's ``response_width``."""
    width = case.get("response_width")
    rows = case.get("rows")
    if not isinstance(rows, list) or not isinstance(width, int):
        return set()
    found: set[str] = set()
    if width == 0:
        found.add("zero_width")
    if not rows:
        found.add("no_samples")
    for row in rows:
        attention = row.get("attention") if isinstance(row, dict) else None
        if not isinstance(attention, list):
            continue
        split = len(attention) - width
        prompt, response = attention[:split], attention[split:]
        if not (_is_run(prompt, 0, 1) and _is_run(response, 1, 0)):
            found.add("layout_violation")
        elif not any(response):
            found.add("empty_response")
    return found


def _parameter_features(case: Any) -> set[str]:
    found: set[str] = set()
    for key, item in _walk(case):
        if key == "temperature" and _number(item) and item != 1:
            found.add("sampling_truncation")
        elif key == "top_k" and isinstance(item, int) and not isinstance(item, bool) and item > 0:
            found.add("sampling_truncation")
        elif key == "top_p" and _number(item) and item < 1:
            found.add("sampling_truncation")
    return found


def generic_features(case: Any) -> frozenset[str]:
    """The §0a features the generic walker reads off ``case`` (see the module docstring)."""
    if not isinstance(case, dict):
        return frozenset()
    found = _parameter_features(case) | _layout_features(case)
    for samples in _sample_lists(case):
        found |= _batch_features(case, samples)
    return frozenset(found)


# ---------------------------------------------------------------------------------------
# Domain restriction of generation.

_DOMAIN: contextvars.ContextVar[str] = contextvars.ContextVar("rlc_domain", default="hardening")


def current_domain() -> str:
    """The most severe domain generation may reach now (``hardening``: every case)."""
    return _DOMAIN.get()


def allows(domain: str) -> bool:
    """True when generation may produce a case of ``domain`` now."""
    return domain_rank(domain) <= domain_rank(current_domain())


@contextlib.contextmanager
def restricted(domain: str) -> Iterator[None]:
    """Generate only cases whose domain is ``domain`` or milder inside the block."""
    if domain not in DOMAINS:
        raise ValueError(f"unknown domain {domain!r}; known: {', '.join(DOMAINS)}")
    token = _DOMAIN.set(domain)
    try:
        yield
    finally:
        _DOMAIN.reset(token)


FeatureFn = Callable[[Any], Iterable[str]]

"""A case with some of its CONTRACT §0a features taken out: what a baseline entry's
features must explain (``conformance/baseline.py``: an entry excuses a failure only when the
same case without the entry's features passes the check).

``without(case, features, features_of)`` returns a new case (the input is never modified)
in which the named features no longer occur and no feature occurs that the case did not
have, or None when that cannot be done for this case. It works on the case conventions the
generic feature walker reads (``conformance/features.py``):

- ``padding_finite`` / ``padding_nonfinite`` / ``overflow`` (a value a model wrote at
  padding or a mask-0 position): those values, and ``pad_value``, become 0 (1.0 where the
  case keeps ``padding_finite``); an overflowing log-ratio on an action token cannot be
  taken out.
- ``hole_reward``, ``padding_rewards``: rewards at mask-0 positions, ``reward_pad_value``,
  become 0 (a non-finite one that must stay a reward becomes 1.0).
- ``extra_padding``: ``extra_pad`` 0, ``response_width`` the longest response.
- ``mask_holes``: the mask-0 tokens are removed from every per-token row of the sample.
- ``empty_response``, ``actionless_sample``: those samples are removed (``shards`` counts
  follow, an emptied shard goes); not when another list of the case runs parallel to the
  samples (its rows would no longer line up).
- ``sampling_truncation``: ``temperature`` 1, ``top_k`` -1, ``top_p`` 1.

Every other feature is structural (a group of one, equal scores, an empty batch, a zero
width ...): there is no "same case without it", and an entry naming it excuses a case that
has it (``REMOVABLE`` lists the ones this module takes out).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterable
from typing import Any

from rlconform.conformance import features as feats

_VALUE_FEATURES = frozenset({"padding_finite", "padding_nonfinite", "overflow"})
_REWARD_FEATURES = frozenset({"hole_reward", "padding_rewards"})
_SAMPLE_FEATURES = frozenset({"empty_response", "actionless_sample"})
REMOVABLE = (
    _VALUE_FEATURES
    | _REWARD_FEATURES
    | _SAMPLE_FEATURES
    | {"extra_padding", "mask_holes", "sampling_truncation"}
)


def without(
    case: Any, drop: Iterable[str], features_of: Callable[[Any], Iterable[str]]
) -> Any | None:
    """``case`` without the features ``drop`` (see the module docstring), or None."""
    drop = frozenset(drop)
    before = frozenset(features_of(case))
    if not drop or not drop <= REMOVABLE or not isinstance(case, dict):
        return None
    out = copy.deepcopy(case)
    keep_finite = "padding_finite" in before - drop
    if drop & _SAMPLE_FEATURES and not _drop_samples(out, drop):
        return None
    for samples in _sample_lists(out):
        _clean_samples(out, samples, drop, before, keep_finite)
    if "extra_padding" in drop:
        _no_extra_padding(out)
    if "sampling_truncation" in drop:
        _untruncated_sampling(out)
    after = frozenset(features_of(out))
    if after & drop or not after <= before:
        return None
    return out


def _sample_lists(case: dict[str, Any]) -> list[list[dict[str, Any]]]:
    found = []
    for key, item in _walk_dicts(case):
        if key in feats.SAMPLE_LISTS and isinstance(item, list):
            found.append(item)
    return found


def _walk_dicts(value: Any) -> Iterable[tuple[str, Any]]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield key, item
            yield from _walk_dicts(item)
    elif isinstance(value, list):
        for item in value:
            yield from _walk_dicts(item)


def _replacement(value: float, is_reward: bool, drop: frozenset[str], keep: bool) -> float:
    """What a value at padding or a mask-0 position becomes when ``drop`` is taken out."""
    if is_reward:
        classes = set()
        if value != 0:
            classes.add("hole_reward")
        if not math.isfinite(value):
            classes.add("padding_nonfinite")
        if not classes & drop:
            return value
        return 1.0 if keep and "hole_reward" not in drop else 0.0
    if not feats.pad_value_features(value) & drop:
        return value
    return 1.0 if keep else 0.0


def _clean_samples(
    case: dict[str, Any],
    samples: list[dict[str, Any]],
    drop: frozenset[str],
    before: frozenset[str],
    keep_finite: bool,
) -> None:
    masks = [_mask_of(s) for s in samples]
    if any(m is None for m in masks):
        return
    values, rewards = feats._token_fields(samples, masks)
    for sample, mask in zip(samples, masks):
        if "mask_holes" in drop and 0 in mask:
            _remove_holes(sample, mask)
            continue
        for name in values | rewards:
            row = sample.get(name)
            if not isinstance(row, list) or len(row) != len(mask):
                continue
            is_reward = name in rewards
            keep = "hole_reward" in before - drop if is_reward else keep_finite
            for t, m in enumerate(mask):
                if m:
                    continue
                if isinstance(row[t], list):
                    row[t] = [
                        _replacement(float(v), False, drop, keep) if feats._number(v) else v
                        for v in row[t]
                    ]
                elif feats._number(row[t]):
                    row[t] = _replacement(float(row[t]), is_reward, drop, keep)
    if feats._number(case.get("pad_value")) and values:
        case["pad_value"] = _replacement(float(case["pad_value"]), False, drop, keep_finite)
    pad = case.get("reward_pad_value")
    if feats._number(pad) and pad != 0 and rewards:
        if "padding_rewards" in drop or feats.pad_value_features(pad) & drop:
            case["reward_pad_value"] = 0.0


def _mask_of(sample: dict[str, Any]) -> list[int] | None:
    return feats._mask_of(sample)


def _remove_holes(sample: dict[str, Any], mask: list[int]) -> None:
    keep = [t for t, m in enumerate(mask) if m]
    width = len(mask)
    for name, row in list(sample.items()):
        if isinstance(row, list) and len(row) == width:
            sample[name] = [row[t] for t in keep]


def _drop_samples(case: dict[str, Any], drop: frozenset[str]) -> bool:
    """Remove the empty / actionless samples of every sample list; False when that would
    leave a parallel list misaligned."""
    for key in feats.SAMPLE_LISTS:
        samples = case.get(key)
        if not isinstance(samples, list):
            continue
        gone = []
        for i, sample in enumerate(samples):
            mask = _mask_of(sample) if isinstance(sample, dict) else None
            if mask is None:
                continue
            if ("empty_response" in drop and not mask) or (
                "actionless_sample" in drop and mask and not any(mask)
            ):
                gone.append(i)
        if not gone:
            continue
        parallel = [
            k
            for k, v in case.items()
            if k != key and isinstance(v, list) and len(v) == len(samples) and k != "shards"
        ]
        if parallel:
            return False
        shards = case.get("shards")
        if isinstance(shards, list) and all(isinstance(n, int) for n in shards):
            case["shards"] = _shards_without(shards, gone)
        case[key] = [s for i, s in enumerate(samples) if i not in gone]
    return True


def _shards_without(shards: list[int], gone: list[int]) -> list[int]:
    out, start = [], 0
    for size in shards:
        removed = sum(1 for i in gone if start <= i < start + size)
        if size - removed:
            out.append(size - removed)
        start += size
    return out


def _no_extra_padding(case: dict[str, Any]) -> None:
    longest = max(
        (len(m) for samples in _sample_lists(case) for s in samples if (m := _mask_of(s))),
        default=0,
    )
    if isinstance(case.get("extra_pad"), int):
        case["extra_pad"] = 0
    width = case.get("response_width")
    if isinstance(width, int) and not isinstance(width, bool) and width > longest:
        case["response_width"] = longest


def _untruncated_sampling(case: Any) -> None:
    if isinstance(case, dict):
        for key in list(case):
            if key == "temperature" and feats._number(case[key]):
                case[key] = 1.0
            elif key == "top_k" and isinstance(case[key], int):
                case[key] = -1
            elif key == "top_p" and feats._number(case[key]):
                case[key] = 1.0
            else:
                _untruncated_sampling(case[key])
    elif isinstance(case, list):
        for item in case:
            _untruncated_sampling(item)

"""Oracle for the CONTRACT area `filter` (standard library only, ragged lists, float64).

``filter_samples`` gives each dropped sample exactly one reason (first match in
``REASONS`` order) and the statistics of the pass; ``normalize_kept_rewards`` is the
later reward normalisation, computed over the kept samples only.
"""

from __future__ import annotations

import math
from typing import Any

from rlconform.oracle.errors import ContractError
from rlconform.oracle.schema import scalar_reward

REASONS = (
    "logprob_mismatch",
    "non_finite",
    "unscored",
    "tool_error",
    "aborted",
    "truncated",
    "too_short",
    "too_long",
    "duplicate",
    "reward_outlier",
    "zero_variance_group",
)

# Filter configuration keys and their contract defaults.
DEFAULT_CONFIG: dict[str, Any] = {
    "truncation_policy": "keep",  # "drop": truncated samples get reason "truncated"
    "min_response_length": None,  # too_short: L_i < min (None = off)
    "max_response_length": None,  # too_long: L_i > max (None = off)
    "drop_duplicates": True,  # duplicate: same group, identical response_ids
    "reward_outlier_z": None,  # reward_outlier: |z| > k (None = off)
    "drop_zero_variance_groups": False,  # zero_variance_group (DAPO dynamic sampling)
    "alert_threshold": 0.30,  # stats["alert"]: filter_rate > threshold
}


def resolve_config(config: dict[str, Any] | None) -> dict[str, Any]:
    """The contract defaults updated with ``config``; an unknown key is an error."""
    resolved = dict(DEFAULT_CONFIG)
    for key, value in (config or {}).items():
        if key not in DEFAULT_CONFIG:
            raise ContractError("filter.reasons", f"unknown filter config key {key!r}")
        resolved[key] = value
    if resolved["truncation_policy"] not in ("keep", "drop"):
        raise ContractError("filter.reasons", "truncation_policy must be 'keep' or 'drop'")
    return resolved


def sample_reason(sample: dict[str, Any], config: dict[str, Any]) -> str | None:
    """The first per-sample reason (REASONS[0:8], cheap first) that applies, or None."""
    length = len(sample["response_ids"])
    if len(sample["rollout_logprobs"]) != length or len(sample["loss_mask"]) != length:
        return "logprob_mismatch"
    reward = sample["reward"]
    reward_values = list(reward.values()) if isinstance(reward, dict) else [reward]
    numbers = list(sample["rollout_logprobs"]) + [r for r in reward_values if r is not None]
    if not all(math.isfinite(x) for x in numbers):
        return "non_finite"
    if reward is None:
        return "unscored"
    if sample["status"] == "tool_error":
        return "tool_error"
    if sample["status"] == "aborted":
        return "aborted"
    if sample["status"] == "truncated" and config["truncation_policy"] == "drop":
        return "truncated"
    if config["min_response_length"] is not None and length < config["min_response_length"]:
        return "too_short"
    if config["max_response_length"] is not None and length > config["max_response_length"]:
        return "too_long"
    return None


def filter_samples(
    samples: list[dict[str, Any]],
    config: dict[str, Any] | None = None,
    *,
    reward_key: str = "score",
) -> dict[str, Any]:
    """filter.reasons / filter.stats / filter.order.

    Each dropped sample gets exactly one reason, the first in ``REASONS`` that applies.
    The batch-level reasons are judged on the samples no earlier reason dropped:
    duplicate (same group and identical response_ids; the first in input order stays),
    reward_outlier (|r - mean| / std > k over the remaining scalar rewards, population
    std; none when all are equal), zero_variance_group (every remaining reward of the group
    equal; a group of one included). "failed" (task failed but scored) is never a reason.

    Returns ``{"kept": [...], "dropped": {uid: reason}, "stats": {...}}``: kept samples in
    input order, unchanged; dropped in input order; stats as in ``filter_stats``.
    """
    config = resolve_config(config)
    seen_uids = set()
    for sample in samples:
        if sample["uid"] in seen_uids:
            raise ContractError("filter.reasons", "uid is not unique", sample["uid"], "uid")
        seen_uids.add(sample["uid"])
    reasons: dict[Any, str] = {}
    remaining = []
    for sample in samples:
        reason = sample_reason(sample, config)
        if reason is None:
            remaining.append(sample)
        else:
            reasons[sample["uid"]] = reason
    if config["drop_duplicates"]:
        remaining = _drop_duplicates(remaining, reasons)
    if config["reward_outlier_z"] is not None:
        remaining = _drop_outliers(remaining, reasons, config["reward_outlier_z"], reward_key)
    if config["drop_zero_variance_groups"]:
        remaining = _drop_zero_variance_groups(remaining, reasons, reward_key)
    kept = [dict(s) for s in samples if s["uid"] not in reasons]
    dropped = {s["uid"]: reasons[s["uid"]] for s in samples if s["uid"] in reasons}
    return {"kept": kept, "dropped": dropped, "stats": filter_stats(samples, dropped, config)}


def _drop_duplicates(remaining: list[dict], reasons: dict[Any, str]) -> list[dict]:
    first_seen = set()
    survivors = []
    for sample in remaining:
        key = (sample["group"], tuple(sample["response_ids"]))
        if key in first_seen:
            reasons[sample["uid"]] = "duplicate"
        else:
            first_seen.add(key)
            survivors.append(sample)
    return survivors


def _drop_outliers(remaining: list[dict], reasons: dict, k: float, reward_key: str) -> list[dict]:
    rewards = [
        scalar_reward(s["reward"], reward_key, s["uid"], "filter.reasons") for s in remaining
    ]
    if len(set(rewards)) <= 1:
        return remaining
    mean = math.fsum(rewards) / len(rewards)
    std = math.sqrt(math.fsum((r - mean) ** 2 for r in rewards) / len(rewards))
    survivors = []
    for sample, reward in zip(remaining, rewards):
        if abs(reward - mean) / std > k:
            reasons[sample["uid"]] = "reward_outlier"
        else:
            survivors.append(sample)
    return survivors


def _drop_zero_variance_groups(remaining: list[dict], reasons: dict, reward_key: str) -> list[dict]:
    rewards_of: dict[Any, set[float]] = {}
    for s in remaining:
        reward = scalar_reward(s["reward"], reward_key, s["uid"], "filter.reasons")
        rewards_of.setdefault(s["group"], set()).add(reward)
    survivors = []
    for sample in remaining:
        if len(rewards_of[sample["group"]]) == 1:
            reasons[sample["uid"]] = "zero_variance_group"
        else:
            survivors.append(sample)
    return survivors


def filter_stats(
    samples: list[dict[str, Any]], dropped: dict[Any, str], config: dict[str, Any]
) -> dict[str, Any]:
    """filter.stats: counts per reason (every reason, 0 included), sample and response-token
    counts, filter_rate = dropped / generated (0.0 for an empty batch), and
    alert = filter_rate > alert_threshold (default 0.30).

    Worked (CONTRACT): 8 samples, one truncated (policy drop), one logprob/length mismatch,
    one missing reward -> 5 kept, filter_rate 3/8 = 0.375 > 0.30, alert raised.
    """
    counts = {reason: 0 for reason in REASONS}
    for reason in dropped.values():
        counts[reason] += 1
    generated_tokens = sum(len(s["response_ids"]) for s in samples)
    kept_tokens = sum(len(s["response_ids"]) for s in samples if s["uid"] not in dropped)
    rate = len(dropped) / len(samples) if samples else 0.0
    return {
        "counts": counts,
        "generated": len(samples),
        "kept": len(samples) - len(dropped),
        "dropped": len(dropped),
        "filter_rate": rate,
        "generated_tokens": generated_tokens,
        "kept_tokens": kept_tokens,
        "discarded_tokens": generated_tokens - kept_tokens,
        "alert": rate > config["alert_threshold"],
    }


def normalize_kept_rewards(
    samples: list[dict[str, Any]],
    config: dict[str, Any] | None = None,
    *,
    scope: str = "batch",
    reward_key: str = "score",
    eps: float = 1e-8,
) -> dict[Any, float]:
    """filter.before_normalize: filter first, then normalise over the kept samples only.

    a_i = (r_i - mean) / (std + eps), population std (ddof 0), eps 1e-8, with mean and std
    over the kept samples of the batch (scope "batch", as reward.normalize_batch) or of the
    sample's group (scope "group"); a pool whose rewards are all equal gives 0.0 (never
    divide by ~0). Returns {uid: a_i} for the kept samples, in kept order; dropped samples
    (unscored, aborted, outliers...) neither appear nor move the mean and std.
    """
    if scope not in ("batch", "group"):
        raise ContractError("filter.before_normalize", f"unknown scope {scope!r}")
    kept = filter_samples(samples, config, reward_key=reward_key)["kept"]
    pools: dict[Any, list[float]] = {}
    rewards = []
    for sample in kept:
        reward = scalar_reward(
            sample["reward"], reward_key, sample["uid"], "filter.before_normalize"
        )
        rewards.append(reward)
        pools.setdefault(_pool_of(sample, scope), []).append(reward)
    normalized = {}
    for sample, reward in zip(kept, rewards):
        pool = pools[_pool_of(sample, scope)]
        if len(set(pool)) == 1:
            normalized[sample["uid"]] = 0.0
            continue
        mean = math.fsum(pool) / len(pool)
        std = math.sqrt(math.fsum((r - mean) ** 2 for r in pool) / len(pool))
        normalized[sample["uid"]] = (reward - mean) / (std + eps)
    return normalized


def _pool_of(sample: dict[str, Any], scope: str) -> Any:
    return sample["group"] if scope == "group" else None

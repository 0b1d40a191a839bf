"""torchref operations for the CONTRACT area `filter` (vectorized torch, any device)."""

from __future__ import annotations

from typing import Any

import torch

from rlconform.oracle.errors import ContractError

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

_DEFAULTS: dict[str, Any] = {
    "truncation_policy": "keep",
    "min_response_length": None,
    "max_response_length": None,
    "drop_duplicates": True,
    "reward_outlier_z": None,
    "drop_zero_variance_groups": False,
    "alert_threshold": 0.30,
}


class FilterOps:
    """Vectorized `filter` operations in the canonical padded layout.

    Keep/drop decisions are computed in float64 whatever the profile dtype: a reason is
    compared exactly, and a float32 z-score or filter rate would flip at the boundary.
    """

    def filter_samples(
        self, samples: list[dict[str, Any]], config: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """filter.reasons / filter.stats / filter.order (semantics: oracle.filter.filter_samples).

        ``config`` keys (contract defaults): truncation_policy "keep", min_response_length
        None, max_response_length None, drop_duplicates True, reward_outlier_z None,
        drop_zero_variance_groups False, alert_threshold 0.30.
        """
        cfg = self._filter_config(config)
        uids = [s["uid"] for s in samples]
        if len(set(uids)) != len(uids):
            repeated = next(u for i, u in enumerate(uids) if u in uids[:i])
            raise ContractError("filter.reasons", "uid is not unique", repeated, "uid")
        reason = self._sample_reasons(samples, cfg)
        alive = reason < 0
        if cfg["drop_duplicates"]:
            reason = torch.where(alive & self._duplicates(samples, alive), 8, reason)
            alive = reason < 0
        if cfg["reward_outlier_z"] is not None:
            outlier = self._outliers(samples, alive, float(cfg["reward_outlier_z"]))
            reason = torch.where(alive & outlier, 9, reason)
            alive = reason < 0
        if cfg["drop_zero_variance_groups"]:
            reason = torch.where(alive & self._flat_groups(samples, alive), 10, reason)
        codes = reason.tolist()
        kept = [dict(s) for s, code in zip(samples, codes) if code < 0]
        dropped = {s["uid"]: REASONS[code] for s, code in zip(samples, codes) if code >= 0}
        lengths = torch.tensor([len(s["response_ids"]) for s in samples], dtype=torch.int64)
        return {"kept": kept, "dropped": dropped, "stats": self._stats(reason, lengths, cfg)}

    def normalize_kept_rewards(
        self,
        samples: list[dict[str, Any]],
        config: dict[str, Any] | None = None,
        scope: str = "batch",
    ) -> dict[Any, float]:
        """filter.before_normalize: (r - mean) / (std + 1e-8) over the kept samples only.

        Population std; pools are the kept batch (scope "batch") or each group of kept
        samples (scope "group"); an all-equal pool gives 0. Computed in the profile dtype.
        """
        if scope not in ("batch", "group"):
            raise ContractError("filter.before_normalize", f"unknown scope {scope!r}")
        kept = self.filter_samples(samples, config)["kept"]
        if not kept:
            return {}
        dtype = getattr(torch, self.profile.dtype)
        rewards = torch.tensor(
            [self._scalar_reward(s, "filter.before_normalize") for s in kept],
            dtype=dtype,
            device=self.device,
        )
        if scope == "group":
            pool = self._group_index(kept).to(self.device)
        else:
            pool = torch.zeros(len(kept), dtype=torch.int64, device=self.device)
        n_pools = int(pool.max()) + 1
        count = torch.zeros(n_pools, dtype=dtype, device=self.device).index_add_(
            0, pool, torch.ones_like(rewards)
        )
        mean = torch.zeros(n_pools, dtype=dtype, device=self.device).index_add_(0, pool, rewards)
        mean = mean / count
        centered = rewards - mean[pool]
        var = torch.zeros(n_pools, dtype=dtype, device=self.device).index_add_(
            0, pool, centered * centered
        )
        std = (var / count).sqrt()
        high = torch.full((n_pools,), -torch.inf, dtype=dtype, device=self.device)
        low = torch.full((n_pools,), torch.inf, dtype=dtype, device=self.device)
        high = high.scatter_reduce(0, pool, rewards, "amax")
        low = low.scatter_reduce(0, pool, rewards, "amin")
        flat = (high == low)[pool]
        normalized = torch.where(flat, torch.zeros_like(rewards), centered / (std[pool] + 1e-8))
        return {s["uid"]: value for s, value in zip(kept, normalized.tolist())}

    def _filter_config(self, config: dict[str, Any] | None) -> dict[str, Any]:
        unknown = set(config or {}) - set(_DEFAULTS)
        if unknown:
            raise ContractError("filter.reasons", f"unknown filter config keys {sorted(unknown)}")
        cfg = {**_DEFAULTS, **(config or {})}
        if cfg["truncation_policy"] not in ("keep", "drop"):
            raise ContractError("filter.reasons", "truncation_policy must be 'keep' or 'drop'")
        return cfg

    def _sample_reasons(self, samples: list[dict[str, Any]], cfg: dict[str, Any]) -> torch.Tensor:
        """Index of the first per-sample reason (REASONS[0:8]) per sample, or -1."""
        n = len(samples)
        if n == 0:
            return torch.zeros(0, dtype=torch.int64)
        length = torch.tensor([len(s["response_ids"]) for s in samples])
        lp_length = torch.tensor([len(s["rollout_logprobs"]) for s in samples])
        mask_length = torch.tensor([len(s["loss_mask"]) for s in samples])
        mismatch = (lp_length != length) | (mask_length != length)

        values, owner = [], []
        for i, s in enumerate(samples):
            reward = s["reward"]
            extra = list(reward.values()) if isinstance(reward, dict) else [reward]
            row = list(s["rollout_logprobs"]) + [r for r in extra if r is not None]
            values.extend(row)
            owner.extend([i] * len(row))
        bad_value = ~torch.isfinite(torch.tensor(values, dtype=torch.float64))
        non_finite = torch.zeros(n, dtype=torch.bool)
        non_finite[torch.tensor(owner, dtype=torch.int64)[bad_value]] = True

        status = [s["status"] for s in samples]
        unscored = torch.tensor([s["reward"] is None for s in samples])
        tool_error = torch.tensor([st == "tool_error" for st in status])
        aborted = torch.tensor([st == "aborted" for st in status])
        truncated = torch.tensor([st == "truncated" for st in status])
        truncated &= cfg["truncation_policy"] == "drop"
        no_limit = torch.zeros(n, dtype=torch.bool)
        low, high = cfg["min_response_length"], cfg["max_response_length"]
        too_short = length < low if low is not None else no_limit
        too_long = length > high if high is not None else no_limit
        conditions = torch.stack(
            [mismatch, non_finite, unscored, tool_error, aborted, truncated, too_short, too_long],
            dim=1,
        )
        first = conditions.to(torch.int64).argmax(dim=1)
        return torch.where(conditions.any(dim=1), first, -1)

    def _duplicates(self, samples: list[dict[str, Any]], alive: torch.Tensor) -> torch.Tensor:
        """True for an alive sample whose (group, response_ids) an earlier alive sample has."""
        keys = [(s["group"], tuple(s["response_ids"])) for s in samples]
        first_index = {}
        for i, key in enumerate(keys):
            if alive[i] and key not in first_index:
                first_index[key] = i
        later = [first_index.get(key, i) != i for i, key in enumerate(keys)]
        return torch.tensor(later, dtype=torch.bool)

    def _outliers(
        self, samples: list[dict[str, Any]], alive: torch.Tensor, k: float
    ) -> torch.Tensor:
        idx = alive.nonzero().flatten().tolist()
        outlier = torch.zeros(len(samples), dtype=torch.bool)
        if not idx:
            return outlier
        rewards = torch.tensor(
            [self._scalar_reward(samples[i], "filter.reasons") for i in idx], dtype=torch.float64
        )
        if bool((rewards == rewards[0]).all()):
            return outlier
        mean = rewards.mean()
        std = (rewards - mean).square().mean().sqrt()
        outlier[idx] = (rewards - mean).abs() / std > k
        return outlier

    def _flat_groups(self, samples: list[dict[str, Any]], alive: torch.Tensor) -> torch.Tensor:
        idx = alive.nonzero().flatten().tolist()
        flat = torch.zeros(len(samples), dtype=torch.bool)
        if not idx:
            return flat
        subset = [samples[i] for i in idx]
        group = self._group_index(subset)
        rewards = torch.tensor(
            [self._scalar_reward(s, "filter.reasons") for s in subset], dtype=torch.float64
        )
        n_groups = int(group.max()) + 1
        high = torch.full((n_groups,), -torch.inf, dtype=torch.float64)
        low = torch.full((n_groups,), torch.inf, dtype=torch.float64)
        high = high.scatter_reduce(0, group, rewards, "amax")
        low = low.scatter_reduce(0, group, rewards, "amin")
        flat[idx] = (high == low)[group]
        return flat

    def _stats(self, reason: torch.Tensor, lengths: torch.Tensor, cfg: dict[str, Any]) -> dict:
        dropped_mask = reason >= 0
        counts = torch.bincount(reason[dropped_mask], minlength=len(REASONS)).tolist()
        generated = int(reason.numel())
        dropped = int(dropped_mask.sum())
        rate = dropped / generated if generated else 0.0
        generated_tokens = int(lengths.sum())
        kept_tokens = int(lengths[~dropped_mask].sum())
        return {
            "counts": dict(zip(REASONS, counts)),
            "generated": generated,
            "kept": generated - dropped,
            "dropped": dropped,
            "filter_rate": rate,
            "generated_tokens": generated_tokens,
            "kept_tokens": kept_tokens,
            "discarded_tokens": generated_tokens - kept_tokens,
            "alert": rate > cfg["alert_threshold"],
        }

    def _scalar_reward(self, sample: dict[str, Any], clause: str) -> float:
        reward = sample["reward"]
        if isinstance(reward, dict):
            key = self.profile.get("reward_key", "score")
            if key not in reward:
                raise ContractError(
                    clause, f"reward dict has no key {key!r}", sample["uid"], "reward"
                )
            reward = reward[key]
        return float(reward)

    @staticmethod
    def _group_index(samples: list[dict[str, Any]]) -> torch.Tensor:
        index: dict[Any, int] = {}
        return torch.tensor(
            [index.setdefault(s["group"], len(index)) for s in samples], dtype=torch.int64
        )

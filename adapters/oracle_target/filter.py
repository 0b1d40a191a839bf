"""Oracle-target operations for `filter`: padded tensors -> ragged lists -> oracle -> padded."""

from __future__ import annotations

from typing import Any

from rlconform.oracle import filter as oracle_filter


class FilterOps:
    """`filter` operations that delegate to `rlconform.oracle.filter` (samples are ragged
    already, so no layout conversion is needed)."""

    def filter_samples(
        self, samples: list[dict[str, Any]], config: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        reward_key = self.profile.get("reward_key", "score")
        return oracle_filter.filter_samples(samples, config, reward_key=reward_key)

    def normalize_kept_rewards(
        self,
        samples: list[dict[str, Any]],
        config: dict[str, Any] | None = None,
        scope: str = "batch",
    ) -> dict[Any, float]:
        reward_key = self.profile.get("reward_key", "score")
        return oracle_filter.normalize_kept_rewards(
            samples, config, scope=scope, reward_key=reward_key
        )

"""Oracle-target operations for `metrics`: padded tensors -> ragged lists -> oracle -> values."""

from __future__ import annotations

from typing import Any

import torch

from rlconform.conformance.harness import to_float_list
from rlconform.oracle import metrics as oracle_metrics


class MetricsOps:
    """`metrics` operations that delegate to `rlconform.oracle.metrics` (bootstrap
    statistics are reported exactly, as their expectations)."""

    def response_length_metrics(self, response_mask: torch.Tensor) -> dict[str, float]:
        lengths = [int(n) for n in response_mask.sum(-1).tolist()]
        found = oracle_metrics.response_length_metrics(lengths, response_mask.shape[-1])
        return {key: value for key, value in found.items() if value is not None}

    def validation_metrics(
        self, uids: list[Any], values: torch.Tensor, preds: list[Any] | None, seed: int
    ) -> dict[Any, dict[str, float]]:
        tie = self.profile.get("validation_maj_tie", "first_seen")
        numbers = to_float_list(values)
        out: dict[Any, dict[str, float]] = {}
        for uid, members in oracle_metrics.group_by_uid(list(uids)).items():
            group = [numbers[i] for i in members]
            size = len(group)
            stats = {f"mean@{size}": oracle_metrics.mean_at_n(group)}
            if size > 1:
                stats[f"std@{size}"] = oracle_metrics.std_at_n(group)
                estimators = [
                    ("best", oracle_metrics.best_at_n),
                    ("worst", oracle_metrics.worst_at_n),
                ]
                for name, estimator in estimators:
                    stats[f"{name}@{size}/mean"], stats[f"{name}@{size}/std"] = estimator(
                        group, size
                    )
                if preds is not None:
                    votes = [preds[i] for i in members]
                    mean, std = oracle_metrics.maj_at_n(votes, group, size, tie)
                    stats[f"maj@{size}/mean"], stats[f"maj@{size}/std"] = mean, std
            out[uid] = stats
        return out

    def reduce_metrics(self, metrics: dict[str, list[float]]) -> dict[str, float]:
        return {key: oracle_metrics.reduce_metric(key, list(v)) for key, v in metrics.items()}

    def token_accounting(
        self, response_lengths: torch.Tensor, keep: torch.Tensor
    ) -> dict[str, int]:
        lengths = [int(n) for n in response_lengths.tolist()]
        flags = [bool(k) for k in keep.tolist()]
        return oracle_metrics.token_accounting(lengths, flags)

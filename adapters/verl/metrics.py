"""verl bindings for the CONTRACT area `metrics`: ``compute_data_metrics``,
``process_validation_metrics`` and ``reduce_metrics``."""

from __future__ import annotations

from typing import Any

import torch

_LENGTH_PREFIXES = ("response_length/", "response_length_non_aborted/", "response/aborted_ratio")


class MetricsOps:
    """`metrics` operations through verl's metric utilities."""

    def response_length_metrics(self, response_mask: torch.Tensor) -> dict[str, float]:
        """metrics.response_length: the length keys of ``compute_data_metrics``.

        The batch has a one-token prompt per row and the response mask as the response half of
        its attention mask (where verl reads lengths); score, reward, advantage and return
        tensors are zeros, since only the length metrics are read back.
        """
        from verl import DataProto
        from verl.trainer.ppo.metric_utils import compute_data_metrics

        rows, width = response_mask.shape
        device = response_mask.device
        prompt = torch.ones((rows, 1), dtype=torch.int64, device=device)
        zeros = torch.zeros((rows, width), dtype=torch.float32, device=device)
        data = DataProto.from_dict(
            tensors={
                "prompts": prompt,
                "responses": torch.zeros((rows, width), dtype=torch.int64, device=device),
                "attention_mask": torch.cat([prompt, response_mask.to(torch.int64)], dim=-1),
                "response_mask": response_mask.to(torch.int64),
                "token_level_scores": zeros,
                "token_level_rewards": zeros,
                "advantages": zeros,
                "returns": zeros,
            }
        )
        metrics = compute_data_metrics(data, use_critic=False)
        return {k: float(v) for k, v in metrics.items() if k.startswith(_LENGTH_PREFIXES)}

    def validation_metrics(
        self, uids: list[Any], values: torch.Tensor, preds: list[Any] | None, seed: int
    ) -> dict[Any, dict[str, float]]:
        """metrics.validation_at_n: ``process_validation_metrics`` with each uid as its own
        data source, so verl's average over the uids of a source is that uid's metrics."""
        from verl.trainer.ppo.metric_utils import process_validation_metrics

        infos: dict[str, list[Any]] = {"acc": values.tolist()}
        if preds is not None:
            infos["pred"] = list(preds)
        per_source = process_validation_metrics(list(uids), list(uids), infos, seed=seed)
        return {uid: dict(variables["acc"]) for uid, variables in per_source.items()}

    def reduce_metrics(self, metrics: dict[str, list[float]]) -> dict[str, float]:
        """metrics.reduce: ``verl.utils.metric.reduce_metrics``."""
        from verl.utils.metric import reduce_metrics

        return reduce_metrics(metrics)

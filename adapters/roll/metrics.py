"""ROLL bindings for the CONTRACT area `metrics` (``roll.utils.functionals``)."""

from __future__ import annotations

from rlconform.adapters.roll.common import RollCommon


class MetricsBindings(RollCommon):
    """`metrics` operations ROLL has a function for."""

    def reduce_metrics(self, metrics: dict[str, list[float]]) -> dict[str, float]:
        """metrics.reduce -> ``reduce_metrics(metrics)`` (ROLL picks the reducer from an
        ``@tag`` or ``_suffix`` of the key, default mean)."""
        out = self.F.reduce_metrics({key: list(values) for key, values in metrics.items()})
        return {key: float(value) for key, value in out.items()}

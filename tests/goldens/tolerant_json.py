"""A syrupy JSON extension whose comparison tolerates platform float noise (rel 1e-12)."""

from __future__ import annotations

import json
import math
from typing import Any

from syrupy.extensions.json import JSONSnapshotExtension

REL = 1e-12
ABS = 1e-15


def close(a: Any, b: Any) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
            return math.isclose(a, b, rel_tol=REL, abs_tol=ABS)
        return False
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(close(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(close(x, y) for x, y in zip(a, b))
    return a == b


class TolerantJSONExtension(JSONSnapshotExtension):
    """Snapshots are JSON; floats match within rel 1e-12, everything else exactly."""

    def matches(self, *, serialized_data: Any, snapshot_data: Any) -> bool:
        try:
            return close(json.loads(serialized_data), json.loads(snapshot_data))
        except (TypeError, ValueError):
            return serialized_data == snapshot_data

"""Fingerprints of a declared break: what the target returned on the break's minimal case.

A baseline entry that names no features and no model (a break seen on ordinary cases that
no profile value explains) excuses every failure of its check; its ``fingerprint`` pins
the break it was written for. The fingerprint is the minimal case (as JSON) and a digest
of every output the target returned while the clause ran on it, floats rounded to
``SIGNIFICANT`` digits (platform noise below that is not a change). Before a clause is
judged, each fingerprinted entry's case is replayed: a different digest means the
target's behaviour on the very case the entry describes has changed (a second bug in the
same code, or a fix), and the entry must be reviewed; the clause fails, naming it.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

import torch

from rlconform.conformance.literal import from_jsonable, to_jsonable

SIGNIFICANT = 6


def _plain(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return {"<tensor>": [str(value.dtype), list(value.shape), _plain(value.tolist())]}
    if isinstance(value, bool) or value is None or isinstance(value, (str, int)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            return repr(value)
        return float(f"{value:.{SIGNIFICANT}g}") + 0.0  # -0.0 and 0.0 alike
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return repr(value)


def digest(outputs: list[Any]) -> str:
    """A short stable digest of snapshotted target outputs (``conformance/snapshot.py``)."""
    text = json.dumps(_plain(outputs), sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()[:20]


def case_text(case: Any) -> str:
    """The case as the JSON text a baseline file stores."""
    return json.dumps(to_jsonable(case), separators=(",", ":"))


def case_of(text: str) -> Any:
    """The case back from ``case_text``."""
    return from_jsonable(json.loads(text))

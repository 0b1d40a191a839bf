"""What a rerun of a certification needs, recorded in the JSON report's ``run`` key: the
rlconform version, the run profile's settings, device, seed, the target's profile values,
the interpreter, torch and hypothesis versions (the cases generated depend on hypothesis) and when the run started (UTC)."""

from __future__ import annotations

import dataclasses
import datetime
import json
import platform
from typing import Any


def _jsonable(value: Any) -> Any:
    try:
        json.dumps(value, allow_nan=False)
        return value
    except (TypeError, ValueError):
        return repr(value)


def rlconform_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("rlconform")
    except PackageNotFoundError:
        return "unknown (not installed)"


def run_record(target: Any, run_profile: Any, *, device: str, seed: int | None) -> dict[str, Any]:
    """The ``run`` key of a report (``certify`` fills it when the run starts)."""
    import hypothesis
    import torch

    profile = getattr(target, "profile", None)
    choices = profile.choices() if hasattr(profile, "choices") else {}
    return {
        "rlconform": rlconform_version(),
        "run_profile": dataclasses.asdict(run_profile),
        "device": device,
        "seed": seed,
        "target_profile": {str(k): _jsonable(v) for k, v in sorted(choices.items())},
        "python": platform.python_version(),
        "torch": torch.__version__,
        "hypothesis": hypothesis.__version__,
        "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }

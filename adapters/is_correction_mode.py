"""The contract's IS-correction mode (CONTRACT `offpolicy.is_correction`) split into what the
frameworks' options name separately: the level (``token`` / ``sequence``) and the action on
a ratio outside the band (``truncate``: clamp, ``mask``: reject)."""

from __future__ import annotations

from rlconform.oracle.offpolicy import IS_CORRECTION_MODES


def split_mode(mode: str) -> tuple[str, str]:
    """``"sequence_mask"`` -> ``("sequence", "mask")``; ValueError naming any other mode."""
    if mode not in IS_CORRECTION_MODES:
        raise ValueError(f"unknown IS-correction mode {mode!r}: one of {IS_CORRECTION_MODES}")
    level, _, action = mode.partition("_")
    return level, action

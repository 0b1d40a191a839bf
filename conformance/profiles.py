"""Run profiles: how hard hypothesis searches, and how long one clause may take.

``ci`` is derandomized with bounded examples and no deadline (no flakiness); ``dev`` is
random with more examples; ``thorough`` is for release certification.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class RunProfile:
    name: str
    max_examples: int
    derandomize: bool
    clause_time_limit_s: float


RUN_PROFILES: dict[str, RunProfile] = {
    "ci": RunProfile("ci", max_examples=25, derandomize=True, clause_time_limit_s=120.0),
    "dev": RunProfile("dev", max_examples=100, derandomize=False, clause_time_limit_s=300.0),
    "thorough": RunProfile(
        "thorough", max_examples=1000, derandomize=False, clause_time_limit_s=1800.0
    ),
}


def get_run_profile(name: str) -> RunProfile:
    if name not in RUN_PROFILES:
        raise KeyError(f"unknown profile {name!r}; choose one of {', '.join(RUN_PROFILES)}")
    return RUN_PROFILES[name]

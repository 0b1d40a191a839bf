"""The unsloth-zoo releases the binding supports, and the TRL under them.

``unsloth_zoo.rl_replacements`` holds the GRPO loss Unsloth's generated trainer runs
(``grpo_accumulated_loss`` -> ``UnslothEfficientGRPO`` -> ``grpo_compute_loss``); the
binding reads its locals and passes the keywords of the generated ``compute_loss``'s call,
so it is tied to the releases whose source was read (2026.10.9). Releases before 2026.10
refuse a machine without an accelerator at import ("Unsloth cannot find any torch
accelerator? You need a GPU."), so no CPU runner can certify them; they exit 2 naming the
supported range like any release not listed. 2026.10.1, .5 and .8 were diffed against
2026.10.9: ``grpo_compute_loss``, ``grpo_accumulated_loss``, ``UnslothEfficientGRPO`` and
``grpo_chunked_hidden_states_logprobs`` all differ, so none is admitted on 2026.10.9's reading.
TRL: the release unsloth-zoo 2026.10.9 allows
(``trl <= 1.15.0``) that the TRL trainer shell knows (``adapters/trl/releases.py``).
"""

from __future__ import annotations

from rlconform.adapters.base import SetupError

ZOO_RELEASES: tuple[str, ...] = ("2026.10.9",)
TRL_RELEASES: tuple[str, ...] = ("1.15.0",)


def zoo_range() -> str:
    return ", ".join(ZOO_RELEASES)


def check_zoo(version: str) -> str:
    """The supported release of an installed unsloth-zoo; SetupError (exit 2) otherwise."""
    release = version.split("+")[0]
    if release in ZOO_RELEASES:
        return release
    year, _, rest = release.partition(".")
    month = rest.partition(".")[0]
    older = year.isdigit() and month.isdigit() and (int(year), int(month)) < (2026, 10)
    why = (
        "releases before 2026.10 refuse a machine without an accelerator at import"
        if older
        else "its GRPO loss is not one the binding has read"
    )
    raise SetupError(
        f"unsloth-zoo {version} is not supported ({why}): install unsloth-zoo {zoo_range()} "
        f"with TRL {', '.join(TRL_RELEASES)}: pip install 'rlconform[unsloth]'"
    )


def check_trl(release: str) -> None:
    if release not in TRL_RELEASES:
        raise SetupError(
            f"trl {release} is not supported under unsloth-zoo {zoo_range()}: install TRL "
            f"{', '.join(TRL_RELEASES)} (pip install 'rlconform[unsloth]')"
        )

"""Per-release binding tables: what each supported OpenRLHF release offers the bindings.

The same functions carry the postprocess math from 0.10.3 (the first release with
``aggregate_loss`` and the global loss denominators of ``openrlhf.utils.loss_utils``) to the
current one; what changed between releases is listed per release here and nowhere else:

- ``is_api``: how ``PolicyLoss`` is told to correct the rollout-vs-train mismatch.
  ``"gate"`` (0.11.2): ``is_correction_level`` (off/token/seq), ``is_correction_mode``
  (mask/clip), ``is_correction_gating`` and ``is_correction_threshold``; ``forward`` returns
  five values. ``"vllm_is"`` (up to 0.11.1): ``enable_vllm_is_correction``,
  ``vllm_is_truncated_threshold`` and ``vllm_is_correction_type`` (tis/icepop/seq-mask-tis);
  ``forward`` returns four values.
- ``kl_straight_through``: ``compute_approx_kl`` takes ``log_probs_old`` and
  ``unbiased_gradient`` (0.11.1 on); before, the KL-loss gradient is the estimator's own.

Releases outside this table exit 2 naming the range (``runtime.load_runtime``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

# Functions every release's bindings call: (runtime module key, attribute).
_CALLED = (
    ("utils", "compute_approx_kl"),
    ("utils", "compute_reward"),
    ("utils", "masked_mean"),
    ("utils", "compute_entropy"),
    ("loss", "aggregate_loss"),
    ("loss", "PolicyLoss"),
    ("loss", "ValueLoss"),
    ("loss_utils", "get_loss_batch_info"),
    ("kl_controller", "AdaptiveKLController"),
    ("kl_controller", "FixedKLController"),
    ("experience", "Experience"),
    ("experience_maker", "RemoteExperienceMaker"),
)


@dataclasses.dataclass(frozen=True)
class Release:
    """One supported OpenRLHF release and the signatures its bindings use."""

    name: str
    is_api: str
    kl_straight_through: bool

    def missing(self, modules: Mapping[str, Any]) -> list[str]:
        """Called functions the imported modules lack (a fork that removed or renamed one)."""
        return [
            f"{modules[key].__name__}.{attribute}"
            for key, attribute in _CALLED
            if not hasattr(modules[key], attribute)
        ]

    def describe(self) -> str:
        kl = "compute_approx_kl(unbiased_gradient)" if self.kl_straight_through else "no ST-KL"
        policy = (
            "PolicyLoss(is_correction_level/mode/gating)"
            if self.is_api == "gate"
            else "PolicyLoss(vllm_is_correction_type)"
        )
        return f"{self.name} table: {policy}, {kl}"


# Newest first: the first entry is the release the install hint names.
RELEASES: dict[str, Release] = {
    release.name: release
    for release in (
        Release("0.11.2", is_api="gate", kl_straight_through=True),
        Release("0.11.1", is_api="vllm_is", kl_straight_through=True),
        Release("0.11.0", is_api="vllm_is", kl_straight_through=False),
        Release("0.10.4", is_api="vllm_is", kl_straight_through=False),
        Release("0.10.3", is_api="vllm_is", kl_straight_through=False),
    )
}


def supported_range() -> str:
    names = list(RELEASES)
    return f"{names[-1]} to {names[0]} ({', '.join(reversed(names))})"

"""The releases the Liger binding supports: TRL's fused GRPO branch and Liger's loss.

``GRPOTrainer.compute_loss`` routes the loss through ``compute_liger_loss`` and Liger's
``LigerFusedLinearGRPOLoss`` when ``use_liger_kernel=True`` in TRL 1.9.0 .. 1.12.0 (read
from each release's ``trl/trainer/grpo_trainer.py``). TRL 1.13.0 removed that branch:
there ``use_liger_kernel`` applies Liger's layer kernels only and the loss is TRL's own
``_compute_loss``, which ``rlconform certify trl`` certifies. Two groups of the branch:

- 1.9.0 .. 1.10.0: ``compute_liger_loss`` passes no ``num_items_in_batch``; Liger's dapo /
  cispo / vespo normaliser falls back to the micro-batch's own token count, and the loss
  is divided by ``current_gradient_accumulation_steps``;
- 1.11.0 .. 1.12.0: it passes ``num_items_in_batch`` and divides dapo / cispo / vespo by
  ``current_gradient_accumulation_steps / steps_per_generation``.

The adapter runs whichever the installed TRL does (it calls TRL's ``compute_liger_loss``);
the groups are listed for the report. Liger: the releases whose
``LigerFusedLinearGRPOLoss`` takes every keyword TRL passes (read from
``liger_kernel/chunked_loss/grpo_loss.py``).
"""

from __future__ import annotations

import dataclasses

from rlconform.adapters.base import SetupError


@dataclasses.dataclass(frozen=True)
class LigerBranch:
    name: str
    trl_releases: tuple[str, ...]
    passes_num_items: bool  # compute_liger_loss hands num_items_in_batch to the loss

    @property
    def span(self) -> str:
        return f"{self.trl_releases[0]} .. {self.trl_releases[-1]}"


BRANCHES: tuple[LigerBranch, ...] = (
    LigerBranch("trl-liger-1.9", ("1.9.0", "1.9.1", "1.9.2", "1.10.0"), passes_num_items=False),
    LigerBranch("trl-liger-1.11", ("1.11.0", "1.12.0"), passes_num_items=True),
)
LIGER_RELEASES: tuple[str, ...] = ("0.8.5",)


def trl_range() -> str:
    return f"{BRANCHES[0].trl_releases[0]} .. {BRANCHES[-1].trl_releases[-1]}"


def branch_for(trl_release: str) -> LigerBranch:
    """The branch of an installed TRL release; SetupError (exit 2) outside the range."""
    for branch in BRANCHES:
        if trl_release in branch.trl_releases:
            return branch
    removed = tuple(int(p) for p in trl_release.split(".")[:2]) >= (1, 13)
    why = (
        "TRL 1.13.0 removed the fused Liger GRPO loss (use_liger_kernel applies Liger's "
        "layer kernels only; the loss is TRL's own _compute_loss: rlconform certify trl)"
        if removed
        else "its GRPOTrainer's Liger branch is not one the adapter knows"
    )
    raise SetupError(
        f"trl {trl_release} is not supported by trl-liger: {why}; install a release of "
        f"{trl_range()} with liger-kernel {', '.join(LIGER_RELEASES)}: "
        "pip install 'rlconform[trl-liger]'"
    )


def check_liger(version: str) -> None:
    if version.split("+")[0] not in LIGER_RELEASES:
        raise SetupError(
            f"liger-kernel {version} is not supported: the binding knows the "
            f"LigerFusedLinearGRPOLoss of {', '.join(LIGER_RELEASES)} "
            "(pip install 'rlconform[trl-liger]')"
        )

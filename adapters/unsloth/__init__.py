"""Unsloth's GRPO loss as a certification target.

``rlconform certify unsloth`` (``pip install --no-deps unsloth==2026.10.9`` then
``pip install 'rlconform[unsloth]'``: unsloth-zoo 2026.10.9 and TRL 1.15.0). Unsloth's
patched ``GRPOTrainer`` keeps TRL's scoring path (rewards -> advantages,
``num_items_in_batch``: certified with ``rlconform certify trl``) and replaces the loss:
its ``compute_loss`` calls unsloth-zoo's ``grpo_accumulated_loss`` (the model's hidden
states -> Unsloth's chunked log-softmax -> ``UnslothEfficientGRPO`` -> ``grpo_compute_loss``).
This target binds that loss (``accumulated.py``, ``loss.py``) on TRL's trainer shell
(``adapters/trl/shell.py``). The ``unsloth`` package is installed without its
dependencies: unsloth-zoo imports only where it is present, and its GPU dependencies
(xformers, bitsandbytes) do not install on a CPU runner; the generated trainer itself is not
built (its ``compute_loss`` call is transcribed in ``accumulated.py``). Releases outside
``releases.py`` exit 2 naming the range. Not bound: the step (the trainer's
``training_step`` over micro-batches), the vLLM IS modes, SAPO / VESPO, the entropy bonus.
"""

from __future__ import annotations

from typing import Any

from rlconform.adapters.base import SetupError, Target
from rlconform.adapters.trl.runtime import TrlRuntime, load_runtime
from rlconform.adapters.trl.shell import Shell
from rlconform.adapters.unsloth.loss import UnslothLossBindings
from rlconform.adapters.unsloth.manifest import BINDINGS, PROFILE, deviations_for
from rlconform.adapters.unsloth.releases import TRL_RELEASES, check_trl, zoo_range
from rlconform.adapters.unsloth.runtime import COMPILED, ZooRuntime, load_zoo


class UnslothTarget(UnslothLossBindings, Target):
    """Unsloth's GRPO loss, bound operation by operation."""

    name = "unsloth"

    def __init__(
        self,
        zoo: ZooRuntime,
        runtime: TrlRuntime,
        device: str = "cpu",
        framework_path: str | None = None,
    ):
        self.zoo_runtime = zoo
        self.zoo = zoo.rl
        self.runtime = runtime
        self.device = device
        self.framework_path = framework_path
        self.version = zoo.version
        self.release_table = runtime.bindings
        self.shell = Shell(runtime.trainer_cls, runtime.config_cls, runtime.bindings)
        self.profile = PROFILE
        self.deviations = deviations_for(zoo.release)
        self.bindings = dict(BINDINGS)

    def describe(self) -> dict[str, str]:
        info = super().describe()
        info.update(
            {
                "bindings": "unsloth-zoo-" + self.zoo_runtime.release,
                "binding_releases": zoo_range(),
                "trl": self.runtime.version,
                "unsloth_compiled": str(COMPILED),
                "source": self.zoo_runtime.root,
            }
        )
        return info

    def __reduce__(self) -> tuple[Any, ...]:
        """Rebuilt from scratch in a spawned worker (the shell holds classes)."""
        return (load, (self.device, self.framework_path))


def load(device: str = "cpu", framework_path: str | None = None) -> UnslothTarget:
    """The target; SetupError (CLI exit 2) when unsloth-zoo or TRL is missing or unsupported."""
    zoo = load_zoo()
    try:
        runtime = load_runtime(framework_path)
    except SetupError as exc:
        raise SetupError(
            f"unsloth needs TRL {', '.join(TRL_RELEASES)} under unsloth-zoo {zoo_range()} "
            f"(pip install 'rlconform[unsloth]'): {exc}"
        ) from None
    check_trl(runtime.release)
    return UnslothTarget(zoo, runtime, device=device, framework_path=framework_path)


__all__ = ["UnslothTarget", "load"]

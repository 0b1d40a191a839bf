"""The smallest trainer shell that runs ``GRPOTrainer``'s real methods without a model.

``GRPOTrainer`` keeps its postprocess math inline in two private methods:
``_generate_and_score_completions`` (rewards -> advantages, the vLLM importance-sampling
ratio, ``num_items_in_batch``) and ``_compute_loss`` (policy loss of every ``loss_type``,
the KL term, masks, aggregation). The shell is a ``GRPOTrainer`` created with
``object.__new__`` (no model, no tokenizer, no dataset), given the attributes
``GRPOTrainer.__init__`` would derive from a real ``GRPOConfig`` (the release's binding
table says which), and three instance-level stand-ins for what needs a model or a
generator:

- ``_get_per_token_logps_and_entropies``: returns the log-probs (and entropies) of the case
  instead of running a forward pass; the policy's tensor keeps its autograd graph, so the
  gradient of TRL's loss reaches the case's ``log_prob`` through TRL's own code;
- ``_generate``: returns the case's completions (token counts, tool masks, the rollout
  engine's log-probs) in the tuple layout of the release;
- ``_calculate_rewards``: returns the case's per-reward-function scores.

``accelerator`` is a single-process stand-in (``SingleRank``): gathers and reductions are
those of one process, and ``num_processes`` is the data-parallel size the case asks for,
which is all the math reads of it. Nothing is patched on the class; every call builds a
fresh shell, so no state carries from one call to the next.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import sys
import warnings
from collections import defaultdict, deque
from collections.abc import Iterator, Sequence
from types import SimpleNamespace
from typing import Any

import torch

from rlconform.adapters.base import Inexpressible
from rlconform.adapters.trl.releases import Bindings

EOS_ID = 2  # the tokenizer's EOS id (pad is 0, the completions' own token 1)


class SingleRank:
    """The ``accelerate.Accelerator`` surface ``GRPOTrainer``'s math reads, for one rank.

    A real ``Accelerator`` cannot report a ``num_processes`` other than its own process
    group's; TRL's ``dapo`` / ``cispo`` normalisers divide by it, so the stand-in carries the
    case's data-parallel size while gathering as the single process it is.
    """

    def __init__(self, num_processes: int = 1):
        self.num_processes = num_processes
        self.process_index = 0
        self.is_main_process = True  # read by profiling_decorator (compute_loss)
        self.device = torch.device("cpu")
        self.sync_gradients = True

    def gather(self, tensor: Any) -> Any:
        return tensor

    def gather_for_metrics(self, tensor: Any) -> Any:
        return tensor

    def reduce(self, tensor: Any, reduction: str = "sum") -> Any:
        return tensor

    def pad_across_processes(self, tensor: Any, dim: int = 0, pad_index: Any = 0) -> Any:
        return tensor

    def unwrap_model(self, model: Any) -> Any:
        return model

    def autocast(self) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()


@contextlib.contextmanager
def capture_locals(function: Any, names: Sequence[str]) -> Iterator[dict[str, Any]]:
    """Read ``names`` from ``function``'s frame when it returns (nothing is changed).

    ``_compute_loss`` builds its per-token loss and KL as locals and returns only their
    aggregate; reading the locals at the return gives the per-token values TRL aggregated,
    with their autograd graph, without re-implementing a line of it.
    """
    code = inspect.unwrap(function).__code__
    captured: dict[str, Any] = {}

    def on_return(frame: Any, event: str, arg: Any) -> Any:
        if event == "return":
            for name in names:
                if name in frame.f_locals:
                    captured[name] = frame.f_locals[name]
        return on_return

    def on_call(frame: Any, event: str, arg: Any) -> Any:
        if frame.f_code is code:
            frame.f_trace_lines = False
            return on_return
        return None

    previous = sys.gettrace()
    sys.settrace(on_call)
    try:
        yield captured
    finally:
        sys.settrace(previous)


class Shell:
    """Builds trainer shells for one TRL installation and runs its two math methods."""

    def __init__(self, trainer_cls: type, config_cls: type, bindings: Bindings):
        self.trainer_cls = trainer_cls
        self.config_cls = config_cls
        self.bindings = bindings
        self._policy = SimpleNamespace(training=True, is_gradient_checkpointing=False)
        self._reference = SimpleNamespace(training=False, is_gradient_checkpointing=False)

    # -- configuration ------------------------------------------------------------------

    def config(self, **fields: Any) -> Any:
        """A real ``GRPOConfig`` with ``fields`` (TRL validates them); a combination TRL
        refuses is an input this framework cannot express."""
        key = tuple(sorted((k, _hashable(v)) for k, v in fields.items()))
        try:
            return self._config(key)
        except ValueError as exc:
            message = str(exc).splitlines()[0]
            raise Inexpressible(f"GRPOConfig refuses {dict(fields)}: {message}") from None

    @functools.lru_cache(maxsize=256)  # noqa: B019 - one Shell per target, configs are pure
    def _config(self, key: tuple[tuple[str, Any], ...]) -> Any:
        fields = {k: list(v) if isinstance(v, tuple) else v for k, v in key}
        base = {
            "output_dir": "rlconform-trl-shell",
            "report_to": [],
            "use_cpu": True,
            "bf16": False,
            "logging_strategy": "no",
            "save_strategy": "no",
        }
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return self.config_cls(**{**base, **fields})

    def trainer(
        self,
        args: Any,
        *,
        num_processes: int = 1,
        accumulation_steps: int = 1,
        reward_names: Sequence[str] = ("reward",),
    ) -> Any:
        """A ``GRPOTrainer`` that skipped ``__init__``: the release's config-derived
        attributes plus the runtime state the math reads."""
        trainer = object.__new__(self.trainer_cls)
        state = self.bindings.attributes(args)
        size = args.generation_batch_size
        state.update(
            args=args,
            accelerator=SingleRank(num_processes),
            model=self._policy,
            ref_model=self._reference if args.beta != 0.0 else None,
            current_gradient_accumulation_steps=accumulation_steps,
            aux_loss_enabled=False,
            router_aux_loss_coef=0.0,
            reward_funcs=list(reward_names),
            reward_func_names=list(reward_names),
            reward_weights=(
                torch.tensor(args.reward_weights, dtype=torch.float32)
                if args.reward_weights is not None
                else torch.ones(len(reward_names), dtype=torch.float32)
            ),
            environment_factories=None,
            environments=None,
            tools=[],
            _standalone_tools=[],
            _is_vlm=False,
            _tokenizer=SimpleNamespace(pad_token_id=0, eos_token_id=EOS_ID),
            # <= 1.14 decodes the ids for its completion log (text only, never scored)
            processing_class=SimpleNamespace(batch_decode=_decode),
            eos_token_ids=[EOS_ID],
            _metrics={"train": defaultdict(list), "eval": defaultdict(list)},
            _logs={
                "images": deque(maxlen=size),
                "prompt": deque(maxlen=size),
                "completion": deque(maxlen=size),
                "rewards": defaultdict(lambda: deque(maxlen=size)),
                "advantages": deque(maxlen=size),
                "extra": defaultdict(lambda: deque(maxlen=size)),
            },
            _pending_extra_logs=defaultdict(list),
            _pending_metrics=defaultdict(list),
        )
        trainer.__dict__.update(state)
        return trainer

    # -- GRPOTrainer._compute_loss -----------------------------------------------------

    def compute_loss(
        self,
        args: Any,
        *,
        logps: torch.Tensor,
        completion_mask: torch.Tensor,
        tool_mask: torch.Tensor | None,
        advantages: torch.Tensor,
        entropies: torch.Tensor | None = None,
        old: torch.Tensor | None = None,
        ref: torch.Tensor | None = None,
        sampling: torch.Tensor | None = None,
        is_ratio: torch.Tensor | None = None,
        num_items: torch.Tensor | None = None,
        num_processes: int = 1,
        accumulation_steps: int = 1,
        capture: Sequence[str] = (),
    ) -> tuple[torch.Tensor, dict[str, Any], dict[str, list[float]]]:
        """Run the real ``_compute_loss`` on one micro-batch: (loss, captured locals, metrics)."""
        trainer = self.trainer(
            args, num_processes=num_processes, accumulation_steps=accumulation_steps
        )
        batch, width = completion_mask.shape
        if entropies is None:
            entropies = torch.zeros_like(logps, dtype=logps.dtype)
        given = (logps, entropies, None) if self.bindings.logps_returns_aux else (logps, entropies)

        def per_token_logps(model: Any, *a: Any, **k: Any) -> tuple[Any, ...]:
            return given

        trainer._get_per_token_logps_and_entropies = per_token_logps
        inputs: dict[str, Any] = {
            "prompt_ids": torch.zeros((batch, 1), dtype=torch.long),
            "prompt_mask": torch.ones((batch, 1), dtype=torch.long),
            "completion_ids": torch.zeros((batch, width), dtype=torch.long),
            "completion_mask": completion_mask,
            "advantages": advantages,
        }
        optional = {
            "tool_mask": tool_mask,
            "old_per_token_logps": old,
            "ref_per_token_logps": ref,
            "sampling_per_token_logps": sampling,
            "importance_sampling_ratio": is_ratio,
            "num_items_in_batch": num_items,
        }
        inputs.update({k: v for k, v in optional.items() if v is not None})
        with capture_locals(self.trainer_cls._compute_loss, capture) as captured:
            loss = trainer._compute_loss(self._policy, inputs)
        return loss, captured, dict(trainer._metrics["train"])

    # -- GRPOTrainer._generate_and_score_completions -----------------------------------

    def generate_and_score(
        self,
        args: Any,
        *,
        lengths: Sequence[int],
        tool_masks: Sequence[Sequence[int]] | None,
        rewards_per_func: torch.Tensor,
        sampling: Sequence[Sequence[float]] | None = None,
        old: torch.Tensor | None = None,
        ref: torch.Tensor | None = None,
        reward_names: Sequence[str] = ("reward",),
        trainer: Any = None,
        end_on_eos: bool = False,
    ) -> tuple[dict[str, Any], dict[str, list[float]]]:
        """Run the real ``_generate_and_score_completions`` on one generation batch of
        completions with ``lengths`` tokens: (its output dict, its metrics). The policy's
        log-probs TRL computes there (old log-probs, when it keeps them) are ``old``, the
        reference model's are ``ref``; ``trainer``: a shell to run it on (a fresh one when
        None); ``end_on_eos``: each completion's last token is the EOS id (a finished
        completion, which ``mask_truncated_completions`` keeps), else none is (truncated)."""
        if trainer is None:
            trainer = self.trainer(args, reward_names=reward_names)
        count = len(lengths)
        fields = {
            "prompt_ids": [[0] for _ in range(count)],
            "completion_ids": [
                [1] * (n - 1) + [EOS_ID] if end_on_eos and n else [1] * n for n in lengths
            ],
            "tool_mask": None if tool_masks is None else [list(m) for m in tool_masks],
            "completions": [f"completion {i}" for i in range(count)],
            "sampling_logps": None if sampling is None else [list(r) for r in sampling],
            "extra_fields": {},
            "images": None,
            "tool_images": [None] * count,
            "num_items_in_batch": None,
        }
        generated = tuple(fields[name] for name in self.bindings.generate_fields)

        def generate(prompts: Any) -> tuple[Any, ...]:
            return generated

        def per_token_logps(model: Any, input_ids: Any, mask: Any, keep: int, *a: Any, **k: Any):
            given = ref if model is self._reference and ref is not None else old
            values = given[:, :keep] if given is not None else torch.zeros(count, keep)
            return (values, None, None) if self.bindings.logps_returns_aux else (values, None)

        def calculate_rewards(*a: Any, **k: Any) -> torch.Tensor:
            return rewards_per_func

        trainer._generate = generate
        trainer._get_per_token_logps_and_entropies = per_token_logps
        trainer._calculate_rewards = calculate_rewards
        output = trainer._generate_and_score_completions(
            [{"prompt": f"prompt {i}"} for i in range(count)]
        )
        return output, dict(trainer._metrics["train"])


def _decode(ids: Any, skip_special_tokens: bool = True) -> list[str]:
    return [""] * len(ids)


def _hashable(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


def last_metric(metrics: dict[str, list[float]], key: str) -> float:
    values = metrics.get(key)
    if not values:
        raise KeyError(f"TRL logged no metric {key!r} (logged: {sorted(metrics)})")
    return float(values[-1])

"""verl's training-side forward: how its actor turns model logits into log-probs and entropies.

The model is the one thing not run: its output logits are the case's logits, handed to
verl's own code in the packed order that code asks the model for (a stand-in module
returns them; no math happens there). Everything else is verl's: the label shift
(``torch.roll`` of the packed input ids), the temperature scaling, ``logprobs_from_logits``,
the entropy, the cut back to response tokens. Which code that is depends on the release
(``Release.logprob_path``):

- ``nested_engine`` (0.9.x, v1 trainer): each sample is ragged, as the TransferQueue agent
  loop stores it (nested ``input_ids`` / ``position_ids`` / ``prompts`` / ``responses`` /
  ``response_mask``); ``FSDPEngineWithLMHead.prepare_model_inputs`` and
  ``prepare_model_outputs`` run on that micro-batch and the v1 trainer's
  ``response_from_nested`` cuts each response out, which the trainer pads with 0.
- ``padded_engine`` (0.8.x): ``RayPPOTrainer`` packs the padded batch with
  ``left_right_2_no_padding`` and cuts the engine's output with ``no_padding_2_padding``.
  That packing calls ``flash_attn.bert_padding`` (CUDA only; 0.9 added a torch fallback),
  so the adapter builds the same nested micro-batch itself; the two engine methods and
  ``no_padding_2_padding`` are verl's.
- ``dp_actor`` (0.7.x, legacy workers): ``DataParallelPPOActor._forward_micro_batch`` on the
  padded micro-batch with ``use_remove_padding: false`` (its remove-padding branch packs with
  ``flash_attn`` too); the label shift is its ``[:, -R - 1 : -1]`` slice of the logits.

The engine object is verl's class without its constructor (no model, no process group):
the attributes the two methods read are set as a single-GPU, no-sequence-parallel engine
has them. Entropy is computed by ``entropy_from_logits`` (or the chunked variant when the
target's settings ask for it) uncompiled: the engine's default ``torch.compile`` of that
same function changes nothing but speed.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

import torch

from rlconform.adapters.base import Inexpressible
from rlconform.adapters.verl.imports import import_verl_module

_NO_SAMPLES = (
    "a batch of no samples: verl's engine takes nested (ragged) tensors, which cannot have "
    "zero rows"
)


@dataclasses.dataclass
class Sequences:
    """Ragged samples: per sample the prompt ids, response ids and the logits rows of the
    whole sequence (row p scores token p + 1), plus the response mask used to cut."""

    prompts: list[torch.Tensor]
    responses: list[torch.Tensor]
    logits: list[torch.Tensor]
    response_masks: list[torch.Tensor]


@dataclasses.dataclass
class Forward:
    """What verl's forward returned, cut to response tokens and right-padded to ``width``."""

    log_probs: torch.Tensor
    entropy: torch.Tensor | None


def _entropy_function(chunking: bool) -> Any:
    from verl.utils import torch_functional as verl_F

    return verl_F.entropy_from_logits_with_chunking if chunking else verl_F.entropy_from_logits


class _Model(torch.nn.Module):
    """Stands in for the language model: returns the given packed logits (a fresh copy per
    call, since verl scales them in place in some releases)."""

    def __init__(self, logits: torch.Tensor):
        super().__init__()
        self.logits = logits

    def forward(self, **kwargs: Any) -> SimpleNamespace:
        return SimpleNamespace(logits=self.logits.clone())


def _fsdp_engine(chunking: bool) -> Any:
    module = import_verl_module("verl.workers.engine.fsdp.transformer_impl")
    from verl.workers.config import FSDPEngineConfig

    engine = object.__new__(module.FSDPEngineWithLMHead)
    engine.engine_config = FSDPEngineConfig(
        entropy_from_logits_with_chunking=chunking, use_torch_compile=False
    )
    engine.compute_entropy_from_logits = _entropy_function(chunking)
    engine.use_ulysses_sp = False
    engine.ulysses_sequence_parallel_size = 1
    engine.pad_to_length = False
    engine.pad_to_length_bucket = 1
    engine.pass_packed_cu_seqlens = False
    return engine


def _nested(rows: Sequence[torch.Tensor]) -> torch.Tensor:
    return torch.nested.as_nested_tensor(list(rows), layout=torch.jagged)


def _position_ids(lengths: Sequence[int], device: Any) -> list[torch.Tensor]:
    from verl.utils.model import compute_position_id_with_mask

    return [
        compute_position_id_with_mask(torch.ones((1, n), dtype=torch.int64, device=device))[0]
        for n in lengths
    ]


def _engine_outputs(
    engine: Any, release: Any, micro_batch: Any, packed_logits: torch.Tensor
) -> dict[str, Any]:
    model_inputs, output_args = engine.prepare_model_inputs(micro_batch=micro_batch)
    output = _Model(packed_logits.unsqueeze(0))(**model_inputs)
    if release.engine_outputs_takes_processor:
        return engine.prepare_model_outputs(
            output=output,
            output_args=output_args,
            micro_batch=micro_batch,
            logits_processor_func=None,
        )
    return engine.prepare_model_outputs(
        output=output, output_args=output_args, micro_batch=micro_batch
    )


def _flags(micro_batch: Any, temperature: float, entropy: bool) -> None:
    from verl.utils import tensordict_utils as tu

    tu.assign_non_tensor(
        micro_batch,
        temperature=float(temperature),
        calculate_entropy=entropy,
        use_remove_padding=True,
        use_fused_kernels=False,
    )


def _nested_engine(
    release: Any,
    sequences: Sequences,
    temperature: float,
    entropy: bool,
    chunking: bool,
    width: int,
) -> Forward:
    from tensordict import TensorDict
    from verl.workers.utils.padding import response_from_nested

    input_ids = [torch.cat([p, r]) for p, r in zip(sequences.prompts, sequences.responses)]
    device = input_ids[0].device
    micro_batch = TensorDict(
        {
            "input_ids": _nested(input_ids),
            "position_ids": _nested(_position_ids([len(x) for x in input_ids], device)),
            "prompts": _nested(sequences.prompts),
            "responses": _nested(sequences.responses),
            "response_mask": _nested(sequences.response_masks),
            "loss_mask": _nested(sequences.response_masks),
        },
        batch_size=[len(input_ids)],
    )
    _flags(micro_batch, temperature, entropy)
    outputs = _engine_outputs(
        _fsdp_engine(chunking), release, micro_batch, torch.cat(sequences.logits)
    )
    response_mask = micro_batch["response_mask"]

    def padded(values: torch.Tensor) -> torch.Tensor:
        cut = response_from_nested(values, response_mask)
        return torch.nested.to_padded_tensor(cut, 0.0, output_size=(len(input_ids), width))

    log_probs = padded(outputs["log_probs"])
    return Forward(log_probs, padded(outputs["entropy"]) if entropy else None)


def _padded_batch(sequences: Sequences, pad_token: int) -> dict[str, torch.Tensor]:
    """verl's padded layout (prompts left-padded, responses right-padded) of the samples."""
    from verl.utils.model import compute_position_id_with_mask

    prompt_width = max(len(p) for p in sequences.prompts)
    width = max(len(r) for r in sequences.responses)
    rows, masks, responses, response_masks = [], [], [], []
    for prompt, response, mask in zip(
        sequences.prompts, sequences.responses, sequences.response_masks, strict=True
    ):
        left = prompt_width - len(prompt)
        right = width - len(response)
        rows.append(
            torch.cat(
                [
                    prompt.new_full((left,), pad_token),
                    prompt,
                    response,
                    response.new_full((right,), pad_token),
                ]
            )
        )
        masks.append(
            torch.cat(
                [
                    prompt.new_zeros(left),
                    prompt.new_ones(len(prompt) + len(response)),
                    prompt.new_zeros(right),
                ]
            )
        )
        responses.append(torch.cat([response, response.new_full((right,), pad_token)]))
        response_masks.append(
            torch.cat([mask.to(torch.int64), mask.new_zeros(right, dtype=torch.int64)])
        )
    attention_mask = torch.stack(masks)
    input_ids = torch.stack(rows)
    return {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "position_ids": compute_position_id_with_mask(attention_mask),
        "prompts": input_ids[:, :prompt_width],
        "responses": torch.stack(responses),
        "response_mask": torch.stack(response_masks),
    }


def _packed_logits(sequences: Sequences) -> torch.Tensor:
    """The logits rows in the order remove-padding packs the real tokens (row by row)."""
    return torch.cat(sequences.logits)


def _no_padding(batch: dict[str, torch.Tensor], sequences: Sequences) -> Any:
    """The micro-batch ``left_right_2_no_padding`` makes of the padded batch: nested
    ``input_ids`` / ``position_ids`` of each sample's real tokens, ``loss_mask`` = the
    response mask, the padded prompts / responses / attention mask kept for the cut. Built
    here because that function packs with ``flash_attn.bert_padding`` (CUDA only) in the
    releases on this path."""
    from tensordict import TensorDict
    from verl.utils import tensordict_utils as tu

    input_ids = [torch.cat([p, r]) for p, r in zip(sequences.prompts, sequences.responses)]
    data = TensorDict(
        {
            "input_ids": _nested(input_ids),
            "position_ids": _nested(
                _position_ids([len(x) for x in input_ids], input_ids[0].device)
            ),
            "prompts": batch["prompts"],
            "responses": batch["responses"],
            "attention_mask": batch["attention_mask"],
            "response_mask": batch["response_mask"],
            "loss_mask": batch["response_mask"],
        },
        batch_size=[len(input_ids)],
    )
    tu.assign_non_tensor(
        data,
        max_seq_len=batch["input_ids"].shape[1],
        max_response_len=batch["responses"].shape[1],
    )
    return data


def _padded_engine(
    release: Any,
    sequences: Sequences,
    temperature: float,
    entropy: bool,
    chunking: bool,
    width: int,
) -> Forward:
    from verl.workers.utils.padding import no_padding_2_padding

    data = _no_padding(_padded_batch(sequences, pad_token=0), sequences)
    _flags(data, temperature, entropy)
    outputs = _engine_outputs(_fsdp_engine(chunking), release, data, _packed_logits(sequences))

    def padded(values: torch.Tensor) -> torch.Tensor:
        return _to_width(no_padding_2_padding(values, data), width)

    log_probs = padded(outputs["log_probs"])
    return Forward(log_probs, padded(outputs["entropy"]) if entropy else None)


def _to_width(values: torch.Tensor, width: int) -> torch.Tensor:
    """Right-pad (with 0) or cut the response axis of a (B, R) tensor to ``width``."""
    if values.shape[1] >= width:
        return values[:, :width]
    return torch.nn.functional.pad(values, (0, width - values.shape[1]))


def _padded_logits(sequences: Sequences, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """The logits rows at the padded batch's real positions (zeros elsewhere): what a model
    returns for the padded input without remove-padding."""
    rows, width = batch["input_ids"].shape
    vocab = sequences.logits[0].shape[-1]
    out = sequences.logits[0].new_zeros((rows, width, vocab))
    real = batch["attention_mask"].bool()
    for i, logits in enumerate(sequences.logits):
        out[i][real[i]] = logits
    return out


def _dp_actor(
    release: Any,
    sequences: Sequences,
    temperature: float,
    entropy: bool,
    chunking: bool,
    width: int,
) -> Forward:
    module = import_verl_module("verl.workers.actor.dp_actor")
    from verl.workers.config.actor import FSDPActorConfig

    batch = _padded_batch(sequences, pad_token=0)
    actor = object.__new__(module.DataParallelPPOActor)
    actor.config = FSDPActorConfig(
        strategy="fsdp",
        rollout_n=1,
        ppo_micro_batch_size_per_gpu=1,
        entropy_from_logits_with_chunking=chunking,
        use_remove_padding=False,
    )
    actor.actor_module = _Model(_padded_logits(sequences, batch))
    actor.use_remove_padding = False
    actor.use_fused_kernels = False
    actor.use_ulysses_sp = False
    actor.ulysses_sequence_parallel_size = 1
    actor.use_prefix_grouper = False
    actor.use_dynamic_bsz = False
    actor.device_name = "cpu"
    actor.param_dtype = torch.float32
    actor.compute_entropy_from_logits = _entropy_function(chunking)
    with warnings.catch_warnings():
        # float32 (the case's dtype): CPU autocast then stays off, which torch says once
        warnings.filterwarnings("ignore", message="CPU Autocast only supports")
        outputs = actor._forward_micro_batch(
            batch, temperature=temperature, calculate_entropy=entropy
        )
    log_probs = _to_width(outputs["log_probs"], width)
    entropies = _to_width(outputs["entropys"], width) if entropy else None
    return Forward(log_probs, entropies)


_PATHS = {"nested_engine": _nested_engine, "padded_engine": _padded_engine, "dp_actor": _dp_actor}


def forward(
    release: Any,
    sequences: Sequences,
    *,
    temperature: float,
    entropy: bool,
    chunking: bool,
    width: int,
) -> Forward:
    """verl's forward on the samples (``Release.logprob_path``), responses padded to ``width``."""
    if not sequences.prompts:
        raise Inexpressible(_NO_SAMPLES)
    return _PATHS[release.logprob_path](release, sequences, temperature, entropy, chunking, width)


def response_aligned(
    logits: torch.Tensor, responses: torch.Tensor, lengths: Sequence[int]
) -> Sequences:
    """Samples whose response token t is scored by logits row t (a one-token prompt: the
    sequence's row p - 1 scores token p, so response row t sits at packed row t; the last
    packed row, scoring nothing, holds zeros)."""
    prompts, cut, rows, masks = [], [], [], []
    for i, n in enumerate(lengths):
        prompts.append(responses.new_zeros(1))
        cut.append(responses[i, :n])
        rows.append(torch.cat([logits[i, :n], logits.new_zeros((1, logits.shape[-1]))]))
        masks.append(responses.new_ones(n))
    return Sequences(prompts, cut, rows, masks)

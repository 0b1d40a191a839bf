"""verl bindings for the CONTRACT area `layout`: the agent loop's padding
(``AgentLoopWorker._pad_token_ids``, ``compute_position_id_with_mask``), the trainer's
``left_right_2_no_padding`` packing, the engine's ``build_attention_mask_from_nested`` and
``unpad_input`` from ``verl.utils.attention_utils``.

The agent loop pads each sample with its tokenizer's ``pad`` (prompts on the left, responses
and the response mask on the right, to the rollout's prompt / response length); a tokenizer
whose pad token is the case's stands in for the model's (a word-level fast tokenizer: only
its ``pad`` runs). 0.7.x pads inline in ``_agent_loop_postprocess`` (async, with the whole
rollout around it) and has no ``build_attention_mask_from_nested``: its table binds neither
``pad_batch`` nor ``unpack_batch``. Rows are handed to verl one sample at
a time, as the agent loop does, and stacked; packed rows are read back through nested tensors
whose offsets are the given ``cu_seqlens``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch


def _device(rows: Sequence[torch.Tensor], fallback: str) -> torch.device | str:
    return rows[0].device if len(rows) else fallback


def _right_padded(
    rows: Sequence[torch.Tensor], width: int, *, device, dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, width) values right-padded with 0 and their attention mask (the input the
    trainer's ``left_right_2_no_padding`` receives)."""
    values = torch.zeros((len(rows), width), dtype=dtype, device=device)
    mask = torch.zeros((len(rows), width), dtype=torch.int64, device=device)
    for i, row in enumerate(rows):
        values[i, : row.numel()] = row.reshape(-1).to(dtype)
        mask[i, : row.numel()] = 1
    return values, mask


def _pad_worker(pad_token_id: int):
    """An ``AgentLoopWorker`` (constructor skipped) whose tokenizer pads with ``pad_token_id``."""
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    from rlconform.adapters.verl.imports import import_verl_module

    agent_loop = import_verl_module("verl.experimental.agent_loop.agent_loop")
    # every id below the pad id named too: a vocabulary with holes makes transformers warn
    vocab = {f"t{i}": i for i in range(int(pad_token_id))} | {"<pad>": int(pad_token_id)}
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(models.WordLevel(vocab, unk_token="<pad>")), pad_token="<pad>"
    )
    worker = object.__new__(agent_loop.AgentLoopWorker)
    worker.tokenizer = tokenizer
    worker.processor = None
    return worker


def _agent_padded(worker, rows, width: int, side: str, attention: bool):
    ids, masks = [], []
    for row in rows:
        out = worker._pad_token_ids(
            [int(x) for x in row.reshape(-1).tolist()],
            max_length=width,
            padding_side=side,
            return_attention_mask=attention,
        )
        ids.append(out["input_ids"])
        if attention:
            masks.append(out["attention_mask"])
    stacked = torch.cat(ids) if ids else torch.zeros((0, width), dtype=torch.int64)
    mask = torch.cat(masks) if masks else torch.zeros((0, width), dtype=torch.int64)
    return stacked, mask


def _unpad_rows(padded: torch.Tensor, attention_mask: torch.Tensor) -> list[torch.Tensor]:
    """Ragged rows: ``unpad_input`` gathers the attention-mask-1 tokens, cut at its cu_seqlens."""
    from verl.utils.attention_utils import unpad_input

    values, _, cu_seqlens, *_ = unpad_input(padded.unsqueeze(-1), attention_mask)
    return list(torch.tensor_split(values.reshape(-1), cu_seqlens[1:-1].tolist()))


class LayoutOps:
    """`layout` operations through verl's padding and remove-padding helpers."""

    def pad_batch(
        self,
        prompts: Sequence[torch.Tensor],
        responses: Sequence[torch.Tensor],
        *,
        pad_token_id: int,
        prompt_width: int | None = None,
        response_width: int | None = None,
        response_fields: Mapping[str, Sequence[torch.Tensor]] | None = None,
    ) -> dict[str, torch.Tensor]:
        """layout.pad: ``AgentLoopWorker._pad_token_ids`` per sample (prompts left, responses
        right, to the given widths), the prompt and response attention masks it returns
        concatenated, position ids from the agent loop's ``_compute_position_ids`` (text
        only: ``compute_position_id_with_mask``); response_mask is the response attention
        mask; response fields (float) are right-padded with 0.0 as the agent loop pads
        ``response_logprobs``."""
        device = _device(prompts, self.device)
        if prompt_width is None:
            prompt_width = max((int(p.numel()) for p in prompts), default=0)
        if response_width is None:
            response_width = max((int(r.numel()) for r in responses), default=0)
        worker = _pad_worker(pad_token_id)
        prompt_ids, prompt_mask = _agent_padded(worker, prompts, prompt_width, "left", True)
        response_ids, response_mask = _agent_padded(
            worker, responses, response_width, "right", True
        )
        attention_mask = torch.cat([prompt_mask, response_mask], dim=-1).to(device)
        input_ids = torch.cat([prompt_ids, response_ids], dim=-1).to(device)
        position_ids = [
            worker._compute_position_ids(input_ids[i : i + 1], attention_mask[i : i + 1], {})
            for i in range(input_ids.shape[0])
        ]
        batch = {
            "prompts": prompt_ids.to(device),
            "responses": response_ids.to(device),
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "position_ids": torch.cat(position_ids) if position_ids else input_ids.clone(),
            "response_mask": response_mask.to(device),
        }
        for name, rows in (response_fields or {}).items():
            dtype = rows[0].dtype if len(rows) else torch.float32
            batch[name], _ = _right_padded(rows, response_width, device=device, dtype=dtype)
        return batch

    def unpad_batch(
        self, batch: Mapping[str, torch.Tensor], *, response_fields: Sequence[str] = ()
    ) -> dict[str, list[torch.Tensor]]:
        """layout.roundtrip: ``unpad_input`` on the prompt and the response half of the
        attention mask (the remove-padding step of verl's engine), rows cut at its cu_seqlens."""
        prompt_width = batch["prompts"].shape[-1]
        prompt_mask = batch["attention_mask"][:, :prompt_width]
        response_mask = batch["attention_mask"][:, prompt_width:]
        ragged = {
            "prompts": _unpad_rows(batch["prompts"], prompt_mask),
            "responses": _unpad_rows(batch["responses"], response_mask),
        }
        for name in response_fields:
            ragged[name] = _unpad_rows(batch[name], response_mask)
        return ragged

    def pack_batch(
        self,
        sequences: Sequence[torch.Tensor],
        *,
        fields: Mapping[str, Sequence[torch.Tensor]] | None = None,
    ) -> dict[str, torch.Tensor]:
        """layout.pack: the trainer's ``left_right_2_no_padding`` on the right-padded batch
        (position ids from ``compute_position_id_with_mask``); the nested
        input_ids' offsets are cu_seqlens; fields are gathered with ``index_first_axis`` at
        the ``indices`` it records, as verl packs its routed-expert and teacher fields."""
        from tensordict import TensorDict
        from verl.utils import tensordict_utils as tu
        from verl.utils.attention_utils import index_first_axis
        from verl.utils.model import compute_position_id_with_mask
        from verl.workers.utils.padding import left_right_2_no_padding

        device = _device(sequences, self.device)
        width = max((int(s.numel()) for s in sequences), default=0)
        input_ids, attention_mask = _right_padded(
            sequences, width, device=device, dtype=torch.int64
        )
        data = TensorDict(
            {
                "input_ids": input_ids,
                "attention_mask": attention_mask,
                "response_mask": attention_mask,
                "position_ids": compute_position_id_with_mask(attention_mask),
            },
            batch_size=[len(sequences)],
        )
        data = left_right_2_no_padding(data)
        indices = tu.get_non_tensor_data(data, "indices", None)
        packed = {
            "input_ids": data["input_ids"].values().unsqueeze(0),
            "cu_seqlens": data["input_ids"].offsets().to(torch.int32),
            "position_ids": data["position_ids"].values().unsqueeze(0),
        }
        for name, rows in (fields or {}).items():
            dtype = rows[0].dtype if len(rows) else torch.float32
            padded, _ = _right_padded(rows, width, device=device, dtype=dtype)
            packed[name] = index_first_axis(padded.reshape(-1, 1), indices).reshape(1, -1)
        return packed

    def unpack_batch(
        self, packed: Mapping[str, torch.Tensor], *, fields: Sequence[str] = ()
    ) -> dict[str, list[torch.Tensor]]:
        """layout.roundtrip: the FSDP engine's no-padding -> padded step (a nested tensor
        with offsets cu_seqlens, ``to_padded_tensor`` and ``build_attention_mask_from_nested``),
        then ``unpad_input`` as in ``unpad_batch``."""
        from verl.workers.utils.padding import build_attention_mask_from_nested

        cu_seqlens = packed["cu_seqlens"].to(torch.int64)
        total = int(cu_seqlens[-1])
        ragged = {}
        attention_mask = None
        for name in ("input_ids", *fields):
            values = packed[name].reshape(-1)[:total]
            nested = torch.nested.nested_tensor_from_jagged(values, offsets=cu_seqlens)
            if attention_mask is None:
                attention_mask = build_attention_mask_from_nested(nested)
            padded = torch.nested.to_padded_tensor(
                nested, padding=0, output_size=tuple(attention_mask.shape)
            )
            ragged[name] = _unpad_rows(padded, attention_mask)
        return ragged

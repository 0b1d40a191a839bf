"""verl bindings for the CONTRACT area `layout`: the dataset's ``postprocess_data`` padding,
``compute_position_id_with_mask``, the engine's ``left_right_2_no_padding`` packing and
``build_attention_mask_from_nested``, and ``unpad_input`` from ``verl.utils.attention_utils``.

Only layout happens here: rows are handed to verl one sample at a time (as verl's dataset
and agent loop do), stacked and concatenated; packed rows are read back through nested
tensors whose offsets are the given ``cu_seqlens``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch


def _device(rows: Sequence[torch.Tensor], fallback: str) -> torch.device | str:
    return rows[0].device if len(rows) else fallback


def _pad_rows(
    rows: Sequence[torch.Tensor], width: int, pad: float | int, *, left: bool, device, dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, width) values and attention mask: ``postprocess_data`` on each one-row batch."""
    from verl.utils.torch_functional import postprocess_data

    ids, masks = [], []
    for row in rows:
        one = row.reshape(1, -1)
        padded, mask = postprocess_data(
            one, torch.ones_like(one, dtype=torch.int64), width, pad, left_pad=left
        )
        ids.append(padded)
        masks.append(mask)
    if not ids:
        empty = torch.zeros((0, width), dtype=dtype, device=device)
        return empty, empty.to(torch.int64)
    return torch.cat(ids).to(dtype), torch.cat(masks)


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
        """layout.pad: ``postprocess_data`` per sample (prompts ``left_pad=True``, responses and
        response fields ``left_pad=False``, fields padded with 0), the attention mask it returns,
        and ``verl.utils.model.compute_position_id_with_mask``; response_mask is the response
        half of the attention mask."""
        from verl.utils.model import compute_position_id_with_mask

        device = _device(prompts, self.device)
        if prompt_width is None:
            prompt_width = max((int(p.numel()) for p in prompts), default=0)
        if response_width is None:
            response_width = max((int(r.numel()) for r in responses), default=0)
        ids = {"device": device, "dtype": torch.int64}
        prompt_ids, prompt_mask = _pad_rows(prompts, prompt_width, pad_token_id, left=True, **ids)
        response_ids, response_mask = _pad_rows(
            responses, response_width, pad_token_id, left=False, **ids
        )
        attention_mask = torch.cat([prompt_mask, response_mask], dim=-1)
        batch = {
            "prompts": prompt_ids,
            "responses": response_ids,
            "input_ids": torch.cat([prompt_ids, response_ids], dim=-1),
            "attention_mask": attention_mask,
            "position_ids": compute_position_id_with_mask(attention_mask),
            "response_mask": response_mask,
        }
        for name, rows in (response_fields or {}).items():
            dtype = rows[0].dtype if len(rows) else torch.float32
            batch[name], _ = _pad_rows(
                rows, response_width, 0, left=False, device=device, dtype=dtype
            )
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
        """layout.pack: the engine's ``left_right_2_no_padding`` on the right-padded batch
        (``postprocess_data`` per sample, ``compute_position_id_with_mask``); the nested
        input_ids' offsets are cu_seqlens; fields are gathered with ``index_first_axis`` at
        the ``indices`` it records, as verl packs its routed-expert and teacher fields."""
        from tensordict import TensorDict
        from verl.utils import tensordict_utils as tu
        from verl.utils.attention_utils import index_first_axis
        from verl.utils.model import compute_position_id_with_mask
        from verl.workers.utils.padding import left_right_2_no_padding

        device = _device(sequences, self.device)
        width = max((int(s.numel()) for s in sequences), default=0)
        input_ids, attention_mask = _pad_rows(
            sequences, width, 0, left=False, device=device, dtype=torch.int64
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
            padded, _ = _pad_rows(rows, width, 0, left=False, device=device, dtype=dtype)
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

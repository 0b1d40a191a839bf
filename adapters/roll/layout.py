"""Canonical layout <-> ROLL's full-sequence layout. Pure index bookkeeping, no math.

Canonical (rlconform): responses right-padded to width R, prompts left-padded to width W,
per-token tensors (B, R) with column j = response token j of the sample.

ROLL (``postprocess_generate`` in ``roll/utils/functionals.py``): one right-padded row of
width L per sample, prompt then response then padding; ``attention_mask`` (B, L) is 1 on
the P_i + L_i real tokens, ``response_mask`` (B, L) is 1 on the response tokens,
``position_ids`` = clip(cumsum(attention_mask) - 1, min=0). Every per-token tensor
(log-probs, rewards, values, advantages, the final response mask) is (B, L - 1): column t
belongs to token t + 1 (the log-prob of token t + 1 comes from logits row t). So response
token j of sample i sits at token column P_i + j and per-token column P_i + j - 1.

A ``RollLayout`` fixes the prompt length P_i >= 1 of every row and the width L (at least
max_i P_i + R, so that the canonical padding columns land on ROLL padding columns and a
target's padding hygiene stays observable after the round trip).
"""

from __future__ import annotations

import dataclasses

import torch

#: Prompt lengths used when the caller has no prompts (most clause operations pass
#: response-side tensors only): 1, 2, 3, 1, 2, 3, ... so that rows start their responses at
#: different columns, as in a real batch.
DEFAULT_PROMPT_CYCLE = (1, 2, 3)


def default_prompt_lengths(batch_size: int, device: torch.device | str = "cpu") -> torch.Tensor:
    cycle = DEFAULT_PROMPT_CYCLE
    return torch.tensor([cycle[i % len(cycle)] for i in range(batch_size)], device=device)


def response_lengths(response_mask: torch.Tensor) -> torch.Tensor:
    """L_i = index of the last 1 of a right-padded (B, R) mask + 1 (holes inside count)."""
    if response_mask.shape[-1] == 0:
        return torch.zeros(response_mask.shape[0], dtype=torch.int64, device=response_mask.device)
    columns = torch.arange(1, response_mask.shape[-1] + 1, device=response_mask.device)
    return torch.where(response_mask.bool(), columns, 0).amax(dim=-1).to(torch.int64)


@dataclasses.dataclass(frozen=True)
class RollLayout:
    """Where each canonical response column lives in ROLL's (B, L) / (B, L - 1) tensors."""

    prompt_lengths: torch.Tensor  # (B,) int64, each >= 1
    lengths: torch.Tensor  # (B,) int64 response lengths L_i
    response_width: int  # R
    width: int  # L

    @property
    def batch_size(self) -> int:
        return int(self.prompt_lengths.shape[0])

    @property
    def device(self) -> torch.device:
        return self.prompt_lengths.device

    @classmethod
    def build(
        cls,
        lengths: torch.Tensor,
        response_width: int,
        prompt_lengths: torch.Tensor | None = None,
        width: int | None = None,
    ) -> RollLayout:
        lengths = torch.as_tensor(lengths).to(torch.int64)
        if prompt_lengths is None:
            prompt_lengths = default_prompt_lengths(lengths.shape[0], lengths.device)
        prompt_lengths = torch.as_tensor(prompt_lengths, device=lengths.device).to(torch.int64)
        if prompt_lengths.numel() and int(prompt_lengths.min()) < 1:
            raise ValueError("ROLL's layout needs at least one prompt token per row")
        if lengths.numel() and int(lengths.max()) > response_width:
            raise ValueError(f"a response length exceeds the response width {response_width}")
        needed = int(prompt_lengths.max()) + response_width if prompt_lengths.numel() else 1
        if width is None:
            width = needed
        if width < needed:
            raise ValueError(
                f"ROLL width L={width} cannot hold prompt + response columns (needs {needed})"
            )
        return cls(prompt_lengths, lengths, int(response_width), int(width))

    @classmethod
    def from_response_mask(
        cls,
        response_mask: torch.Tensor,
        prompt_lengths: torch.Tensor | None = None,
        width: int | None = None,
    ) -> RollLayout:
        return cls.build(
            response_lengths(response_mask), response_mask.shape[-1], prompt_lengths, width
        )

    # -------------------------------------------------------------- index helpers

    def _columns(self, shift: int) -> torch.Tensor:
        """(B, R) column of canonical (i, j) in a ROLL tensor: P_i + j + shift."""
        j = torch.arange(self.response_width, device=self.device)
        return self.prompt_lengths.unsqueeze(-1) + j + shift

    # -------------------------------------------------------------- masks

    def attention_mask(self) -> torch.Tensor:
        """(B, L) int64: 1 on the P_i + L_i real tokens."""
        c = torch.arange(self.width, device=self.device)
        return (c < (self.prompt_lengths + self.lengths).unsqueeze(-1)).to(torch.int64)

    def position_ids(self) -> torch.Tensor:
        """(B, L) int64, as ROLL builds them: clip(cumsum(attention_mask) - 1, min=0)."""
        return (self.attention_mask().cumsum(-1) - 1).clamp(min=0)

    def response_mask(self, action_mask: torch.Tensor | None = None) -> torch.Tensor:
        """(B, L) int64 ROLL ``response_mask``: 1 on response tokens (times the canonical
        (B, R) action mask when given, so loss-mask holes stay holes)."""
        j = torch.arange(self.response_width, device=self.device)
        inside = (j < self.lengths.unsqueeze(-1)).to(torch.int64)
        if action_mask is not None:
            inside = inside * action_mask.to(device=self.device).bool().to(torch.int64)
        return self.sequence_to_roll(inside, fill=0)

    def prompt_mask(self) -> torch.Tensor:
        """(B, L) int64: 1 on prompt tokens."""
        c = torch.arange(self.width, device=self.device)
        return (c < self.prompt_lengths.unsqueeze(-1)).to(torch.int64)

    # -------------------------------------------------------------- per-token fields

    def tokens_to_roll(self, x: torch.Tensor, fill: float | int = 0) -> torch.Tensor:
        """Canonical (B, R, ...) per-token field -> ROLL (B, L - 1, ...) (column P_i + j - 1).

        Columns outside the embedded block (prompt slots, tail padding) hold ``fill``;
        canonical padding columns j >= L_i are copied, so garbage there stays garbage.
        """
        return self._scatter(x, self.width - 1, shift=-1, fill=fill)

    def tokens_from_roll(self, y: torch.Tensor) -> torch.Tensor:
        """ROLL (B, L - 1, ...) per-token field -> canonical (B, R, ...)."""
        return self._gather(y, shift=-1)

    def sequence_to_roll(self, x: torch.Tensor, fill: float | int = 0) -> torch.Tensor:
        """Canonical (B, R, ...) response-token field -> ROLL (B, L, ...) token columns P_i + j."""
        return self._scatter(x, self.width, shift=0, fill=fill)

    def sequence_from_roll(self, y: torch.Tensor) -> torch.Tensor:
        """ROLL (B, L, ...) token columns P_i + j -> canonical (B, R, ...)."""
        return self._gather(y, shift=0)

    def _scatter(self, x: torch.Tensor, width: int, shift: int, fill: float | int) -> torch.Tensor:
        if x.shape[:2] != (self.batch_size, self.response_width):
            raise ValueError(
                f"expected a (B={self.batch_size}, R={self.response_width}, ...) tensor, "
                f"got {tuple(x.shape)}"
            )
        out = torch.full(
            (self.batch_size, width, *x.shape[2:]), fill, dtype=x.dtype, device=x.device
        )
        index = self._columns(shift).to(x.device)
        index = index.view(*index.shape, *([1] * (x.dim() - 2))).expand_as(x)
        return out.scatter(1, index, x)

    def _gather(self, y: torch.Tensor, shift: int) -> torch.Tensor:
        index = self._columns(shift).to(y.device)
        index = index.view(*index.shape, *([1] * (y.dim() - 2))).expand(*index.shape, *y.shape[2:])
        return y.gather(1, index)

    # -------------------------------------------------------------- ids

    def ids_to_roll(
        self, prompts: torch.Tensor, responses: torch.Tensor, pad_token_id: int = 0
    ) -> torch.Tensor:
        """Left-padded prompts (B, W) and right-padded responses (B, R) -> ROLL ``input_ids``
        (B, L), right-padded. The last P_i prompt columns are the real prompt tokens."""
        b, w = prompts.shape
        out = torch.full(
            (b, self.width), pad_token_id, dtype=responses.dtype, device=responses.device
        )
        c = torch.arange(self.width, device=responses.device)
        src = (w - self.prompt_lengths.unsqueeze(-1) + c).clamp(0, max(w - 1, 0))
        if w:
            from_prompt = prompts.to(responses.device).gather(1, src)
            out = torch.where(c < self.prompt_lengths.unsqueeze(-1), from_prompt, out)
        placed = self.sequence_to_roll(responses, fill=pad_token_id)
        in_response = (c >= self.prompt_lengths.unsqueeze(-1)) & (
            c < (self.prompt_lengths + self.lengths).unsqueeze(-1)
        )
        return torch.where(in_response, placed, out)

    def ids_from_roll(
        self, input_ids: torch.Tensor, prompt_width: int, pad_token_id: int = 0
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """ROLL ``input_ids`` (B, L) -> (left-padded prompts (B, W), right-padded responses
        (B, R)); padding columns get ``pad_token_id``."""
        b = input_ids.shape[0]
        c = torch.arange(prompt_width, device=input_ids.device)
        src = (self.prompt_lengths.unsqueeze(-1) - prompt_width + c).clamp(min=0)
        prompts = input_ids.gather(1, src) if prompt_width else input_ids[:, :0]
        real_prompt = c >= (prompt_width - self.prompt_lengths).unsqueeze(-1)
        prompts = torch.where(real_prompt, prompts, torch.full_like(prompts, pad_token_id))
        responses = self.sequence_from_roll(input_ids)
        j = torch.arange(self.response_width, device=input_ids.device)
        real = j < self.lengths.unsqueeze(-1)
        responses = torch.where(real, responses, torch.full_like(responses, pad_token_id))
        assert prompts.shape[0] == b
        return prompts, responses

    @staticmethod
    def prompt_lengths_from_mask(prompt_attention_mask: torch.Tensor) -> torch.Tensor:
        """P_i of a left-padded (B, W) prompt attention mask."""
        return prompt_attention_mask.to(torch.int64).sum(-1)

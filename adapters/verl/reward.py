"""verl bindings for the CONTRACT area `reward`: where the trainer's reward path puts a
sample's score (``Release.reward_path``, the trainer settings).

- ``agent_loop_output`` (0.9.x v1 trainer, streaming reward): the TransferQueue agent loop
  stores ``AgentLoopOutput.as_dict()``, whose ragged ``rm_scores`` has the score at the last
  position of ``response_ids`` (tool tokens included); the trainer pads it with 0.
- ``agent_loop_postprocess`` (``RayPPOTrainer``): ``AgentLoopWorker._postprocess`` writes
  the score into the padded ``rm_scores`` at ``attention_mask[:, P:].sum(1) - 1``.
- colocated reward model (0.9.x alternate settings): ``RewardManagerBase
  .assemble_rm_scores`` on the padded batch, then the v1 trainer's
  ``_compute_reward_colocate`` keeps each row's first ``L_i`` positions (its slice, repeated
  here: that method needs the TransferQueue).

verl reads the response length from the response tokens (attention mask), so the contract's
``response_mask`` (1 up to L_i) is the response; ``loss_mask`` becomes verl's
``response_mask`` (0 on tool tokens), which the placement does not read.
"""

from __future__ import annotations

import torch

from rlconform.adapters.verl.imports import import_verl_module


def _lengths(response_mask: torch.Tensor) -> list[int]:
    return [int(n) for n in response_mask.sum(-1).tolist()]


def _padded(rows: list[torch.Tensor], like: torch.Tensor) -> torch.Tensor:
    out = torch.zeros(like.shape, dtype=torch.float32, device=like.device)
    for i, row in enumerate(rows):
        out[i, : row.numel()] = row
    return out


class RewardOps:
    """`reward` operations through the trainer's reward placement."""

    def place_reward_last(
        self, scores: torch.Tensor, response_mask: torch.Tensor, loss_mask: torch.Tensor
    ) -> torch.Tensor:
        """reward.place_last: see the module docstring."""
        if self.settings.colocated_reward and self.release.colocated_reward:
            placed = self._colocated(scores, response_mask)
        elif self.release.reward_path == "agent_loop_output":
            placed = self._agent_loop_output(scores, response_mask, loss_mask)
        else:
            placed = self._agent_loop_postprocess(scores, response_mask, loss_mask)
        return placed.to(scores.dtype)

    def _agent_loop_output(
        self, scores: torch.Tensor, response_mask: torch.Tensor, loss_mask: torch.Tensor
    ) -> torch.Tensor:
        agent_loop = import_verl_module("verl.experimental.agent_loop.agent_loop")
        rows = []
        for i, n in enumerate(_lengths(response_mask)):
            output = agent_loop.AgentLoopOutput(
                prompt_ids=[1],
                response_ids=[0] * n,
                response_mask=[int(m) for m in loss_mask[i, :n].tolist()],
                reward_score=float(scores[i]),
                metrics=agent_loop.AgentLoopMetrics(),
            )
            rows.append(output.as_dict()["rm_scores"])
        return _padded(rows, response_mask)

    def _agent_loop_postprocess(
        self, scores: torch.Tensor, response_mask: torch.Tensor, loss_mask: torch.Tensor
    ) -> torch.Tensor:
        from verl.utils.model import compute_position_id_with_mask

        agent_loop = import_verl_module("verl.experimental.agent_loop.agent_loop")
        worker = object.__new__(agent_loop.AgentLoopWorker)
        worker.reward_loop_worker_handles = None
        span = response_mask.to(torch.int64)
        inputs = []
        for i in range(scores.shape[0]):
            prompt = torch.ones((1, 1), dtype=torch.int64, device=span.device)
            attention_mask = torch.cat([prompt, span[i : i + 1]], dim=-1)
            inputs.append(
                agent_loop._InternalAgentLoopOutput(
                    prompt_ids=prompt,
                    response_ids=torch.zeros_like(span[i : i + 1]),
                    input_ids=torch.cat([prompt, torch.zeros_like(span[i : i + 1])], dim=-1),
                    position_ids=compute_position_id_with_mask(attention_mask),
                    response_mask=loss_mask[i : i + 1].to(torch.int64),
                    attention_mask=attention_mask,
                    reward_score=float(scores[i]),
                    num_turns=2,
                    metrics=agent_loop.AgentLoopMetrics(),
                    extra_fields={},
                )
            )
        return worker._postprocess(inputs).batch["rm_scores"]

    def _colocated(self, scores: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
        from verl import DataProto

        base = import_verl_module("verl.experimental.reward_loop.reward_manager.base")
        rows = response_mask.shape[0]
        prompt = torch.ones((rows, 1), dtype=torch.int64, device=response_mask.device)
        data = DataProto.from_dict(
            tensors={
                "prompts": prompt,
                "responses": torch.zeros_like(response_mask, dtype=torch.int64),
                "attention_mask": torch.cat([prompt, response_mask.to(torch.int64)], dim=-1),
            }
        )
        placed = base.RewardManagerBase.assemble_rm_scores(data, scores.tolist())
        kept = [placed[i, :n] for i, n in enumerate(_lengths(response_mask))]
        return _padded(kept, response_mask)

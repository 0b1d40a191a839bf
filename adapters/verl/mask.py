"""verl bindings for the CONTRACT area `mask`: the trainer's ``compute_response_mask`` and
``masked_mean``.

``torch_functional.get_response_mask`` (EOS-based masks) is called only by the HF rollout
(``workers/rollout/hf_rollout.py``), which neither trainer's rollout registry reaches: the
agent loop builds ``response_mask`` from the rollout server's token ids instead. It is not
bound, so ``mask.response_from_eos`` is skipped.
"""

from __future__ import annotations

import torch

from rlconform.adapters.verl.imports import import_verl_module


class MaskOps:
    """`mask` operations through verl's torch_functional and trainer helpers."""

    def response_mask_from_attention(
        self, attention_mask: torch.Tensor, response_width: int
    ) -> torch.Tensor:
        """mask.response_from_attention: ``ray_trainer.compute_response_mask`` on a DataProto
        whose ``responses`` are ``response_width`` wide."""
        from verl import DataProto

        trainer = import_verl_module("verl.trainer.ppo.ray_trainer")
        rows = attention_mask.shape[0]
        data = DataProto.from_dict(
            tensors={
                "responses": torch.zeros(
                    (rows, response_width), dtype=torch.int64, device=attention_mask.device
                ),
                "attention_mask": attention_mask,
            }
        )
        return trainer.compute_response_mask(data)

    def masked_mean(self, values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """mask.loss: ``verl.utils.torch_functional.masked_mean`` over the whole batch."""
        from verl.utils.torch_functional import masked_mean

        return masked_mean(values, mask)

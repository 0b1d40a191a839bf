"""verl bindings for the CONTRACT areas `logprob` and `entropy`: ``torch_functional`` and
``compute_entropy_loss``."""

from __future__ import annotations

import torch


class LogprobOps:
    """`logprob` and `entropy` operations through verl's helpers."""

    def response_logprobs(
        self,
        logits: torch.Tensor,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        response_width: int,
        temperature: float = 1.0,
    ) -> torch.Tensor:
        """logprob.alignment: the engine's remove-padding path.

        As verl's FSDP engine does: keep the real tokens (attention mask 1) of the padded
        batch, divide their logits by the temperature, label each token with the next one
        (``torch.roll`` by -1), ``logprobs_from_logits``, then ``no_padding_2_padding`` cuts
        each response back out (left-shifted by one token) and right-pads it.
        """
        from tensordict import TensorDict
        from verl.utils.torch_functional import logprobs_from_logits
        from verl.workers.utils.padding import no_padding_2_padding

        real = attention_mask.bool()
        labels = torch.roll(input_ids[real], shifts=-1, dims=0)
        logprobs = logprobs_from_logits(logits=logits[real] / temperature, labels=labels)
        prompt_width = input_ids.shape[1] - response_width
        data = TensorDict(
            {
                "prompts": input_ids[:, :prompt_width],
                "responses": input_ids[:, prompt_width:],
                "attention_mask": attention_mask,
            },
            batch_size=[input_ids.shape[0]],
        )
        return no_padding_2_padding(logprobs, data)

    def sampling_logprobs(
        self,
        logits: torch.Tensor,
        responses: torch.Tensor,
        response_mask: torch.Tensor,
        temperature: float = 1.0,
        top_k: int = -1,
        top_p: float = 1.0,
    ) -> torch.Tensor:
        """logprob.sampling_distribution: the actor's ``post_process_logits`` (given top_k and
        top_p) then ``logprobs_from_logits`` on the response tokens (response mask 1), padded
        back with 0 as ``no_padding_2_padding`` does.

        ``post_process_logits`` divides in place, as on the model's own fresh output in verl's
        actor; here it gets a copy of the selected rows, so the caller's logits stay intact.
        """
        from verl.utils.torch_functional import logprobs_from_logits, post_process_logits

        real = response_mask.bool()
        scaled = post_process_logits(
            responses[real], logits[real].clone(), temperature, top_k, top_p
        )
        logprobs = logprobs_from_logits(logits=scaled, labels=responses[real])
        out = torch.zeros(responses.shape, dtype=logprobs.dtype, device=logprobs.device)
        out[real] = logprobs
        return out

    def entropy_from_logits(self, logits: torch.Tensor) -> torch.Tensor:
        """entropy.from_logits: ``verl.utils.torch_functional.entropy_from_logits``."""
        from verl.utils.torch_functional import entropy_from_logits

        return entropy_from_logits(logits)

    def entropy_mean(self, logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """entropy.from_logits: ``core_algos.compute_entropy_loss`` in token-mean mode."""
        from verl.trainer.ppo.core_algos import compute_entropy_loss

        return compute_entropy_loss(logits, mask, loss_agg_mode="token-mean")

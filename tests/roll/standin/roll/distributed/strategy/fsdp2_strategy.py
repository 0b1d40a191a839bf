"""Stand-in for ``roll.distributed.strategy.fsdp2_strategy``: the strategy's log-prob and
entropy ops (ROLL's signatures: (B, L, V) logits of prompt+response rows, the (B, L)
response mask as ``attention_mask``, (B, L - 1) outputs where column t scores token t + 1),
zero outside the response whatever the logits hold there."""

import torch

from roll.utils.functionals import entropy_from_logits, log_probs_from_logits


class FSDP2InferStrategy:
    def op_compute_log_probs(self, logits, input_ids, attention_mask):
        inside = attention_mask[:, 1:].bool()
        labels = torch.where(inside, input_ids[:, 1:], torch.zeros_like(input_ids[:, 1:]))
        log_probs = log_probs_from_logits(logits[:, :-1], labels)
        return torch.where(inside, log_probs, torch.zeros_like(log_probs))

    def op_compute_entropy(self, logits, attention_mask):
        inside = attention_mask[:, 1:].bool()
        entropy = entropy_from_logits(logits)[:, :-1]
        return torch.where(inside, entropy, torch.zeros_like(entropy))

"""loss.sapo at a log-ratio beyond float32 exp's range, as a correct implementation gives it
(torchref): the reference the frameworks' by-hand reproductions of the unclamped-ratio
finding compare with."""

from __future__ import annotations

import torch

from rlconform.adapters.torchref import TorchRef

OLD, LOGP = -100.0, -0.5  # log-ratio 99.5: exp overflows float32


def contract_loss_and_gradient() -> tuple[float, float]:
    """(per-token loss, its gradient) of one action token with A = 1, tau_pos 1, tau_neg 1.05:
    the clamp saturates the gate, -4A/tau = -4, and the gradient is 0."""
    current = torch.tensor([[LOGP]], requires_grad=True)
    per_token, _ = TorchRef().sapo_loss(
        torch.tensor([[OLD]]),
        current,
        torch.tensor([[1.0]]),
        torch.tensor([[1]]),
        tau_pos=1.0,
        tau_neg=1.05,
    )
    (grad,) = torch.autograd.grad(per_token.sum(), current)
    return float(per_token[0, 0]), float(grad[0, 0])

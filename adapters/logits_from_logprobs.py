"""Two-token logits whose log-softmax is a given log-prob, for trainers that take logits.

Some trainers derive the current log-probs themselves, from logits (slime's
``get_log_probs_and_entropy``) or from hidden states and the LM head (the Liger fused GRPO
loss TRL's ``use_liger_kernel`` path runs). The step and loss bindings of such a trainer
hand it logits built as a differentiable function of the harness's log-prob leaf ``lp``: a
vocabulary of two tokens, ``z = (lp, log(1 - exp(lp)))`` for (the chosen token, the other
one). The log-sum-exp of ``z`` is 0 whatever ``lp`` is, so ``log_softmax(z)[chosen] = lp``
and the chain rule returns the trainer's gradient to the leaf unchanged.

- an action token's log-prob must be a log-probability with a usable gradient: one at or
  above ``-1e-30`` (probability 1 in float32, where log-softmax has no gradient) or above 0
  is ``Inexpressible``;
- elsewhere (tool tokens, padding) a finite value that is no log-probability gets the
  logits of probability 1/2 and no gradient path (a correct trainer ignores the token);
  NaN or infinite values become NaN logits, as a broken model's would.

Used by the `step` bindings of ``adapters/slime/step.py`` and ``adapters/trl_liger``.
"""

from __future__ import annotations

import torch

from rlconform.adapters.base import Inexpressible

#: a log-prob at or above this is probability 1 in float32: log-softmax has no gradient there
LOGPROB_CEILING = -1e-30
_LOG_HALF = -0.6931471805599453


def two_token_logits(
    lp: torch.Tensor, action: torch.Tensor, *, framework: str, sample: int | None = None
) -> torch.Tensor:
    """``(*lp.shape, 2)``: the logits (chosen token, other token) of every position of
    ``lp``; ``action`` (same shape, bool) marks the positions whose value must be met.
    ``sample`` names the row in an error when ``lp`` is one sample's row."""
    action = action.bool()
    bad_action = action & ~(lp < LOGPROB_CEILING)
    if bool(bad_action.any()):
        where = [int(i) for i in bad_action.nonzero()[0]]
        if sample is not None:
            where = [sample, *where]
        position = (
            f"sample {where[0]}, token {where[1]}" if len(where) == 2 else f"position {where}"
        )
        value = float(lp.detach()[tuple(where[-lp.dim() :])])
        raise Inexpressible(
            f"{position}: log-prob {value!r} at an action token has no logits with a gradient "
            f"({framework} derives log-probs from float32 logits; probability 1 or more)"
        )
    usable = lp < LOGPROB_CEILING
    finite_junk = ~usable & torch.isfinite(lp)
    safe = torch.where(usable, lp, torch.full_like(lp, -0.5))
    other = torch.log(-torch.expm1(safe))
    half = torch.full_like(lp, _LOG_HALF) + 0 * lp
    chosen = torch.where(finite_junk, half, lp)
    rest = torch.where(usable, other, torch.where(finite_junk, half, lp))
    return torch.stack([chosen, rest], dim=-1)

"""Broken torchref operations for the step clauses and consequence (CONTRACT §0b): each
replacement delegates to torchref and breaks one thing."""

from __future__ import annotations

import torch

from rlconform.adapters.base import with_overrides
from rlconform.adapters.torchref import TorchRef


def grpo_scaled(orig, rewards, mask, index, epsilon=1e-6, norm_by_std=True):
    """Advantages 1.5x on every action token: the update changes (stage advantages)."""
    adv, ret = orig.advantage_grpo(rewards, mask, index, epsilon=epsilon, norm_by_std=norm_by_std)
    return adv * 1.5, ret * 1.5


def grpo_padding(orig, rewards, mask, index, epsilon=1e-6, norm_by_std=True):
    """Advantage 3.0 at every non-action position; the policy loss masks it away."""
    adv, ret = orig.advantage_grpo(rewards, mask, index, epsilon=epsilon, norm_by_std=norm_by_std)
    return torch.where(mask.bool(), adv, torch.full_like(adv, 3.0)), ret


def opo_shifted(orig, *args, **kwargs):
    """OPO advantages + 1: no torchref config runs OPO."""
    adv, ret = orig.advantage_opo(*args, **kwargs)
    return adv + 1.0, ret


def controller_nan(orig, kind, value, current_kl, n_steps, target_kl, horizon):
    """The KL coefficient turns NaN after a step whose KL is 0 (a batch with no action token)."""
    if current_kl == 0:
        return float("nan")
    return orig.kl_controller_update(kind, value, current_kl, n_steps, target_kl, horizon)


def clipfrac_zero(orig, *args, **kwargs):
    """The logged clip fraction is always 0; the loss is right."""
    loss, metrics = orig.ppo_clip_loss(*args, **kwargs)
    return loss, {"clipfrac": metrics["clipfrac"] * 0}


def sapo_swapped(orig, old, logp, adv, mask, *, tau_pos, tau_neg):
    """loss.sapo's temperatures swapped by the advantage's sign: the update changes."""
    return orig.sapo_loss(old, logp, adv, mask, tau_pos=tau_neg, tau_neg=tau_pos)


def agg_local(
    orig,
    loss_mat,
    loss_mask,
    mode,
    dp_size=1,
    batch_num_tokens=None,
    global_batch_size=None,
    loss_scale_factor=None,
):
    """Each micro-batch divides by its own token count (the global denominator is dropped)."""
    return orig.agg_loss(
        loss_mat, loss_mask, mode, dp_size=dp_size, loss_scale_factor=loss_scale_factor
    )


def entropy_over_response(orig, batch, config, state=None):
    """The entropy bonus taken over every response token (response_mask), not the action
    tokens: the step back-propagates a gradient into the entropies of tool tokens."""
    output = orig.train_step(batch, config, state)
    holes = (batch.response_mask.bool() & ~batch.loss_mask.bool()).to(batch.entropy.dtype)
    leak = -1e-2 * (torch.nan_to_num(batch.entropy, nan=0.0, posinf=0.0, neginf=0.0) * holes).sum()
    leak.backward()
    return output


def mutant(name: str, **ops):
    return with_overrides(TorchRef(), name, **ops)


def loss_scaled_under_dr_grpo(orig, batch, config, state=None):
    """Under config ``dr_grpo`` only, the back-propagated loss is doubled (a second backward
    of the same loss): the update changes there and nowhere else."""
    output = orig.train_step(batch, config, state)
    if config.name == "dr_grpo":
        for leaf in (batch.log_probs, batch.entropy):
            if leaf.grad is not None:
                leaf.grad.mul_(2.0)
        output.loss = 2.0 * output.loss
    return output


def entropy_mean_per_micro_batch(orig, batch, config, state=None):
    """The logged mean entropy (``entropy/mean``) averaged over micro-batches instead of
    over the step's action tokens; the update is right."""
    output = orig.train_step(batch, config, state)
    means = []
    for rows in batch.micro_batches:
        index = torch.tensor(rows, dtype=torch.long)
        m = batch.loss_mask.index_select(0, index)
        ent = batch.entropy.detach().index_select(0, index)
        means.append(float((ent * m).sum() / m.sum().clamp(min=1.0)))
    output.metrics["entropy/mean"] = sum(means) / len(means)
    return output


def kl_mean_doubled(orig, batch, config, state=None):
    """The logged mean KL (``kl_loss/mean``) doubled; the update is right."""
    output = orig.train_step(batch, config, state)
    if "kl_loss/mean" in output.metrics:
        output.metrics["kl_loss/mean"] *= 2.0
    return output


def doubled_under_two_configs(orig, batch, config, state=None):
    """The reported loss off by 1 under ``dr_grpo`` (on every case: a declared break in the
    test) and, differently, the entropy gradient zeroed under ``rloo_kl_loss`` (a new one)."""
    output = orig.train_step(batch, config, state)
    if config.name == "dr_grpo":
        output.loss = float(output.loss) + 1.0
    if config.name == "rloo_kl_loss" and batch.entropy.grad is not None:
        batch.entropy.grad.zero_()
    return output


def inexpressible_under_default_doubled_under_dr_grpo(orig, batch, config, state=None):
    """Refuses every case under ``default`` (Inexpressible) and doubles the loss under
    ``dr_grpo``: the refusal under one config must not skip the case under the others."""
    from rlconform.adapters.base import Inexpressible

    if config.name == "default":
        raise Inexpressible("this plant's default config takes no case")
    return loss_scaled_under_dr_grpo(orig, batch, config, state)


def agg_seq_mean_token_sum_doubled(orig, loss_mat, loss_mask, mode, **global_batch_info):
    """seq-mean-token-sum doubled; every other mode right."""
    value = orig.agg_loss(loss_mat, loss_mask, mode, **global_batch_info)
    return 2 * value if mode == "seq-mean-token-sum" else value


def value_loss_doubled(orig, *args, **kwargs):
    """The critic's loss doubled (a break of value_loss, not of any aggregation mode)."""
    loss, *rest = orig.value_loss(*args, **kwargs)
    return (2 * loss, *rest)


class InPlaceController:
    """A KL controller that updates itself in place, as verl's AdaptiveKLController does."""

    def __init__(self, value: float) -> None:
        self.value = value


def controller_in_place(orig, batch, config, state=None):
    """Right, but carries its KL coefficient in a controller object it mutates in place and
    hands back as ``carry``: a step called twice on the same carried state must not see the
    first call's update (a harness that passes the same object twice grades it 'state')."""
    controller = state if isinstance(state, InPlaceController) else None
    inner = {"kl_coef": controller.value} if controller is not None else None
    output = orig.train_step(batch, config, inner)
    if controller is None:
        controller = InPlaceController(output.state["kl_coef"])
    controller.value = output.state["kl_coef"]
    output.carry = controller
    return output


def nan_loss_when_no_action_token(orig, batch, config, state=None):
    """On a mini-batch without an action token the back-propagated loss is NaN (a token
    mean 0 / 0) while its gradient stays exactly 0: only the loss value differs."""
    output = orig.train_step(batch, config, state)
    if not bool(batch.loss_mask.any()):
        output.loss = torch.tensor(float("nan"))
    return output


def nan_loss_and_gradient_when_no_action_token(orig, batch, config, state=None):
    """As above, and the log-prob gradient is NaN too: the update changes."""
    output = nan_loss_when_no_action_token(orig, batch, config, state)
    if not bool(batch.loss_mask.any()):
        leaf = batch.log_probs
        if leaf.grad is None:
            leaf.grad = torch.zeros_like(leaf)
        leaf.grad.fill_(float("nan"))
    return output


def raises_under_dr_grpo(orig, batch, config, state=None):
    """The step raises under config ``dr_grpo`` only (a crash one config meets)."""
    if config.name == "dr_grpo":
        raise RuntimeError("planted: the dr_grpo step raises")
    return orig.train_step(batch, config, state)


def rloo_raises(orig, token_level_rewards, response_mask, index, *args, **kwargs):
    """adv.rloo raises on every input: a crash of an operation one config runs."""
    raise RuntimeError("planted: advantage_rloo raises")


def nan_loss_at_padding(orig, batch, config, state=None):
    """A non-finite log-prob anywhere in the batch (padding, mask-0 tokens) makes the
    back-propagated loss NaN (0 * NaN in a masked sum) while every gradient stays the
    contract's: only the logged loss differs."""
    output = orig.train_step(batch, config, state)
    if not bool(torch.isfinite(batch.log_probs.detach()).all()):
        output.loss = torch.tensor(float("nan"))
    return output


def nan_loss_at_padding_beside_a_gradient_shifted_under_dr_grpo(orig, batch, config, state=None):
    """``nan_loss_at_padding``, and under ``dr_grpo`` a second, separate break: 0.1 added
    to the log-prob gradient of every action token of every batch (a finite update change
    the non-finite input has nothing to do with)."""
    output = nan_loss_at_padding(orig, batch, config, state)
    if config.name == "dr_grpo":
        leaf = batch.log_probs
        if leaf.grad is None:
            leaf.grad = torch.zeros_like(leaf)
        leaf.grad.add_(0.1 * batch.loss_mask.to(leaf.dtype))
    return output


def nan_loss_and_gradient_at_padding(orig, batch, config, state=None):
    """``nan_loss_at_padding``, and the NaN reaches the log-prob gradient: the update
    changes."""
    output = nan_loss_at_padding(orig, batch, config, state)
    if not bool(torch.isfinite(batch.log_probs.detach()).all()):
        leaf = batch.log_probs
        if leaf.grad is None:
            leaf.grad = torch.zeros_like(leaf)
        leaf.grad.fill_(float("nan"))
    return output


def advantages_lost_on_rows_with_a_hole(orig, batch, config, state=None):
    """A break between operations: every sample with a tool token (a loss-mask hole) reports
    advantage 0 at the stage ``advantages`` (its score placed where the estimator carries
    nothing from), whatever each operation does on its own."""
    output = orig.train_step(batch, config, state)
    holes = (batch.response_mask.bool() & ~batch.loss_mask.bool()).any(dim=1, keepdim=True)
    if "advantages" in output.stages:
        adv = output.stages["advantages"]
        output.stages["advantages"] = torch.where(holes, torch.zeros_like(adv), adv)
    return output


def logprob_gap_shifted(orig, *args, **kwargs):
    """The logged train/rollout log-prob gap + 0.5 (a metric only); no torchref config runs
    it."""
    return orig.logprob_gap(*args, **kwargs) + 0.5

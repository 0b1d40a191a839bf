"""Stand-in ``slime.backends.megatron_utils.loss``: the functions the adapter binds."""

import torch

from slime.backends.megatron_utils.cp_utils import get_sum_of_sample_mean
from slime.utils.ppo_utils import (
    calculate_log_probs_and_entropy,
    compute_approx_kl,
    get_advantages_and_returns_batch,
)


def _response_rows(logits, total_lengths, response_lengths):
    """Per sample, the logits rows that predict its response tokens (row p - 1 for p)."""
    rows, end = [], 0
    for total, response in zip(total_lengths, response_lengths):
        end += total
        start = end - response
        rows.append(logits[start - 1 : end - 1] if response else logits[:0])
    return rows


def get_log_probs_and_entropy(
    logits,
    *,
    args,
    unconcat_tokens,
    total_lengths,
    response_lengths,
    with_entropy=False,
    non_loss_data=True,
    top_p_token_ids=None,
    top_p_token_offsets=None,
):
    logits = logits.squeeze(0) / args.rollout_temperature
    log_probs, entropies = [], []
    rows = _response_rows(logits, total_lengths, response_lengths)
    for i, (row, tokens, n) in enumerate(zip(rows, unconcat_tokens, response_lengths)):
        targets = tokens[len(tokens) - n :]
        keep = None
        if top_p_token_ids is not None:
            keep = torch.zeros_like(row, dtype=torch.bool)
            ids, offsets = list(top_p_token_ids[i]), list(top_p_token_offsets[i])
            for j in range(n):
                keep[j, ids[offsets[j] : offsets[j + 1]]] = True
        lp, ent = calculate_log_probs_and_entropy(
            row, targets, None, with_entropy=with_entropy, log_prob_keep_mask=keep
        )
        log_probs.append(lp.reshape(-1))
        entropies.append(ent)
    result = {"log_probs": log_probs}
    if with_entropy:
        result["entropy"] = entropies
    return torch.empty(0), result


def _weights(args, train_log_probs, rollout_log_probs, loss_masks, reject):
    masks = torch.cat(loss_masks).bool() if loss_masks else torch.zeros(0, dtype=torch.bool)
    old = torch.cat(train_log_probs) if train_log_probs else torch.zeros(0)
    rollout = torch.cat(rollout_log_probs) if rollout_log_probs else torch.zeros(0)
    log_ratio = torch.where(masks, old - rollout, torch.zeros_like(old))
    ratio = torch.exp(log_ratio)
    if reject:
        inside = (ratio >= args.tis_clip_low) & (ratio <= args.tis_clip)
        weights = torch.where(inside, ratio, torch.zeros_like(ratio))
    else:
        weights = ratio.clamp(args.tis_clip_low, args.tis_clip)
    return torch.where(masks, weights, torch.zeros_like(weights))


def vanilla_tis_function(
    args, *, pg_loss, train_log_probs, rollout_log_probs, loss_masks, **kwargs
):
    weights = _weights(args, train_log_probs, rollout_log_probs, loss_masks, reject=False)
    return pg_loss * weights, loss_masks, {}


def icepop_function(args, *, pg_loss, train_log_probs, rollout_log_probs, loss_masks, **kwargs):
    weights = _weights(args, train_log_probs, rollout_log_probs, loss_masks, reject=True)
    return pg_loss * weights, loss_masks, {}


def value_loss_function(args, batch, logits, sum_of_sample_mean):
    rows = _response_rows(logits.squeeze(0), batch["total_lengths"], batch["response_lengths"])
    values = torch.cat([r.reshape(-1) for r in rows]) if rows else logits.new_zeros(0)
    old = torch.cat(batch["values"]) if batch["values"] else values.new_zeros(0)
    returns = torch.cat(batch["returns"]) if batch["returns"] else values.new_zeros(0)
    clipped_v = torch.maximum(torch.minimum(values, old + args.value_clip), old - args.value_clip)
    plain, clipped = (values - returns) ** 2, (clipped_v - returns) ** 2
    loss = sum_of_sample_mean(torch.maximum(plain, clipped))
    clipfrac = sum_of_sample_mean((clipped > plain).float())
    return loss, {"value_loss": loss.detach(), "value_clipfrac": clipfrac.detach()}


def compute_advantages_and_returns(args, rollout_data):
    """The ``ppo`` estimator only: token rewards -kl_coef * kl on action tokens (the
    contract's KL in reward) plus the reward on the last response token, then GAE."""
    assert args.advantage_estimator == "ppo"
    kl = [
        compute_approx_kl(lp, ref, kl_loss_type=args.kl_loss_type)
        for lp, ref in zip(rollout_data["log_probs"], rollout_data["ref_log_probs"])
    ]
    rewards = []
    for reward, row, mask in zip(rollout_data["rewards"], kl, rollout_data["loss_masks"]):
        token = torch.where(mask.bool(), -args.kl_coef * row, torch.zeros_like(row))
        token[-1] += reward
        rewards.append(token)
    rollout_data["kl"] = kl
    advantages, returns = get_advantages_and_returns_batch(
        rollout_data["total_lengths"],
        rollout_data["response_lengths"],
        rollout_data["values"],
        rewards,
        args.gamma,
        args.lambd,
    )
    rollout_data["advantages"], rollout_data["returns"] = advantages, returns


def policy_loss_function(args, batch, logits, sum_of_sample_mean):
    """Only the metric the adapter reads: train_rollout_logprob_abs_diff."""
    old = torch.cat(batch["log_probs"]) if batch["log_probs"] else logits.new_zeros(0)
    rollout = torch.cat(batch["rollout_log_probs"]) if batch["log_probs"] else old
    gap = sum_of_sample_mean((old - rollout).abs())
    loss = 0 * logits.sum()
    return loss, {"loss": loss.detach(), "train_rollout_logprob_abs_diff": gap.detach()}


def loss_function(args, batch, num_microbatches, step_global_batch_size, logits):
    """The custom loss through the reducer, scaled as the contract's aggregation asks."""
    import importlib

    masks = batch["loss_masks"]
    reducer = get_sum_of_sample_mean(
        batch["total_lengths"],
        batch["response_lengths"],
        masks,
        batch["rollout_mask_sums"],
        args.calculate_per_token_loss,
    )
    if args.loss_type == "policy_loss":
        func = policy_loss_function
    else:
        module, _, name = args.custom_loss_function_path.rpartition(".")
        func = getattr(importlib.import_module(module), name)
    loss, log = func(args, batch, logits, reducer)
    tokens = sum(int(m.sum()) for m in masks)
    head = [float(tokens) if args.calculate_per_token_loss else 0.0]
    log = {"keys": list(log), "values": torch.tensor(head + [float(v) for v in log.values()])}
    if args.calculate_per_token_loss:
        return loss, torch.tensor(tokens), log
    return loss * num_microbatches / max(step_global_batch_size, 1), torch.tensor(1), log

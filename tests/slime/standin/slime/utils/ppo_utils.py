"""Stand-in ``slime.utils.ppo_utils``: slime's names and signatures, contract math.

Not slime's code: each function computes what the postprocess contract asks under slime's
profile (no log-ratio clamp in KL, low_var_kl clamped to +-10), so that a certification
through the adapter passes exactly when the adapter's wiring is right.
"""

import torch

from rlconform.oracle import advantage as oracle

_LOG_RATIO_CLAMP = 20.0


def compute_approx_kl(log_probs, log_probs_base, kl_loss_type, importance_ratio=None):
    """In float64 (exp stays finite up to a log-ratio of 700), returned as float32."""
    diff = log_probs.double() - log_probs_base.double()
    if kl_loss_type == "k1":
        kl = diff
    elif kl_loss_type == "k2":
        kl = 0.5 * diff * diff
    elif kl_loss_type in ("k3", "low_var_kl"):
        x = -diff
        kl = torch.expm1(x.clamp(max=700.0)) - x  # beyond 700 the +-10 clamp decides
    else:
        raise ValueError(f"Unknown kl_loss_type: {kl_loss_type}")
    if importance_ratio is not None:
        kl = importance_ratio.double() * kl
    if kl_loss_type == "low_var_kl":
        kl = kl.clamp(-10.0, 10.0)
    return kl.float()


def compute_policy_loss(ppo_kl, advantages, eps_clip, eps_clip_high, eps_clip_c=None):
    ratio = torch.exp((-ppo_kl).clamp(-_LOG_RATIO_CLAMP, _LOG_RATIO_CLAMP))
    plain = -advantages * ratio
    clipped = -advantages * ratio.clamp(1 - eps_clip, 1 + eps_clip_high)
    loss = torch.maximum(plain, clipped)
    if eps_clip_c is not None:
        loss = torch.where(advantages < 0, torch.minimum(loss, -eps_clip_c * advantages), loss)
    return loss, (clipped > plain).float()


def compute_cispo_loss(ppo_kl, log_probs, advantages, eps_clip, eps_clip_high):
    ratio = torch.exp((-ppo_kl).clamp(-_LOG_RATIO_CLAMP, _LOG_RATIO_CLAMP)).detach()
    weight = ratio.clamp(1 - eps_clip, 1 + eps_clip_high)
    return -weight * advantages * log_probs, (weight != ratio).float()


def _masked_seq_mean(x, mask):
    keep = mask.bool()
    return torch.where(keep, x, torch.zeros_like(x)).sum() / keep.sum().clamp(min=1)


def compute_opsm_mask(args, full_log_probs, full_old_log_probs, advantages, loss_masks):
    rows, dropped = [], torch.tensor(0.0)
    for new, old, adv, mask in zip(full_log_probs, full_old_log_probs, advantages, loss_masks):
        keep = mask.bool()
        seq_kl = _masked_seq_mean(old - new, mask)
        drop = keep & (adv.detach() < 0) & (seq_kl > args.opsm_delta)
        dropped = dropped + drop.any().float()
        rows.append((keep & ~drop).to(new.dtype))
    flat = torch.cat(rows) if rows else torch.zeros(0)
    return flat, dropped


def compute_gspo_kl(full_log_probs, full_old_log_probs, local_log_probs, loss_masks):
    """-(log-ratio) per token: the sequence mean value carried with the token's gradient."""
    out = []
    for new, old, local, mask in zip(
        full_log_probs, full_old_log_probs, local_log_probs, loss_masks
    ):
        sequence = _masked_seq_mean(new - old, mask).detach()
        out.append(-(local - local.detach() + sequence))
    return torch.cat(out) if out else torch.zeros(0)


def get_grpo_returns(rewards, kl):
    return [torch.ones_like(kl[i]) * rewards[i] for i in range(len(rewards))]


def get_reinforce_plus_plus_returns(
    rewards, kl, loss_masks, response_lengths, total_lengths, kl_coef, gamma
):
    out = []
    for i in range(len(rewards)):
        mask = loss_masks[i].tolist()
        token = [(-kl_coef * float(k) if m else 0.0) for k, m in zip(kl[i].tolist(), mask)]
        actions = [t for t, m in enumerate(mask) if m]
        if actions:
            token[actions[-1]] += float(rewards[i])
        _, returns = oracle.reinforce_pp([token], [mask], gamma=gamma, discount_at_holes=True)
        out.append(torch.tensor(returns[0], dtype=kl[i].dtype, device=kl[i].device))
    return out


def get_reinforce_plus_plus_baseline_advantages(rewards, kl, loss_masks, kl_coef):
    return [
        torch.where(m.bool(), torch.ones_like(k) * r - kl_coef * k, torch.zeros_like(k))
        for k, r, m in zip(kl, rewards, loss_masks)
    ]


def get_advantages_and_returns_batch(
    total_lengths, response_lengths, values_list, rewards_list, gamma, lambd, chunked=True
):
    """GAE over every response token (slime's signature carries no loss mask)."""
    advantages, returns = [], []
    for values, rewards in zip(values_list, rewards_list):
        adv, ret = _plain_gae(rewards.tolist(), values.tolist(), gamma, lambd)
        advantages.append(torch.tensor(adv, dtype=values.dtype))
        returns.append(torch.tensor(ret, dtype=values.dtype))
    return advantages, returns


def _plain_gae(rewards, values, gamma, lambd):
    """The oracle's GAE on an all-action row (terminated): returns, and A = returns - V."""
    _, returns = oracle.gae(
        [rewards], [values], [[1] * len(values)], [True], [0.0], gamma=gamma, lam=lambd
    )
    return [g - v for g, v in zip(returns[0], values)], returns[0]


def calculate_log_probs_and_entropy(
    logits,
    tokens,
    tp_group,
    with_entropy=False,
    chunk_size=-1,
    log_prob_keep_mask=None,
    with_entropy_grad=True,
):
    logits = logits.float()
    entropy = None
    if with_entropy:
        logp_all = torch.log_softmax(logits, dim=-1)
        entropy = -(logp_all.exp() * logp_all).nan_to_num().sum(-1)
    if logits.shape[0] == 0:
        return logits.new_zeros((0,)), entropy
    masked = logits
    if log_prob_keep_mask is not None:
        keep = log_prob_keep_mask.clone()
        keep[torch.arange(len(tokens)), tokens] = True
        masked = logits.masked_fill(~keep, float("-inf"))
    log_prob = torch.log_softmax(masked, dim=-1).gather(-1, tokens.long().unsqueeze(-1))
    return log_prob, entropy

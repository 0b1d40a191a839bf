"""Stand-in for ``roll.utils.functionals``: ROLL's function names and signatures, with the
math delegated to rlconform's torchref configured with the ROLL adapter's profile.

Inputs arrive in ROLL's layout ((B, L) sequences, (B, L - 1) per-token grids); torchref's
operations are width-agnostic, so the stand-in passes the grids straight through.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from rlconform.adapters.roll.manifest import PROFILE
from rlconform.adapters.torchref import TorchRef
from roll.configs.base_config import PPOConfig  # noqa: F401 - imported as ROLL does
from roll.pipeline.rlvr.rlvr_config import RLVRConfig  # noqa: F401

_REF = TorchRef()
_REF.profile = PROFILE
# KL with the contract's input clamp of (ref - logp) at 20: under the k3 value clamp of 10
# it changes no value, and it keeps torchref's exp (and its gradient) finite.
_KL = TorchRef()
_KL.profile = dataclasses.replace(PROFILE, kl_ref_clamp=20.0)


def masked_mean(tensor, mask, dim=None):
    selected = mask.bool()
    values = torch.where(selected, tensor, torch.zeros_like(tensor))
    if dim is None:
        return values.sum() / selected.sum().clamp(min=1)
    return values.sum(dim) / selected.sum(dim).clamp(min=1)


def get_eos_mask(response_id, eos_token=2, dtype=torch.int64):
    return _REF.response_mask_from_eos(response_id, eos_token).to(dtype)


def entropy_from_logits(logits):
    return _REF.entropy_from_logits(logits)


def compute_approx_kl(log_probs, log_probs_base, action_mask=None, kl_penalty="kl"):
    if not hasattr(_KL, "kl_penalty"):
        raise NotImplementedError("torchref has no kl_penalty yet")
    kl = _KL.kl_penalty(log_probs, log_probs_base, kl_penalty)
    if action_mask is None:
        return kl
    return torch.where(action_mask.bool(), kl, torch.zeros_like(kl))


def agg_loss(
    loss_mat,
    loss_mask,
    loss_agg_mode,
    batch_num_tokens=None,
    global_valid_samples=None,
    weights=None,
):
    norm = loss_mask.shape[-1] if loss_agg_mode == "seq-mean-token-sum-norm" else None
    return _REF.agg_loss(
        loss_mat,
        loss_mask,
        loss_agg_mode,
        batch_num_tokens=batch_num_tokens,
        global_batch_size=global_valid_samples,
        loss_scale_factor=norm,
    )


def expand_to_token_level(data):
    attention = data.batch["attention_mask"]
    scores = data.batch["response_level_rewards"]
    return _REF.place_reward_last(scores, attention, attention)[:, 1:]


def _group_index(batch_size, n_sample):
    return np.arange(batch_size) // max(int(n_sample), 1)


def reward_postprocess(data, pipeline_config, running_ctrl):
    scores = data.batch["response_level_rewards"]
    if pipeline_config.adv_estimator == "grpo":
        pipeline_config.norm_mean_type = pipeline_config.norm_std_type = "group"
    mean_type, std_type = pipeline_config.norm_mean_type, pipeline_config.norm_std_type
    size = scores.shape[0]
    if mean_type == "batch" and std_type == "batch":
        out = _REF.normalize_rewards(scores, torch.ones_like(scores, dtype=torch.bool))
    elif mean_type == "group":
        n = pipeline_config.actor_infer.generating_args.num_return_sequences
        out, _ = _REF.advantage_grpo(
            scores.unsqueeze(-1),
            torch.ones((size, 1), dtype=torch.int64, device=scores.device),
            _group_index(size, n),
            epsilon=PROFILE.grpo_eps,
            norm_by_std=std_type == "group",
        )
        out = out[:, 0]
    elif mean_type is None and std_type is None:
        out = scores.clone()
    else:
        raise NotImplementedError(f"stand-in: norm types {mean_type!r}/{std_type!r}")
    if pipeline_config.reward_clip:
        out = out.clamp(-pipeline_config.reward_clip, pipeline_config.reward_clip)
    data.batch["response_level_rewards"] = out
    return data, {}


def compute_token_reward(data, pipeline_config, kl_ctrl):
    token_scores = expand_to_token_level(data)
    mask = data.batch["response_mask"][:, 1:]
    beta, metric = 0.0, 0.0
    rewards = token_scores
    if pipeline_config.add_token_level_kl:
        beta = kl_ctrl.value
        rewards, metric = _KL.apply_kl_in_reward(
            token_scores,
            data.batch["old_log_probs"],
            data.batch["ref_log_probs"],
            mask,
            beta,
            pipeline_config.kl_penalty,
        )
        metric = float(metric)
    kl_ctrl.update(current=metric, n_steps=token_scores.shape[0])
    if "token_level_rewards" in data.batch.keys():
        data.rename(old_keys="token_level_rewards", new_keys="token_level_scores")
    data.batch["token_level_rewards"] = rewards
    return data, {"critic/kl": metric, "critic/kl_coef": beta}


def compute_advantage(
    data,
    gamma,
    lambd,
    adv_estimator,
    advantage_clip=None,
    whiten_advantages=False,
    whiten_rewards=False,
    response_mask=None,
    pipeline_config=None,
):
    if response_mask is None:
        response_mask = data.batch["response_mask"][:, 1:]
    rewards = data.batch["token_level_rewards"]
    if adv_estimator == "gae":
        if not whiten_advantages:
            raise NotImplementedError("stand-in GAE always whitens (torchref)")
        advantages, returns = _REF.advantage_gae(
            rewards, data.batch["values"], response_mask, gamma, lambd
        )
    elif adv_estimator in ("reinforce", "grpo"):
        whitened, returns = _REF.advantage_reinforce_pp(rewards, response_mask, gamma)
        advantages = whitened if whiten_advantages else returns
    else:
        raise NotImplementedError(adv_estimator)
    if advantage_clip is not None:
        advantages = advantages.clamp(-advantage_clip, advantage_clip)
    data.batch["advantages"] = advantages
    data.batch["returns"] = returns
    return data


def reduce_metrics(metrics, reduce_func=np.mean):
    """The reducer named by an ``@tag`` or ``_tag`` ending of the key, else ``reduce_func``."""
    reducers = {"mean": np.mean, "max": np.max, "min": np.min, "sum": np.sum, "std": np.std}
    out = dict(metrics)
    for key, values in metrics.items():
        if not isinstance(values, (list, tuple, np.ndarray)) or len(values) == 0:
            continue
        tag = key.rsplit("@", 1)[1] if "@" in key else key.rsplit("_", 1)[-1]
        out[key] = reducers.get(tag, reduce_func)(values)
    return out


def log_probs_from_logits(logits, labels):
    log_probs = torch.log_softmax(logits.float(), dim=-1)
    return log_probs.gather(dim=-1, index=labels.unsqueeze(-1)).squeeze(-1)


def get_sample_level_mask(data, pipeline_config):
    """final_response_mask = response_mask[:, 1:] x the sample filters (error_max_len_clip:
    a sample is kept when its score is 1, or 0 with fewer tokens than the threshold)."""
    response_mask = data.batch["response_mask"][:, 1:]
    keep = torch.ones(response_mask.shape[0], dtype=torch.bool)
    if pipeline_config.error_max_len_clip:
        scores = data.batch["scores"]
        lengths = response_mask.sum(-1)
        keep = keep & (
            ((scores == 0) & (lengths < pipeline_config.error_max_len_threshold)) | (scores == 1)
        )
    data.batch["final_response_mask"] = torch.where(
        keep.unsqueeze(-1), response_mask, torch.zeros_like(response_mask)
    )
    return data, {}


def get_seqlen_balanced_partitions(seqlen_list, k_partitions, equal_size=False):
    """Heaviest first onto the lightest part with room; the input order's contiguous parts
    when those are better (values are the workloads the caller computed)."""
    n = len(seqlen_list)
    capacity = n // k_partitions if equal_size else n
    parts = [[] for _ in range(k_partitions)]
    loads = [0] * k_partitions
    for i in sorted(range(n), key=lambda i: (-seqlen_list[i], i)):
        open_parts = [p for p in range(k_partitions) if len(parts[p]) < capacity]
        p = min(open_parts, key=lambda p: (loads[p], len(parts[p]), p))
        parts[p].append(i)
        loads[p] += seqlen_list[i]
    base, extra = divmod(n, k_partitions)
    bounds = [p * base + min(p, extra) for p in range(k_partitions + 1)]
    contiguous = [list(range(bounds[p], bounds[p + 1])) for p in range(k_partitions)]
    worst = max(loads, default=0)
    if max((sum(seqlen_list[i] for i in c) for c in contiguous), default=0) < worst:
        return contiguous
    return [sorted(p) for p in parts]


def batch_balance(
    batch, dp_size, minibatch_size, logging_prefix="global_seqlen", keep_minibatch=False
):
    lengths = batch.batch["attention_mask"].sum(-1)

    def calculate_workload(seq_len_list):
        return 24576 * seq_len_list + seq_len_list * seq_len_list

    workloads = calculate_workload(lengths)
    partitions = get_seqlen_balanced_partitions(workloads.tolist(), dp_size, equal_size=True)
    batch.reorder(torch.tensor([i for p in partitions for i in p]))
    return {}

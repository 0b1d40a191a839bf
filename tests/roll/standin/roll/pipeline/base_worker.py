"""Stand-in for ``roll.pipeline.base_worker``: the worker methods the adapter compiles (the
old log-probs of a mini-batch, the critic's clipped value loss reduced per sequence as ROLL
reduces it, its value head output), with masked positions ignored."""

import torch

from roll.utils.functionals import masked_mean


class ActorWorker:
    def get_old_log_probs_with_cache(self, data, log_probs):
        return data.batch["old_log_probs"]


class CriticWorker:
    def loss_func(self, data, output_tensor):
        mask = data.batch["response_mask"][:, 1:]
        inside = mask.bool()
        zero = torch.zeros_like(data.batch["values"])
        old_values = torch.where(inside, data.batch["values"], zero)
        returns = torch.where(inside, data.batch["returns"], zero)
        values, _ = self.forward_func_values(data=data, output_tensor=output_tensor)
        values = torch.where(inside, values, zero)
        clip = self.pipeline_config.value_clip
        clipped = torch.clip(values, old_values - clip, old_values + clip)
        surr1 = (values - returns) ** 2
        surr2 = (clipped - returns) ** 2
        loss = torch.where(inside, torch.max(surr1, surr2), torch.zeros_like(surr1))
        vf_loss = 0.5 * masked_mean(loss, mask, dim=-1).mean()
        chosen = torch.where(inside, (surr2 > surr1).float(), torch.zeros_like(surr1))
        clipfrac = chosen.sum() / inside.sum().clamp(min=1)
        return vf_loss, {"critic/clipfrac": clipfrac.item(), "critic/loss": vf_loss.item()}

    def forward_func_values(self, data, output_tensor):
        values = output_tensor[:, :-1].squeeze(dim=-1)
        return values, {"values": values.clone().detach()}

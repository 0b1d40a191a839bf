"""Stand-in for ``roll.pipeline.agentic.agentic_actor_worker``: the agentic actor's
``loss_func``, the rlvr one over the multi-turn ``response_mask`` (no final mask)."""

import torch

from roll.utils.functionals import agg_loss


class ActorWorker:
    def loss_func(self, data, output_tensor):
        mask = data.batch["response_mask"][:, 1:].long()
        advantages = data.batch["advantages"]
        counts = data.meta_info["batch_num_tokens"]
        valid = data.meta_info["global_valid_samples"]
        log_probs = self.strategy.op_compute_log_probs(
            logits=output_tensor,
            input_ids=data.batch["input_ids"],
            attention_mask=data.batch["response_mask"],
        )
        old_log_probs = self.get_old_log_probs_with_cache(data, log_probs)
        cfg = self.pipeline_config
        low = cfg.pg_clip_low if cfg.use_pg_clip_range else cfg.pg_clip
        high = cfg.pg_clip_high if cfg.use_pg_clip_range else cfg.pg_clip
        inside = mask.bool()
        log_ratio = torch.where(inside, log_probs - old_log_probs, torch.zeros_like(log_probs))
        ratio = log_ratio.clamp(-20.0, 20.0).exp()
        adv = torch.where(inside, advantages, torch.zeros_like(advantages))
        surr1 = ratio * adv
        surr2 = ratio.clamp(1 - low, 1 + high) * adv
        loss = -torch.min(surr1, surr2)
        if cfg.dual_clip_loss:
            loss = torch.where(adv < 0, torch.min(loss, -adv * (1 + 2 * cfg.pg_clip)), loss)
        pg_loss = agg_loss(
            loss_mat=loss,
            loss_mask=mask,
            loss_agg_mode=cfg.loss_agg_mode,
            batch_num_tokens=counts["response_mask"],
            global_valid_samples=valid["response_mask"],
        )
        chosen = torch.where(inside, torch.lt(surr2, surr1).float(), torch.zeros_like(surr1))
        clipfrac = chosen.sum() / inside.sum().clamp(min=1)
        return pg_loss, {"actor/clipfrac@sum": clipfrac.item(), "actor/pg_loss@sum": pg_loss.item()}

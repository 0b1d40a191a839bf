"""Stand-in GRPOTrainer: TRL's private-method structure (what the adapter's shell binds),
the postprocess contract's math. Written for rlconform's tests; not TRL's code.

Inputs at positions outside the loss mask are never used (``torch.where`` selects), so
NaN / inf padding cannot reach a value or a gradient; log-ratios are clamped to +-20, the
k3 KL clamps ref - logp to +-20 and its value to +-10 before any importance weighting
(the stand-in test's profile).
"""

from __future__ import annotations

import torch

from trl.trainer.utils import nanstd, pad


def _masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    kept = torch.where(mask, values, torch.zeros_like(values))
    return kept.sum() / mask.sum().clamp(min=1)


class GRPOTrainer:
    def _generate(self, prompts):  # replaced by the shell
        raise NotImplementedError("the stand-in does not generate")

    def _get_per_token_logps_and_entropies(self, model, *args, **kwargs):  # replaced
        raise NotImplementedError("the stand-in has no model")

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):  # replaced
        raise NotImplementedError("the stand-in has no reward functions")

    @staticmethod
    def get_off_policy_mask(
        advantages, per_token_logps, sampling_per_token_logps, mask, off_policy_threshold
    ):
        action = mask.bool()
        kl_div = torch.where(
            action,
            sampling_per_token_logps - per_token_logps.detach(),
            torch.zeros_like(per_token_logps),
        )
        avg_seq_kl = kl_div.sum(dim=1, keepdim=True) / mask.sum(dim=1, keepdim=True).clamp(min=1)
        return ((advantages >= 0) | (avg_seq_kl <= off_policy_threshold)).to(dtype=mask.dtype)

    def _generate_and_score_completions(self, inputs):
        prompts = [x["prompt"] for x in inputs]
        (
            prompt_ids_list,
            completion_ids_list,
            tool_mask_list,
            completions,
            sampling_per_token_logps_list,
            extra_fields,
            images,
            tool_images,
        ) = self._generate(prompts)
        completion_mask = pad(
            [torch.ones(len(ids), dtype=torch.long) for ids in completion_ids_list], 0
        )
        if tool_mask_list is not None:
            tool_mask = pad([torch.tensor(m, dtype=torch.long) for m in tool_mask_list], 1)
            loss_mask = completion_mask * tool_mask
        else:
            tool_mask, loss_mask = None, completion_mask
        action = loss_mask.bool()
        num_items_in_batch = loss_mask.sum()
        width = completion_mask.shape[1]
        output = {"completion_mask": completion_mask, "num_items_in_batch": num_items_in_batch}
        if tool_mask is not None:
            output["tool_mask"] = tool_mask

        if self.use_vllm and self.vllm_importance_sampling_correction:
            old, *_ = self._get_per_token_logps_and_entropies(self.model, None, None, width)
            sampling = pad(
                [torch.tensor(r, dtype=torch.float32) for r in sampling_per_token_logps_list], 0.0
            )
            per_token_logps_diff = torch.where(action, old - sampling, torch.zeros_like(old))
            mode = self.vllm_importance_sampling_mode
            if mode.startswith("sequence"):
                ratio = torch.exp(per_token_logps_diff.sum(dim=-1, keepdim=True))
            else:
                ratio = torch.exp(per_token_logps_diff)
            low, high = (
                self.vllm_importance_sampling_clip_min,
                self.vllm_importance_sampling_clip_max,
            )
            if mode.endswith("truncate"):
                ratio = torch.clamp(ratio, min=low, max=high)
            else:
                inside = torch.ones_like(ratio, dtype=torch.bool)
                if low is not None:
                    inside &= ratio >= low
                if high is not None:
                    inside &= ratio <= high
                ratio = torch.where(inside, ratio, torch.zeros_like(ratio))
            if not mode.startswith("sequence"):
                ratio = torch.where(action, ratio, torch.zeros_like(ratio))
            gap = _masked_mean((old - sampling).abs(), action)
            self._metrics["train"]["sampling/sampling_logp_difference/mean"].append(gap.item())
            output.update(
                old_per_token_logps=old,
                importance_sampling_ratio=ratio,
                sampling_per_token_logps=sampling,
            )

        rewards_per_func = self._calculate_rewards(
            inputs, prompts, completions, completion_ids_list
        )
        weights = self.reward_weights.unsqueeze(0)
        groups = self.num_generations
        if self.multi_objective_aggregation == "sum_then_normalize":
            rewards = (rewards_per_func * weights).sum(dim=1)
            grouped = rewards.view(-1, groups)
            mean = grouped.mean(dim=1).repeat_interleave(groups)
            advantages = rewards - mean
            if self.scale_rewards != "none":
                std = nanstd(grouped, dim=1).repeat_interleave(groups)
                advantages = advantages / (std + 1e-4)
        else:
            grouped = rewards_per_func.view(-1, groups, rewards_per_func.shape[1])
            normalised = (grouped - grouped.mean(dim=1, keepdim=True)) / (
                nanstd(grouped, dim=1, keepdim=True) + 1e-4
            )
            summed = (normalised.view(-1, rewards_per_func.shape[1]) * weights).sum(dim=1)
            tokens = loss_mask.sum(dim=1).to(summed.dtype)
            count = tokens.sum()
            if count <= 1:
                advantages = torch.zeros_like(summed)
            else:
                mean = (summed * tokens).sum() / count
                var = (((summed - mean) ** 2) * tokens).sum() / (count - 1)
                advantages = (summed - mean) * torch.rsqrt(var + 1e-8)
        output["advantages"] = torch.nan_to_num(advantages, nan=0.0)
        return output

    def _compute_loss(self, model, inputs):
        completion_mask = inputs["completion_mask"]
        mask = (
            completion_mask if "tool_mask" not in inputs else completion_mask * inputs["tool_mask"]
        )
        action = mask.bool()
        per_token_logps, entropies, _ = self._get_per_token_logps_and_entropies(
            model, None, None, None
        )
        zeros = torch.zeros_like(per_token_logps)
        logps = torch.where(action, per_token_logps, zeros)
        advantages = inputs["advantages"]
        if advantages.dim() == 1:
            advantages = advantages.unsqueeze(1)
        advantages = torch.where(action, advantages.expand_as(logps), zeros)
        old = inputs.get("old_per_token_logps")
        old = logps.detach() if old is None else torch.where(action, old, zeros)

        log_ratio = torch.clamp(logps - old, -20.0, 20.0)
        if self.importance_sampling_level == "sequence":
            sequence = (logps - old).sum(-1, keepdim=True) / mask.sum(-1, keepdim=True).clamp(min=1)
            coef_1 = torch.exp(logps - logps.detach() + sequence.detach())
        else:
            coef_1 = torch.exp(log_ratio)

        if self.beta != 0.0:
            ref = torch.where(action, inputs["ref_per_token_logps"], zeros)
            x = torch.clamp(ref - logps, -20.0, 20.0)
            per_token_kl = torch.clamp(torch.exp(x) - x - 1, -10.0, 10.0)
            if self.args.use_bias_correction_kl:
                per_token_kl = per_token_kl * coef_1

        if self.loss_type == "cispo":
            weight = torch.clamp(coef_1, max=self.epsilon_high).detach()
            per_token_loss = -weight * advantages * logps
            clipped = coef_1 > self.epsilon_high
        elif self.loss_type == "sapo":
            tau = torch.where(
                advantages > 0, self.args.sapo_temperature_pos, self.args.sapo_temperature_neg
            )
            per_token_loss = -torch.sigmoid(tau * (coef_1 - 1)) * 4 / tau * advantages
            clipped = torch.zeros_like(action)
        else:
            coef_2 = torch.clamp(coef_1, 1 - self.epsilon_low, 1 + self.epsilon_high)
            if self.args.delta is not None:
                coef_1 = torch.clamp(coef_1, max=self.args.delta)
            per_token_loss = -torch.min(coef_1 * advantages, coef_2 * advantages)
            clipped = ((coef_1 < 1 - self.epsilon_low) & (advantages < 0)) | (
                (coef_1 > 1 + self.epsilon_high) & (advantages > 0)
            )
        if self.off_policy_mask_threshold is not None:
            sampling = inputs.get("sampling_per_token_logps", old)
            per_token_loss = per_token_loss * self.get_off_policy_mask(
                advantages[:, :1], per_token_logps, sampling, mask, self.off_policy_mask_threshold
            )
        if self.use_vllm and self.vllm_importance_sampling_correction:
            per_token_loss = per_token_loss * inputs["importance_sampling_ratio"]
        if self.beta != 0.0:
            per_token_loss = per_token_loss + self.beta * per_token_kl
        per_token_loss = torch.where(action, per_token_loss, zeros)

        total = per_token_loss.sum()
        steps = self.current_gradient_accumulation_steps
        rows = action.any(dim=1).sum().clamp(min=1)
        if self.loss_type in ("grpo", "sapo"):
            row_means = per_token_loss.sum(-1) / mask.sum(-1).clamp(min=1)
            loss = row_means.sum() / rows / steps
        elif self.loss_type == "bnpo":
            loss = total / mask.sum().clamp(min=1) / steps
        elif self.loss_type == "dr_grpo":
            loss = total / (rows * self.max_completion_length) / steps
        elif self.loss_type in ("cispo", "dapo", "vespo"):
            normalizer = (
                inputs["num_items_in_batch"].clamp(min=1.0) / self.accelerator.num_processes
            )
            normalizer = normalizer * steps / self.args.steps_per_generation
            loss = total / normalizer
        elif self.loss_type == "luspo":
            loss = per_token_loss.sum(-1).sum() / rows / steps
        else:
            raise ValueError(f"Unknown loss type: {self.loss_type}")

        key = "cispo_clip_ratio" if self.loss_type == "cispo" else "clip_ratio/region_mean"
        self._metrics["train"][key].append(_masked_mean(clipped.float(), action).item())
        return loss

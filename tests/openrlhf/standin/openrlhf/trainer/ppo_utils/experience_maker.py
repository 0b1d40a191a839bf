"""Stand-in for openrlhf.trainer.ppo_utils.experience_maker: the advantage step of
RemoteExperienceMaker over torchref's estimators (groups from Experience.index)."""

from __future__ import annotations

import torch

from openrlhf.models.utils import compute_reward
from openrlhf.trainer.ray.launcher import RayActorGroup  # noqa: F401 - as OpenRLHF imports it
from rlconform.adapters.torchref import TorchRef

_REF = TorchRef()


class RemoteExperienceMaker:
    def __init__(self, *args, **kwargs):
        raise RuntimeError("stand-in: build with object.__new__ (no Ray actor groups)")

    @torch.no_grad()
    def compute_advantages_and_returns(self, experiences):
        args = self.strategy.args
        n = args.rollout.n_samples_per_prompt
        estimator = self.advantage_estimator
        for exp in experiences:
            mask = exp.action_mask.long()
            groups = [position // n for position in exp.index]
            if estimator in ("gae", "reinforce"):
                rewards = compute_reward(exp.rewards, self.kl_ctl.value, exp.kl, exp.action_mask)
                if estimator == "gae":
                    exp.advantages, exp.returns = _REF.advantage_gae(
                        rewards,
                        exp.values,
                        mask,
                        args.algo.advantage.gamma,
                        args.algo.advantage.lambd,
                    )
                else:
                    exp.advantages, exp.returns = _REF.advantage_reinforce_pp(
                        rewards, mask, args.algo.advantage.gamma
                    )
                continue
            # OpenRLHF takes the group statistics of the scalar rewards (every sample, also
            # one without an action token) before anything is placed on tokens: keep each
            # row's sum equal to its reward (a row with no action token carries it at column 0)
            scores = compute_reward(exp.rewards, 0.0, exp.kl, exp.action_mask)
            if scores.shape[-1]:
                scores = scores.clone()
                scores[:, 0] += exp.rewards.to(scores.dtype) - scores.sum(-1)
            if estimator in ("group_norm", "dr_grpo"):
                exp.advantages, exp.returns = _REF.advantage_grpo(
                    scores, mask, groups, epsilon=1e-9, norm_by_std=estimator == "group_norm"
                )
            elif estimator == "rloo":
                exp.advantages, exp.returns = _REF.advantage_rloo(scores, mask, groups)
            elif estimator == "reinforce_baseline":
                exp.advantages, exp.returns = _REF.advantage_reinforce_pp_baseline(
                    scores, mask, groups
                )
            else:
                raise Exception(f"Unkown advantage_estimator {estimator}")
        return experiences

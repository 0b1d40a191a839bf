"""Stand-in ``check_reward_nonzero_std``: the contract's zero_variance_group (all equal)."""

from slime.rollout.filter_hub.base_types import DynamicFilterOutput


def check_reward_nonzero_std(args, samples, **kwargs):
    rewards = [sample.get_reward_value(args) for sample in samples]
    keep = any(r != rewards[0] for r in rewards)
    return DynamicFilterOutput(keep=keep, reason=None if keep else "zero_std")

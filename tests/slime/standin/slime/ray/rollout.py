"""Stand-in ``slime.ray.rollout.RolloutManager``: reward post-processing and conversion.

Its methods read only ``torch``, ``Sample`` and ``get_source`` as globals (the adapter may
compile them from this file, as it does for slime's), importing the rest inside.
"""

import torch  # noqa: F401

from slime.utils.data import get_source  # noqa: F401
from slime.utils.types import Sample  # noqa: F401


class RolloutManager:
    def _post_process_rewards(self, samples):
        """Group normalisation by ``group_index`` (the whole batch when it is None)."""
        from rlconform.oracle import advantage as oracle

        raw = [float(sample.get_reward_value(self.args)) for sample in samples]
        estimator = self.args.advantage_estimator
        if estimator not in ("grpo", "gspo", "cispo", "reinforce_plus_plus_baseline"):
            return raw, raw
        if not self.args.rewards_normalization:
            return raw, raw
        labels = [s.group_index if s.group_index is not None else 0 for s in samples]
        if estimator == "reinforce_plus_plus_baseline":
            rewards = []
            members = oracle.group_members(labels)
            for i, label in enumerate(labels):
                group = [raw[j] for j in members[label]]
                rewards.append(raw[i] - sum(group) / len(group))
            return raw, rewards
        rewards = oracle.group_normalized(
            raw,
            labels,
            epsilon=1e-6,
            norm_by_std=bool(self.args.grpo_std_normalization),
            std_ddof=1,
            singleton="zero",
        )
        return raw, rewards

    def _convert_samples_to_train_data(self, samples):
        raw, rewards = self._post_process_rewards(samples)
        loss_masks = []
        for sample in samples:
            mask = (
                sample.loss_mask if sample.loss_mask is not None else [1] * sample.response_length
            )
            loss_masks.append([0] * sample.response_length if sample.remove_sample else list(mask))
        return {
            "tokens": [s.tokens for s in samples],
            "response_lengths": [s.response_length for s in samples],
            "rewards": rewards,
            "raw_reward": raw,
            "loss_masks": loss_masks,
            "source_names": [get_source(s) for s in samples],
        }

"""Bindings of slime's rollout-side and scheduling functions: sequence balancing (the
data-parallel schedule), the dynamic-sampling filter and the rollout metrics.

As in ``ops.py``, ``self.fw`` holds the resolved slime functions and the adapter only
converts layouts: canonical samples become ``slime.utils.types.Sample`` objects, a padded
response mask becomes response lengths.
"""

from __future__ import annotations

import copy
from argparse import Namespace
from typing import Any

import torch

from rlconform.adapters.base import Inexpressible, Unsupported
from rlconform.adapters.slime import layout

# The model whose forward FLOPs slime's schedule balances (``calculate_fwd_flops`` reads
# the Megatron model arguments): Qwen3-4B, slime's scripts/models/qwen3-4B.sh.
WORKLOAD_MODEL = Namespace(
    num_layers=36,
    hidden_size=2560,
    ffn_hidden_size=9728,
    num_attention_heads=32,
    num_query_groups=8,
    kv_channels=128,
    vocab_size=151936,
    num_experts=None,
    multi_latent_attention=False,
)


class SlimeBatchOps:
    """batch.seqlen_balance: ``slime.utils.dp_schedule``'s workloads and partitions."""

    def seqlen_workload(self, seqlens: torch.Tensor) -> list[int]:
        """``dp_schedule._calculate_workloads``: ``calculate_fwd_flops([L], args)`` per
        sample, the estimated forward FLOPs of the model (``WORKLOAD_MODEL``)."""
        lengths = [int(n) for n in seqlens.tolist()]
        return list(self.fw.calculate_workloads(lengths, WORKLOAD_MODEL))

    def seqlen_partitions(self, seqlens: list[int], k: int, equal_size: bool) -> list[list[int]]:
        """``get_seqlen_balanced_partitions(workloads, k, equal_size)`` on the FLOPs
        workloads, as ``build_dp_schedule`` calls it (micro-batches: ``equal_size=False``
        with ``--balance-by-flops``; data-parallel ranks: ``equal_size=True`` with
        ``--balance-data``)."""
        workloads = self.seqlen_workload(torch.as_tensor(list(seqlens), dtype=torch.int64))
        return self.fw.get_seqlen_balanced_partitions(workloads, k, equal_size)


# ---------------------------------------------------------------------------------------
# filter

_STATUSES = {"completed": "COMPLETED", "truncated": "TRUNCATED", "failed": "FAILED"}


class SlimeFilterOps:
    """filter.reasons / filter.stats / filter.order: slime's dynamic sampling.

    ``generate_rollout_async`` asks ``call_dynamic_filter(check_reward_nonzero_std, args,
    group)`` of every group of ``n_samples_per_prompt`` samples and drops the group when
    ``should_drop_dynamic_filter_output`` says so, counting the drop reason in a
    ``MetricGatherer``. That is the contract's ``zero_variance_group`` reason; slime has no
    other filter reason, and no filter statistics beyond the counts of dropped groups.
    """

    def filter_samples(
        self, samples: list[dict[str, Any]], config: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        cfg = dict(config or {})
        _supported_filter_config(cfg, samples)
        groups = _prompt_groups(samples)
        reward_key = _reward_key(samples, self.profile.get("reward_key", "score"))
        converted = [self._filter_sample(s, i, reward_key) for i, s in enumerate(samples)]
        args = Namespace(
            reward_key=reward_key,
            n_samples_per_prompt=len(groups[0]) if groups else 0,
            rollout_batch_size=len(groups),
        )
        dynamic_filter = (
            self.fw.check_reward_nonzero_std if cfg.get("drop_zero_variance_groups") else None
        )
        gatherer = self.fw.MetricGatherer()
        remaining = len(groups)  # GenerateState.remaining_batch_size
        kept, dropped = [], {}
        for members in groups:
            output = self.fw.call_dynamic_filter(
                dynamic_filter, args, [converted[i] for i in members]
            )
            if self.fw.should_drop_dynamic_filter_output(
                output, remaining_batch_size=remaining, target_data_size=len(groups)
            ):
                gatherer.on_dynamic_filter_drop(reason=output.reason)
                remaining -= 1
                for i in members:  # the only reason slime's filter has
                    dropped[samples[i]["uid"]] = "zero_variance_group"
            else:
                kept.extend(copy.deepcopy(samples[i]) for i in members)
        return {"kept": kept, "dropped": dropped, "stats": {"counts": gatherer.collect()}}

    def _filter_sample(self, sample: dict[str, Any], index: int, reward_key: str | None) -> Any:
        """A canonical sample as the ``Sample`` slime's filter receives (scored, finished)."""
        uid, status = sample["uid"], sample["status"]
        if status not in _STATUSES:
            raise Inexpressible(
                f"sample uid={uid!r}: status {status!r} never reaches slime's dynamic filter "
                "(no tool_error status; aborted samples are collected apart by abort())"
            )
        if sample["reward"] is None:
            raise Inexpressible(
                f"sample uid={uid!r}: unscored; slime's reward model scores every sample of "
                "a group before the dynamic filter sees it"
            )
        response = list(sample["response_ids"])
        converted = self.fw.Sample(
            index=index,
            tokens=list(sample["prompt_ids"]) + response,
            response_length=len(response),
            reward=copy.deepcopy(sample["reward"]),
            loss_mask=list(sample["loss_mask"]),
            rollout_log_probs=list(sample["rollout_logprobs"]),
            status=getattr(self.fw.Sample.Status, _STATUSES[status]),
        )
        try:
            converted._validate_response_metadata_lengths()
        except ValueError as exc:
            raise Inexpressible(f"sample uid={uid!r}: slime's Sample refuses it: {exc}") from None
        return converted


def _supported_filter_config(cfg: dict[str, Any], samples: list[dict[str, Any]]) -> None:
    """Raise Unsupported for the first filter mode the config asks for that slime's rollout
    does not have and that would act on these samples (a mode with nothing to drop here
    is vacuous: slime's output is then the same as with the mode; one reason per mode, so
    the report's skip counts stay readable)."""
    lengths = [len(s["response_ids"]) for s in samples]
    seen: set[tuple[Any, tuple[Any, ...]]] = set()
    duplicates = False
    for sample in samples:
        key = (sample["group"], tuple(sample["response_ids"]))
        duplicates = duplicates or key in seen
        seen.add(key)
    low, high = cfg.get("min_response_length"), cfg.get("max_response_length")
    lacking = (
        (
            cfg.get("drop_duplicates", True) and duplicates,
            "duplicate removal (drop_duplicates, on by default)",
        ),
        (
            cfg.get("truncation_policy", "keep") == "drop"
            and any(s["status"] == "truncated" for s in samples),
            "dropping of truncated samples",
        ),
        (low is not None and any(n < low for n in lengths), "minimum response length"),
        (high is not None and any(n > high for n in lengths), "maximum response length"),
        (cfg.get("reward_outlier_z") is not None, "reward outlier removal"),
    )
    for asked, mode in lacking:
        if asked:
            raise Unsupported(
                f"slime's dynamic sampling has only the zero-std group filter "
                f"(check_reward_nonzero_std): no {mode}"
            )


def _prompt_groups(samples: list[dict[str, Any]]) -> list[list[int]]:
    """Sample indices per group, as slime's data source emits them (``list[list[Sample]]``):
    contiguous groups of ``n_samples_per_prompt`` samples each."""
    groups: list[list[int]] = []
    for i, sample in enumerate(samples):
        if groups and samples[groups[-1][0]]["group"] == sample["group"]:
            groups[-1].append(i)
        else:
            groups.append([i])
    labels = [samples[g[0]]["group"] for g in groups]
    if len(set(labels)) != len(labels):
        raise Inexpressible(
            "groups interleave: slime's rollout emits each prompt's samples together"
        )
    if len({len(g) for g in groups}) > 1:
        raise Inexpressible(
            "groups of different sizes: generate_rollout_async asserts every group has "
            "n_samples_per_prompt samples"
        )
    return groups


def _reward_key(samples: list[dict[str, Any]], key: str) -> str | None:
    """``args.reward_key``: one per run, so dict and plain rewards cannot be mixed."""
    kinds = {isinstance(s["reward"], dict) for s in samples if s["reward"] is not None}
    if len(kinds) > 1:
        raise Inexpressible(
            "dict and plain rewards in one batch: slime reads every reward with one args.reward_key"
        )
    return key if kinds == {True} else None


# ---------------------------------------------------------------------------------------
# metrics


class SlimeMetricsOps:
    """metrics.response_length: ``rollout_metrics.compute_metrics_from_samples``, what
    ``log_rollout_data`` logs under ``rollout/`` for every rollout."""

    def response_length_metrics(self, response_mask: torch.Tensor) -> dict[str, float]:
        """Samples of L_i response tokens (all of them trainable); a response of the
        maximum length T stopped at the length limit (SGLang finish reason ``length``:
        ``Sample.Status.TRUNCATED``). slime's keys, renamed to the contract's:
        ``response_len/{mean,max,min}`` and ``truncated_ratio`` (the clip ratio)."""
        width = response_mask.shape[-1]
        status = self.fw.Sample.Status
        samples = [
            self.fw.Sample(
                tokens=[0] * (n + 1),
                response_length=n,
                loss_mask=[1] * n,
                status=status.TRUNCATED if n == width else status.COMPLETED,
            )
            for n in layout.lengths_from_mask(response_mask)
        ]
        args = Namespace(
            advantage_estimator="ppo",  # no zero-std group metrics: no rewards here
            sglang_speculative_algorithm=None,
            log_reward_category=None,
        )
        logged = self.fw.compute_metrics_from_samples(args, samples)
        names = {
            "response_len/mean": "response_length/mean",
            "response_len/max": "response_length/max",
            "response_len/min": "response_length/min",
            "truncated_ratio": "response_length/clip_ratio",
        }
        return {names[key]: value for key, value in logged.items() if key in names}

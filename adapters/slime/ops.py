"""Bindings: canonical operations (``adapters/torchref/<area>.py`` names and signatures)
implemented by converting to slime's layout and calling slime's own functions.

``self.fw`` holds the resolved slime functions (see ``adapters/slime/__init__.py``). The
only arithmetic here is what slime's *trainer* does around a function (for example the
``torch.cat`` of per-sample lists, or Megatron/DDP's division of the reduced loss): each
such line names the slime (or Megatron) code it stands for.

Response length L_i: slime's lists are response-only with no padding. Where an
operation receives only an action mask, L_i is one past the last action token
(``layout.lengths_from_mask``); mask holes are inside the response and are given to
slime as they are.
"""

from __future__ import annotations

import types
from argparse import Namespace
from collections.abc import Sequence
from typing import Any

import torch

from rlconform.adapters.base import Inexpressible, Unsupported
from rlconform.adapters.is_correction_mode import split_mode
from rlconform.adapters.slime import layout, runtime

# ---------------------------------------------------------------------------------------
# helpers (layout only)


def _rows(padded: torch.Tensor, lengths: Sequence[int]) -> list[torch.Tensor]:
    return layout.to_lists(padded, lengths)


def _int_rows(mask: torch.Tensor, lengths: Sequence[int]) -> list[torch.Tensor]:
    """slime's loss masks: response-only ``torch.int`` tensors (train side)."""
    return [row.to(torch.int) for row in layout.to_lists(mask, lengths)]


def _back(rows: Sequence[torch.Tensor], like: torch.Tensor) -> torch.Tensor:
    if not rows:  # an empty batch: (0, T), still attached to the inputs' graph
        return like.reshape(0, like.shape[-1]) * 0
    return layout.from_lists(list(rows), like.shape[-1], dtype=like.dtype, device=like.device)


def _flat(rows: Sequence[torch.Tensor], like: torch.Tensor) -> torch.Tensor:
    """The ``torch.cat`` slime's loss functions apply to per-sample lists."""
    if not rows:  # no sample: an empty slice of the input (autograd still reaches it)
        return like.reshape(-1)[:0]
    return torch.cat(list(rows), dim=0)


def _cat(rows: Sequence[torch.Tensor]) -> torch.Tensor:
    """``torch.cat(per_sample_list, dim=0)`` exactly as policy_loss_function does it (a
    micro-batch of zero samples raises there, so it raises here)."""
    return torch.cat(list(rows), dim=0)


def _contiguous_groups(index: Sequence[Any]) -> tuple[list[int], int, int]:
    """Order that makes groups contiguous (slime's data source emits list[list[Sample]]
    grouped by prompt), plus ``n_samples_per_prompt`` (largest group) and group count."""
    labels = index.tolist() if hasattr(index, "tolist") else list(index)
    first: dict[Any, int] = {}
    for label in labels:
        first.setdefault(label, len(first))
    order = sorted(range(len(labels)), key=lambda i: (first[labels[i]], i))
    sizes: dict[Any, int] = {}
    for label in labels:
        sizes[label] = sizes.get(label, 0) + 1
    return order, max(sizes.values(), default=1), len(first)


def _unorder(rows: list[Any], order: list[int]) -> list[Any]:
    out: list[Any] = [None] * len(order)
    for position, original in enumerate(order):
        out[original] = rows[position]
    return out


def _scores(token_level_rewards: torch.Tensor, lengths: Sequence[int]) -> list[float]:
    """The scalar reward of each sample (slime's ``Sample.reward``): the inverse of placing
    it on the response, i.e. the row sum over its L_i response tokens (holes included)."""
    return [float(row.sum()) for row in _rows(token_level_rewards, lengths)]


class _Capture:
    """A stand-in for slime's ``sum_of_sample_mean`` argument that records what it gets."""

    def __init__(self) -> None:
        self.seen: list[torch.Tensor] = []

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        self.seen.append(x)
        return x.sum()


# ---------------------------------------------------------------------------------------
# logprob / entropy


class SlimeLogprobOps:
    """logprob.alignment, logprob.keep_sampling_mask, entropy.from_logits."""

    def _logprob_args(self, temperature: float) -> Namespace:
        return Namespace(
            rollout_temperature=temperature,
            log_probs_chunk_size=-1,
            allgather_cp=False,
            entropy_coef=0.0,
        )

    def response_logprobs(
        self,
        logits: torch.Tensor,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        response_width: int,
        temperature: float = 1.0,
    ) -> torch.Tensor:
        """slime ``get_log_probs_and_entropy`` on the packed sequences (prompt + response)."""
        seq_len = logits.shape[1]
        prompt_width = seq_len - response_width
        real = attention_mask.bool()
        tokens, rows, totals, responses = [], [], [], []
        for i in range(logits.shape[0]):
            columns = torch.nonzero(real[i]).flatten()
            tokens.append(input_ids[i, columns])
            rows.append(logits[i, columns])
            totals.append(int(columns.numel()))
            responses.append(int(real[i, prompt_width:].sum()))
        packed = torch.cat(rows) if rows else logits.new_zeros((0, logits.shape[-1]))
        _, result = self.fw.get_log_probs_and_entropy(
            packed.unsqueeze(0),
            args=self._logprob_args(temperature),
            unconcat_tokens=tokens,
            total_lengths=totals,
            response_lengths=responses,
            with_entropy=False,
        )
        width = response_width
        return layout.from_lists(
            result["log_probs"], width, dtype=logits.dtype, device=logits.device
        )

    def logprobs_on_support(
        self,
        logits: torch.Tensor,
        responses: torch.Tensor,
        keep_mask: torch.Tensor,
        response_mask: torch.Tensor,
        temperature: float = 1.0,
    ) -> torch.Tensor:
        """slime's top-p replay: ``get_log_probs_and_entropy(top_p_token_ids/offsets)``.

        Response-aligned logits become packed sequences with a one-token prompt (row j
        predicts response token j, as slime's shift expects); the kept ids of each row are
        the sample's recorded nucleus ``ids[offsets[j]:offsets[j+1]]``.
        """
        lengths = layout.lengths_from_mask(response_mask)
        vocab = logits.shape[-1]
        tokens, rows, totals, ids, offsets = [], [], [], [], []
        for i, n in enumerate(lengths):
            prompt = torch.zeros(1, dtype=responses.dtype, device=responses.device)
            tokens.append(torch.cat([prompt, responses[i, :n]]))
            filler = logits.new_zeros((1, vocab))  # the last row predicts nothing
            rows.append(torch.cat([logits[i, :n], filler]))
            totals.append(n + 1)
            sample_ids, sample_offsets = [], [0]
            for j in range(n):
                kept = torch.nonzero(keep_mask[i, j].bool()).flatten().tolist()
                sample_ids.extend(kept)
                sample_offsets.append(len(sample_ids))
            ids.append(sample_ids)
            offsets.append(sample_offsets)
        packed = torch.cat(rows) if rows else logits.new_zeros((0, vocab))
        _, result = self.fw.get_log_probs_and_entropy(
            packed.unsqueeze(0),
            args=self._logprob_args(temperature),
            unconcat_tokens=tokens,
            total_lengths=totals,
            response_lengths=list(lengths),
            with_entropy=False,
            top_p_token_ids=ids,
            top_p_token_offsets=offsets,
        )
        return _back(result["log_probs"], logits[..., 0])

    def entropy_from_logits(self, logits: torch.Tensor) -> torch.Tensor:
        """slime ``calculate_log_probs_and_entropy(with_entropy=True)`` on (N, V) rows."""
        vocab = logits.shape[-1]
        flat = logits.reshape(-1, vocab)
        targets = torch.zeros(flat.shape[0], dtype=torch.long, device=logits.device)
        _, entropy = self.fw.calculate_log_probs_and_entropy(flat, targets, None, with_entropy=True)
        return entropy.reshape(logits.shape[:-1])

    def entropy_mean(self, logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """slime's ``entropy_loss``: the per-token entropy through ``loss_function``'s reducer
        and scaling, like the loss (profile ``calculate_per_token_loss``, slime default False:
        per-sample means averaged over the step's samples)."""
        entropy = self.entropy_from_logits(logits)
        per_token = bool(self.profile.get("calculate_per_token_loss", False))
        loss, normalizer = SlimeAggregateOps._slime_loss(self, entropy, mask, per_token)
        return loss / normalizer.clamp(min=1) if per_token else loss


# ---------------------------------------------------------------------------------------
# mask


class SlimeMaskOps:
    """mask.loss through slime's rollout -> train conversion and its reducer."""

    def _manager(self, args: Namespace) -> Any:
        manager = types.SimpleNamespace(
            args=args,
            custom_reward_post_process_func=None,
            custom_convert_samples_to_train_data_func=None,
        )
        manager._post_process_rewards = types.MethodType(self.fw.post_process_rewards, manager)
        return manager

    def valid_token_mask(
        self, response_mask: torch.Tensor, loss_mask: torch.Tensor, keep_mask: torch.Tensor
    ) -> torch.Tensor:
        """``RolloutManager._convert_samples_to_train_data``: response-only loss masks, a
        removed sample (``remove_sample``) all zero."""
        lengths = layout.lengths_from_mask(response_mask)
        samples = []
        for i, n in enumerate(lengths):
            samples.append(
                self.fw.Sample(
                    tokens=[0] * (n + 1),
                    response_length=n,
                    loss_mask=[int(v) for v in loss_mask[i, :n].tolist()],
                    remove_sample=not bool(keep_mask[i]),
                    reward=0.0,
                )
            )
        args = Namespace(
            advantage_estimator="ppo",
            rewards_normalization=False,
            reward_key=None,
            rollout_top_p=1.0,
        )
        data = self.fw.convert_samples_to_train_data(self._manager(args), samples)
        rows = [torch.tensor(m, dtype=torch.int64) for m in data["loss_masks"]]
        return layout.from_lists(
            rows, response_mask.shape[-1], dtype=torch.int64, device=response_mask.device
        )

    def masked_mean(self, values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """slime's reducer over the batch as one response (``get_sum_of_sample_mean`` with a
        single sample): sum(x m) / max(sum m, 1). Each row is cut at its last mask-1
        column first (slime's lists carry no padding)."""
        lengths = layout.lengths_from_mask(mask)
        flat_values = _flat(_rows(values, lengths), values)
        flat_mask = _flat(_int_rows(mask, lengths), mask.to(torch.int))
        n = int(flat_values.numel())
        reducer = self.fw.get_sum_of_sample_mean([n], [n], [flat_mask])
        return torch.as_tensor(reducer(flat_values), dtype=values.dtype, device=values.device)


# ---------------------------------------------------------------------------------------
# reward


class SlimeRewardOps:
    """reward.place_last (REINFORCE++ placement), reward.normalize_batch (rollout side)."""

    def place_reward_last(
        self, scores: torch.Tensor, response_mask: torch.Tensor, loss_mask: torch.Tensor
    ) -> torch.Tensor:
        """``get_reinforce_plus_plus_returns`` with kl_coef 0 and gamma 0: its returns are
        exactly its token rewards (the score on the last action token)."""
        lengths = layout.lengths_from_mask(response_mask)
        masks = _int_rows(loss_mask * response_mask, lengths)
        kl = [torch.zeros(n, dtype=scores.dtype, device=scores.device) for n in lengths]
        returns = self.fw.get_reinforce_plus_plus_returns(
            scores, kl, masks, list(lengths), list(lengths), 0.0, 0.0
        )
        return layout.from_lists(
            returns, response_mask.shape[-1], dtype=scores.dtype, device=scores.device
        )

    def _post_process(
        self, raw: list[float], args: Namespace, group_index: list[int] | None = None
    ) -> list[float]:
        """``_post_process_rewards`` on samples carrying the reward (and ``group_index``)."""
        manager = types.SimpleNamespace(args=args, custom_reward_post_process_func=None)
        groups = group_index if group_index is not None else [0] * len(raw)
        samples = [
            self.fw.Sample(reward=float(r), group_index=g, index=i)
            for i, (r, g) in enumerate(zip(raw, groups, strict=True))
        ]
        _, rewards = self.fw.post_process_rewards(manager, samples)
        return list(rewards)

    def normalize_rewards(self, scores: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        """``RolloutManager._post_process_rewards`` on the kept samples as one group (its
        batch-level case: the batch size is not n_samples_per_prompt x rollout_batch_size).

        Dropped samples are not in slime's batch; they come back as 0.
        """
        kept = [i for i, k in enumerate(keep.tolist()) if k]
        raw = [float(scores[i]) for i in kept]
        out = torch.zeros_like(scores)
        if not raw:
            return out
        args = Namespace(
            advantage_estimator="grpo",
            rewards_normalization=True,
            grpo_std_normalization=len(raw) > 1,  # slime_validate_args: n == 1 -> off
            n_samples_per_prompt=len(raw),
            rollout_batch_size=1,
            reward_key=None,
        )
        normalized = self._post_process(raw, args)
        for i, value in zip(kept, normalized, strict=True):
            out[i] = value
        return out


# ---------------------------------------------------------------------------------------
# agg


class SlimeAggregateOps:
    """agg.*: slime's ``loss_function`` (its reducer ``get_sum_of_sample_mean`` and the
    rescaling for Megatron) with a custom loss that hands it the per-token values."""

    def _slime_loss(
        self,
        values: torch.Tensor,
        mask: torch.Tensor,
        per_token: bool,
        step_global_batch_size: int | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``loss_function(args, batch, num_microbatches=1, step_global_batch_size, logits)``
        -> (scaled loss, normaliser), on one micro-batch of one rank."""
        lengths = layout.lengths_from_mask(mask)
        batch = {
            "rlconform_values": _flat(_rows(values, lengths), values),
            "loss_masks": _int_rows(mask, lengths),
            "total_lengths": list(lengths),
            "response_lengths": list(lengths),
            "rollout_mask_sums": None,  # the reducer then uses each sample's mask sum
        }
        args = Namespace(
            loss_type="custom_loss",
            custom_loss_function_path=f"{__name__}.reduce_values",
            calculate_per_token_loss=per_token,
            recompute_loss_function=False,
            allgather_cp=False,
        )
        if step_global_batch_size is None:
            step_global_batch_size = max(len(lengths), 1)  # a step's rollout count
        loss, normalizer, _ = self.fw.loss_function(
            args, batch, 1, int(step_global_batch_size), values.new_zeros((1, 1, 1))
        )
        as_tensor = {"dtype": values.dtype, "device": values.device}
        return torch.as_tensor(loss, **as_tensor), torch.as_tensor(normalizer, **as_tensor)

    def agg_loss(
        self,
        loss_mat: torch.Tensor,
        loss_mask: torch.Tensor,
        mode: str,
        dp_size: int = 1,
        batch_num_tokens: int | torch.Tensor | None = None,
        global_batch_size: int | torch.Tensor | None = None,
        loss_scale_factor: float | None = None,
    ) -> torch.Tensor:
        """``seq-mean-token-mean``: slime's default (per-rollout mean); ``token-mean``:
        ``--calculate-per-token-loss``. slime has no other mode (``Unsupported``: a skip).

        Then what Megatron/DDP do with ``loss_function``'s output: divide by
        num_microbatches (1 here), and in per-token mode by the global token count (the
        normaliser summed over micro-batches and ranks, ``batch_num_tokens`` when given);
        ``loss_function`` multiplies by the data-parallel size, which is ``dp_size`` here.
        """
        if mode not in ("seq-mean-token-mean", "token-mean"):
            raise Unsupported(
                f"slime has no {mode!r} loss aggregation: its reducer is the per-sample mean "
                "(default) or the per-token sum (--calculate-per-token-loss)"
            )
        if mode == "token-mean":
            loss, normalizer = self._slime_loss(loss_mat, loss_mask, per_token=True)
            if batch_num_tokens is not None:
                normalizer = torch.as_tensor(batch_num_tokens, dtype=loss.dtype, device=loss.device)
            # slime's normaliser is >= 1 per sample; a batch without any token divides by 1
            return loss / normalizer.clamp(min=1) * dp_size
        loss, _ = self._slime_loss(
            loss_mat, loss_mask, per_token=False, step_global_batch_size=global_batch_size
        )
        return loss * dp_size

    def agg_batch_info(self, loss_mask: torch.Tensor) -> dict[str, int]:
        """This shard's share of the global denominators: the per-token normaliser that
        ``loss_function`` returns, and the shard's rollout count (a step's
        ``global_batch_sizes`` entry is the sum over shards)."""
        lengths = layout.lengths_from_mask(loss_mask)
        zeros = torch.zeros(loss_mask.shape, dtype=torch.float32, device=loss_mask.device)
        _, normalizer = self._slime_loss(zeros, loss_mask, per_token=True)
        return {"batch_num_tokens": int(normalizer), "global_batch_size": len(lengths)}


def reduce_values(args: Namespace, batch: dict, logits: torch.Tensor, sum_of_sample_mean):
    """The custom loss (``--custom-loss-function-path``) the agg bindings give slime's
    ``loss_function``: the reducer applied to the values under test."""
    return sum_of_sample_mean(batch["rlconform_values"]), {}


# ---------------------------------------------------------------------------------------
# kl


_KL_TYPES = {"kl": "k1", "k1": "k1", "mse": "k2", "k2": "k2", "k3": "low_var_kl"}
_KL_TYPES["low_var_kl"] = "low_var_kl"


def _kl_type(mode: str) -> str:
    if mode not in _KL_TYPES:  # abs, straight-through "+" modes: slime has none
        raise Unsupported(
            f"slime's compute_approx_kl has no estimator for mode {mode!r} "
            "(kl_loss_type is one of k1, k2, k3, low_var_kl)"
        )
    return _KL_TYPES[mode]


class SlimeKLOps:
    """kl.estimators, kl.importance_weighted through ``compute_approx_kl``."""

    def kl_penalty(
        self, logprob: torch.Tensor, ref_logprob: torch.Tensor, mode: str
    ) -> torch.Tensor:
        """``compute_approx_kl(logprob, ref, kl_loss_type)``, element-wise on any shape."""
        return self.fw.compute_approx_kl(logprob, ref_logprob, _kl_type(mode))

    def importance_weighted_kl(
        self,
        logprob: torch.Tensor,
        ref_logprob: torch.Tensor,
        old_logprob: torch.Tensor,
        mode: str,
    ) -> torch.Tensor:
        """``--use-unbiased-kl``: policy_loss_function passes
        ``importance_ratio = torch.exp(log_probs - old_log_probs)`` to compute_approx_kl."""
        ratio = torch.exp(logprob - old_logprob)
        return self.fw.compute_approx_kl(
            logprob, ref_logprob, _kl_type(mode), importance_ratio=ratio
        )

    def apply_kl_in_reward(
        self,
        token_level_scores: torch.Tensor,
        old_logprob: torch.Tensor,
        ref_logprob: torch.Tensor,
        response_mask: torch.Tensor,
        beta: float,
        mode: str,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``compute_advantages_and_returns`` with ``advantage_estimator="ppo"``: its token
        rewards are ``-kl_coef * compute_approx_kl(log_probs, ref, kl_loss_type)`` with the
        scalar reward added on the last response token. They are read back as its returns
        under gamma 0 and zero values (GAE then returns the token rewards themselves). The
        metric is what ``train_metric_utils.log_rollout_data`` reports as ``rollout/kl``.

        Inexpressible: token scores anywhere but on the last response token (slime's reward
        is one scalar per sample); a row with neither action token nor score (its response
        length is not in the padded layout); ``beta == 0`` (slime then computes no KL: no
        reference model).
        """
        kl_type = _kl_type(mode)
        if beta == 0:
            raise Inexpressible("kl_coef 0: slime loads no reference model and computes no KL")
        lengths = layout.response_lengths(response_mask, token_level_scores)
        scores = _rows(token_level_scores, lengths)
        rewards = []
        for i, (row, n) in enumerate(zip(scores, lengths, strict=True)):
            if n == 0:
                raise Inexpressible(
                    f"sample {i} has no action token and no score: its response length "
                    "(0, or tool tokens only) is not in the padded layout"
                )
            if bool((row[:-1] != 0).any()):
                raise Inexpressible(
                    f"sample {i}: token scores before its last response token; slime's "
                    "reward is one scalar placed on the last response token"
                )
            rewards.append(float(row[-1]))
        dtype = torch.float32  # slime's train-side log-probs (compute_approx_kl casts too)
        rollout_data = {
            "log_probs": [r.to(dtype) for r in _rows(old_logprob, lengths)],
            "ref_log_probs": [r.to(dtype) for r in _rows(ref_logprob, lengths)],
            "rewards": rewards,
            "values": [torch.zeros(n, dtype=dtype, device=old_logprob.device) for n in lengths],
            "response_lengths": list(lengths),
            "total_lengths": [n + 1 for n in lengths],  # a one-token prompt each
            "loss_masks": _int_rows(response_mask, lengths),
        }
        args = Namespace(
            advantage_estimator="ppo",
            kl_coef=float(beta),
            kl_loss_type=kl_type,
            gamma=0.0,
            lambd=1.0,
            use_rollout_logprobs=False,
            custom_advantage_function_path=None,
            use_opd=False,
            normalize_advantages=False,
        )
        self.fw.compute_advantages_and_returns(args, rollout_data)
        token_rewards = _back(rollout_data["returns"], token_level_scores)
        rollout_data["global_batch_sizes"] = [len(lengths)]
        metric = _logged("rollout/kl", self.fw.log_rollout_data, 0, _log_args(), rollout_data)
        return token_rewards, torch.as_tensor(metric, dtype=token_level_scores.dtype)


def _log_args() -> Namespace:
    """The logging flags ``log_rollout_data`` reads (no tracker, no extra logs)."""
    return Namespace(
        use_wandb=False,
        use_tensorboard=False,
        ci_test=False,
        log_multi_turn=False,
        log_passrate=False,
        log_correct_samples=False,
        wandb_always_use_train_step=False,
    )


def _logged(key: str, fn: Any, *args: Any) -> float:
    """The value slime's logger ``fn`` reports under ``key`` (one-rank job, recorded
    tracker: see ``runtime``)."""
    with runtime.one_rank_job(), runtime.recorded_tracker() as seen:
        fn(*args)
    reported = [m[key] for m in seen if key in m]
    if not reported:
        raise RuntimeError(
            f"slime logged no {key!r} (logged: {sorted(k for m in seen for k in m)})"
        )
    return float(reported[-1])


# ---------------------------------------------------------------------------------------
# offpolicy


class SlimeOffpolicyOps:
    """offpolicy.tis / icepop (weights seen through pg_loss = 1) and offpolicy.opsm."""

    def _tis(self, fn: Any, old, rollout, mask, low, high) -> torch.Tensor:
        lengths = layout.lengths_from_mask(mask)
        ones = torch.ones(sum(lengths), dtype=old.dtype, device=old.device)
        weighted, _, _ = fn(
            Namespace(tis_clip_low=low, tis_clip=high),
            pg_loss=ones,
            train_log_probs=_rows(old, lengths),
            rollout_log_probs=_rows(rollout, lengths),
            loss_masks=_int_rows(mask, lengths),
        )
        return _back(layout.unpack(weighted, lengths), old)

    def tis_weights(
        self,
        old_logprob: torch.Tensor,
        rollout_logprob: torch.Tensor,
        response_mask: torch.Tensor,
        clip_low: float | None = 0.0,
        clip_high: float | None = 2.0,
    ) -> torch.Tensor:
        """``vanilla_tis_function`` with a per-token loss of 1: its output is the weight."""
        return self._tis(
            self.fw.vanilla_tis_function,
            old_logprob,
            rollout_logprob,
            response_mask,
            clip_low,
            clip_high,
        )

    def icepop_weights(
        self,
        old_logprob: torch.Tensor,
        rollout_logprob: torch.Tensor,
        response_mask: torch.Tensor,
        clip_low: float | None = 0.5,
        clip_high: float | None = 2.0,
    ) -> torch.Tensor:
        """``icepop_function`` with a per-token loss of 1: its output is the weight."""
        return self._tis(
            self.fw.icepop_function,
            old_logprob,
            rollout_logprob,
            response_mask,
            clip_low,
            clip_high,
        )

    def opsm_mask(
        self,
        logprob: torch.Tensor,
        old_logprob: torch.Tensor,
        advantages: torch.Tensor,
        response_mask: torch.Tensor,
        delta: float = 1e-4,
    ) -> torch.Tensor:
        """``compute_opsm_mask(args(opsm_delta), log_probs, old, advantages, loss_masks)``."""
        lengths = layout.lengths_from_mask(response_mask)
        mask, _ = self.fw.compute_opsm_mask(
            Namespace(opsm_delta=delta),
            _rows(logprob, lengths),
            _rows(old_logprob, lengths),
            _rows(advantages, lengths),
            _int_rows(response_mask, lengths),
        )
        return _back(layout.unpack(mask, lengths), logprob)

    def _mis_args(self, mode: str, clip_min: float | None, clip_max: float | None) -> Namespace:
        """The MIS config (``--custom-config-path``) for a contract mode; Inexpressible
        where the example's bounds cannot say it."""
        try:
            level, action = split_mode(mode)
        except ValueError:
            raise Unsupported(f"compute_mis_weights has no mode {mode!r}") from None
        if clip_max is None:
            raise Inexpressible("compute_mis_weights always has an upper bound (tis_upper_bound)")
        if action == "truncate" and clip_min is None:
            tis_mode, lower = "truncate", None  # clamp(0, upper)
        elif action == "truncate":
            tis_mode, lower = "clip", clip_min
        else:
            # no lower bound: 0, as every ratio is >= 0 (slime's own default is 1/upper)
            tis_mode, lower = "mask", 0.0 if clip_min is None else clip_min
        if tis_mode != "truncate" and not lower < clip_max:
            raise Inexpressible(
                f"band [{lower}, {clip_max}]: compute_mis_weights asserts lower < upper"
            )
        sequence = (
            "geometric" if self.profile.get("is_sequence_log_ratio") == "mean" else "sequence"
        )
        return Namespace(
            use_tis=True,
            tis_level="token" if level == "token" else sequence,
            tis_mode=tis_mode,
            tis_lower_bound=lower,
            tis_upper_bound=clip_max,
            use_rs=False,
            rs_lower_bound=None,
            rs_upper_bound=None,
            rs_veto_threshold=None,
            tis_batch_normalize=False,
        )

    def is_correction_weights(
        self,
        old_logprob: torch.Tensor,
        rollout_logprob: torch.Tensor,
        response_mask: torch.Tensor,
        mode: str = "sequence_mask",
        clip_min: float | None = None,
        clip_max: float | None = 3.0,
    ) -> torch.Tensor:
        """``compute_mis_weights_with_cp`` (examples/train_infer_mismatch_helper, the
        ``--custom-tis-function-path`` hook policy_loss_function calls) with a per-token
        loss of 1: its ``pg_loss * is_weights`` is the weight; the rejection of mask mode
        is in the masks it returns, which policy_loss_function's rebuilt reducer applies
        (``x * mask`` in get_sum_of_sample_mean): the weight the loss sees is their product.
        """
        args = self._mis_args(mode, clip_min, clip_max)
        lengths = layout.lengths_from_mask(response_mask)
        ones = torch.ones(sum(lengths), dtype=old_logprob.dtype, device=old_logprob.device)
        weighted, masks, _ = self.fw.compute_mis_weights_with_cp(
            args,
            pg_loss=ones,
            train_log_probs=_rows(old_logprob, lengths),
            rollout_log_probs=_rows(rollout_logprob, lengths),
            loss_masks=_int_rows(response_mask, lengths),
            total_lengths=[n + 1 for n in lengths],
            response_lengths=list(lengths),
        )
        seen = weighted * _flat(list(masks), weighted)  # the rebuilt reducer's x * mask
        return _back(layout.unpack(seen, lengths), old_logprob)

    def logprob_gap(
        self,
        old_logprob: torch.Tensor,
        rollout_logprob: torch.Tensor,
        response_mask: torch.Tensor,
    ) -> torch.Tensor:
        """``train_rollout_logprob_abs_diff``: ``policy_loss_function`` through
        ``loss_function`` (old log-probs ``batch["log_probs"]``, any logits), reported by
        ``reduce_train_step_metrics`` as the training step logs it. Profile
        ``logprob_gap_reduction``: ``sample_mean`` is slime's default reducer (per-rollout
        means over the step's rollouts), ``token_mean`` is ``--calculate-per-token-loss``.
        """
        lengths = layout.lengths_from_mask(response_mask)
        per_token = self.profile.get("logprob_gap_reduction", "token_mean") == "token_mean"
        dtype = torch.float32  # slime's train-side log-probs
        batch = {
            "advantages": [torch.zeros(n, dtype=dtype) for n in lengths],
            "log_probs": [r.to(dtype) for r in _rows(old_logprob, lengths)],
            "rollout_log_probs": [r.to(dtype) for r in _rows(rollout_logprob, lengths)],
            "unconcat_tokens": [torch.zeros(n + 1, dtype=torch.long) for n in lengths],
            "response_lengths": list(lengths),
            "total_lengths": [n + 1 for n in lengths],
            "loss_masks": _int_rows(response_mask, lengths),
            "rollout_mask_sums": None,  # one sample per rollout: each sample's own mask sum
        }
        args = Namespace(
            loss_type="policy_loss",
            calculate_per_token_loss=per_token,
            recompute_loss_function=False,
            allgather_cp=False,
            use_rollout_logprobs=False,
            rollout_temperature=1.0,
            rollout_top_p=1.0,
            log_probs_chunk_size=-1,
            advantage_estimator="grpo",
            eps_clip=0.2,
            eps_clip_high=0.2,
            eps_clip_c=None,
            use_opsm=False,
            get_mismatch_metrics=False,
            use_tis=False,
            entropy_coef=0.0,
            use_kl_loss=False,
            custom_pg_loss_reducer_function_path=None,
        )
        logits = torch.zeros((1, sum(lengths) + len(lengths), 2), dtype=dtype)
        _, _, log = self.fw.loss_function(args, batch, 1, len(lengths), logits)
        reported = self.fw.reduce_train_step_metrics(
            [log],
            calculate_per_token_loss=per_token,
            step_global_batch_size=len(lengths),
            cp_size=1,
            dp_with_cp_group=runtime.single_rank_group(),
        )
        value = reported["train_rollout_logprob_abs_diff"]
        return torch.as_tensor(value, dtype=old_logprob.dtype, device=old_logprob.device)


# ---------------------------------------------------------------------------------------
# adv


class SlimeAdvantageOps:
    """adv.gae, adv.grpo, adv.reinforce_pp, adv.reinforce_pp_baseline.

    A response may end in mask-0 tokens that carry the reward (a final tool observation):
    slime's response then includes them, so L_i is one past the last action token or the
    last nonzero reward (``layout.response_lengths``; the protocol keeps reward padding 0).
    """

    def _whiten(self, rows: list[torch.Tensor], masks: list[torch.Tensor]) -> list[torch.Tensor]:
        """``--normalize-advantages``: compute_advantages_and_returns whitens
        ``cat(advantages)`` with ``cat(loss_masks)`` over the data-parallel group."""
        if not rows:
            return []
        lengths = [int(r.numel()) for r in rows]
        whitened = self.fw.distributed_masked_whiten(
            torch.cat(rows),
            torch.cat(masks),
            process_group=runtime.single_rank_group(),
            shift_mean=True,
        )
        return layout.unpack(whitened, lengths)

    @torch.no_grad()
    def advantage_gae(
        self,
        token_level_rewards: torch.Tensor,
        values: torch.Tensor,
        response_mask: torch.Tensor,
        gamma: float,
        lam: float,
        bootstrap_value: torch.Tensor | None = None,
        terminated: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``get_advantages_and_returns_batch`` (chunked GAE), then whitening.

        slime has no bootstrap: the value after the last response token is 0 for every
        sample, a length-truncated one included (profile ``truncated_bootstrap=False``).
        A truncated sample with a bootstrap value is inexpressible under a profile that
        says otherwise.
        """
        if (
            bootstrap_value is not None
            and terminated is not None
            and not bool(terminated.all())
            and self.profile.get("truncated_bootstrap", True)
        ):
            raise Inexpressible(
                "a truncated sample's bootstrap value: get_advantages_and_returns_batch "
                "takes none (the value after the last token is 0)"
            )
        lengths = layout.response_lengths(response_mask, token_level_rewards)
        adv, ret = self.fw.get_advantages_and_returns_batch(
            list(lengths),
            list(lengths),
            _rows(values.to(token_level_rewards.dtype), lengths),
            _rows(token_level_rewards, lengths),
            gamma,
            lam,
        )
        adv = self._whiten(list(adv), _int_rows(response_mask, lengths))
        return _back(adv, token_level_rewards), _back(ret, token_level_rewards)

    def _group_rewards(
        self, scores: list[float], index: Sequence[Any], estimator: str, norm_by_std: bool
    ) -> list[float]:
        order, n, groups = _contiguous_groups(index)
        args = Namespace(
            advantage_estimator=estimator,
            rewards_normalization=True,
            grpo_std_normalization=norm_by_std and n > 1,  # slime_validate_args
            n_samples_per_prompt=n,
            rollout_batch_size=groups,
            reward_key=None,
        )
        labels = index.tolist() if hasattr(index, "tolist") else list(index)
        dense: dict[Any, int] = {}
        group_index = [dense.setdefault(label, len(dense)) for label in labels]
        rewards = SlimeRewardOps._post_process(
            self, [scores[i] for i in order], args, [group_index[i] for i in order]
        )
        return _unorder(rewards, order)

    @torch.no_grad()
    def advantage_grpo(
        self,
        token_level_rewards: torch.Tensor,
        response_mask: torch.Tensor,
        index: Sequence[Any],
        epsilon: float = 1e-6,
        norm_by_std: bool = True,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``_post_process_rewards`` (group normalisation, eps 1e-6 fixed in slime), then
        ``get_grpo_returns``; advantages = returns."""
        lengths = layout.response_lengths(response_mask, token_level_rewards)
        rewards = self._group_rewards(
            _scores(token_level_rewards, lengths), index, "grpo", norm_by_std
        )
        kl = [
            torch.zeros(n, dtype=torch.float32, device=token_level_rewards.device) for n in lengths
        ]
        returns = self.fw.get_grpo_returns(torch.tensor(rewards, dtype=torch.float32), kl)
        out = _back(returns, token_level_rewards)
        return out, out.clone()

    def _reinforce_inputs(
        self, token_level_rewards: torch.Tensor, response_mask: torch.Tensor
    ) -> tuple[list[int], list[torch.Tensor], torch.Tensor, list[torch.Tensor]]:
        """slime's REINFORCE++ token reward is ``-kl_coef * kl_t * loss_mask_t`` plus the
        scalar reward on the last action token. The canonical rewards on action tokens go
        through that KL channel (kl_coef 1, kl = -r); a reward after the last action token
        (on a final tool observation) is the scalar reward, which slime puts where the
        contract credits it. A reward on a hole before an action token has no slime form."""
        lengths = layout.response_lengths(response_mask, token_level_rewards)
        masks = _int_rows(response_mask, lengths)
        rows = _rows(token_level_rewards, lengths)
        actions = layout.lengths_from_mask(response_mask)
        kl, scalars = [], []
        for i, (row, mask, last) in enumerate(zip(rows, masks, actions, strict=True)):
            held = row[:last][mask[:last] == 0]
            tail = row[last:][row[last:] != 0]
            if bool((held != 0).any()) or tail.numel() > 1:
                raise Inexpressible(
                    f"sample {i}: a reward on a mask-0 token before an action token (or "
                    "two after the last one): slime's REINFORCE++ reward is the KL term on "
                    "action tokens plus one scalar on the last action token"
                )
            kl.append(-torch.where(mask.bool(), row, torch.zeros_like(row)))
            scalars.append(float(tail[0]) if tail.numel() else 0.0)
        return lengths, kl, torch.tensor(scalars, dtype=token_level_rewards.dtype), masks

    @torch.no_grad()
    def advantage_reinforce_pp(
        self, token_level_rewards: torch.Tensor, response_mask: torch.Tensor, gamma: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``get_reinforce_plus_plus_returns``, then whitening; advantages = returns (inputs
        as ``_reinforce_inputs`` says)."""
        lengths, kl, scalars, masks = self._reinforce_inputs(token_level_rewards, response_mask)
        returns = self.fw.get_reinforce_plus_plus_returns(
            scalars, kl, masks, list(lengths), list(lengths), 1.0, gamma
        )
        advantages = self._whiten(list(returns), masks)
        return _back(advantages, token_level_rewards), _back(returns, token_level_rewards)

    @torch.no_grad()
    def advantage_reinforce_pp_baseline(
        self, token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: Sequence[Any]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``_post_process_rewards`` (group mean subtracted), then
        ``get_reinforce_plus_plus_baseline_advantages`` (kl_coef 0), then whitening."""
        lengths = layout.response_lengths(response_mask, token_level_rewards)
        rewards = self._group_rewards(
            _scores(token_level_rewards, lengths),
            index,
            "reinforce_plus_plus_baseline",
            False,
        )
        masks = _int_rows(response_mask, lengths)
        kl = [
            torch.zeros(n, dtype=torch.float32, device=token_level_rewards.device) for n in lengths
        ]
        advantages = self.fw.get_reinforce_plus_plus_baseline_advantages(
            torch.tensor(rewards, dtype=torch.float32), kl, masks, 0.0
        )
        advantages = self._whiten(list(advantages), masks)
        out = _back(advantages, token_level_rewards)
        return out, out.clone()


# ---------------------------------------------------------------------------------------
# loss


class SlimeLossOps:
    """loss.ppo_clip / dual_clip, loss.gspo, loss.cispo, loss.value_clip.

    Per-token losses come straight from slime; the ``clipfrac`` metric goes through
    slime's reducer as ``pg_clipfrac`` does (per-sample mean, divided by the sample count).
    """

    def _clipfrac(self, flags: torch.Tensor, masks, lengths, like: torch.Tensor) -> torch.Tensor:
        """The per-token flags reduced like ``pg_clipfrac``: through ``loss_function``'s
        reducer and scaling (profile ``calculate_per_token_loss``), as ``entropy_mean``."""
        flags = _back(layout.unpack(flags.to(like.dtype), lengths), like)
        mask = layout.from_lists(masks, like.shape[-1], dtype=torch.int64, device=like.device)
        per_token = bool(self.profile.get("calculate_per_token_loss", False))
        loss, normalizer = SlimeAggregateOps._slime_loss(self, flags.detach(), mask, per_token)
        return loss / normalizer.clamp(min=1) if per_token else loss

    def _policy_inputs(self, old_log_prob, log_prob, advantages, response_mask):
        lengths = layout.lengths_from_mask(response_mask)
        old = _rows(old_log_prob, lengths)
        new = _rows(log_prob, lengths)
        adv = _rows(advantages, lengths)
        return lengths, old, new, adv, _int_rows(response_mask, lengths)

    def ppo_clip_loss(
        self,
        old_log_prob: torch.Tensor,
        log_prob: torch.Tensor,
        advantages: torch.Tensor,
        response_mask: torch.Tensor,
        *,
        clip_ratio_low: float,
        clip_ratio_high: float,
        clip_ratio_c: float | None = None,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """``compute_policy_loss(ppo_kl = cat(old) - cat(new), cat(adv), eps...)``."""
        lengths, old, new, adv, masks = self._policy_inputs(
            old_log_prob, log_prob, advantages, response_mask
        )
        ppo_kl = _cat(old) - _cat(new)  # policy_loss_function
        loss, clipfrac = self.fw.compute_policy_loss(
            ppo_kl, _cat(adv), clip_ratio_low, clip_ratio_high, eps_clip_c=clip_ratio_c
        )
        rows = layout.unpack(loss, lengths)
        return _back(rows, log_prob), {
            "clipfrac": self._clipfrac(clipfrac, masks, lengths, log_prob)
        }

    def gspo_loss(
        self,
        old_log_prob: torch.Tensor,
        log_prob: torch.Tensor,
        advantages: torch.Tensor,
        response_mask: torch.Tensor,
        *,
        clip_ratio_low: float,
        clip_ratio_high: float,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """``compute_gspo_kl`` (sequence KL broadcast to tokens) into ``compute_policy_loss``."""
        lengths, old, new, adv, masks = self._policy_inputs(
            old_log_prob, log_prob, advantages, response_mask
        )
        ppo_kl = self.fw.compute_gspo_kl(new, old, new, masks)
        loss, clipfrac = self.fw.compute_policy_loss(
            ppo_kl, _cat(adv), clip_ratio_low, clip_ratio_high
        )
        rows = layout.unpack(loss, lengths)
        return _back(rows, log_prob), {
            "clipfrac": self._clipfrac(clipfrac, masks, lengths, log_prob)
        }

    def cispo_loss(
        self,
        old_log_prob: torch.Tensor,
        log_prob: torch.Tensor,
        advantages: torch.Tensor,
        response_mask: torch.Tensor,
        *,
        clip_ratio_low: float,
        clip_ratio_high: float,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """``compute_cispo_loss(ppo_kl, cat(new), cat(adv), eps_clip, eps_clip_high)``."""
        lengths, old, new, adv, masks = self._policy_inputs(
            old_log_prob, log_prob, advantages, response_mask
        )
        ppo_kl = _cat(old) - _cat(new)  # policy_loss_function
        loss, clipfrac = self.fw.compute_cispo_loss(
            ppo_kl, _cat(new), _cat(adv), clip_ratio_low, clip_ratio_high
        )
        rows = layout.unpack(loss, lengths)
        return _back(rows, log_prob), {
            "clipfrac": self._clipfrac(clipfrac, masks, lengths, log_prob)
        }

    def value_loss(
        self,
        vpreds: torch.Tensor,
        returns: torch.Tensor,
        values: torch.Tensor,
        response_mask: torch.Tensor,
        *,
        cliprange_value: float,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """``value_loss_function``: the value head output is packed as [1, T, 1] with a
        one-token prompt per sample; its reducer argument records the per-token loss and
        clip flags (the reduced metric goes through slime's reducer like pg_clipfrac)."""
        lengths = layout.lengths_from_mask(response_mask)
        tokens, rows, totals = [], [], []
        for i, n in enumerate(lengths):
            tokens.append(torch.zeros(n + 1, dtype=torch.long, device=vpreds.device))
            rows.append(torch.cat([vpreds[i, :n], vpreds.new_zeros(1)]))
            totals.append(n + 1)
        packed = torch.cat(rows) if rows else vpreds.new_zeros(0)
        batch = {
            "values": _rows(values, lengths),
            "returns": _rows(returns, lengths),
            "unconcat_tokens": tokens,
            "total_lengths": totals,
            "response_lengths": list(lengths),
        }
        capture = _Capture()
        args = Namespace(value_clip=cliprange_value, allgather_cp=False, rollout_temperature=1.0)
        self.fw.value_loss_function(args, batch, packed.reshape(1, -1, 1), capture)
        loss_flat, clip_flags = capture.seen[0], capture.seen[1]
        masks = _int_rows(response_mask, lengths)
        return _back(layout.unpack(loss_flat, lengths), vpreds), {
            "vf_clipfrac": self._clipfrac(clip_flags, masks, lengths, vpreds)
        }

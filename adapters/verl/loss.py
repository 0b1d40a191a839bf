"""verl bindings for the CONTRACT area `loss`: the registered policy losses of
``core_algos.POLICY_LOSS_REGISTRY`` and ``core_algos.compute_value_loss``.

verl's losses return the aggregated scalar only. The per-token loss matrix the contract
compares is the ``loss_mat`` each loss hands to ``core_algos.agg_loss``: while the loss runs,
``agg_loss`` is wrapped to record that argument (and still does the aggregation), and the
original is put back right after. The recorded tensor is verl's own, autograd graph
included, so gradients are verl's too.

``geo_mean`` (GMPO) never calls ``agg_loss``: it returns the plain mean over rows of its
per-sequence losses. Called on a one-row batch, that mean is the row's own sequence loss,
which the contract places on each action token of the row.

``compute_value_loss`` scales the aggregate by its own factor after ``agg_loss``; the
per-token value loss is read as verl's ``token-sum`` aggregate over a mask that keeps just
that token, so verl's factor is included without the adapter knowing it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch


@contextlib.contextmanager
def _recorded_loss_matrices() -> Iterator[list[torch.Tensor]]:
    """Record every ``loss_mat`` passed to ``core_algos.agg_loss`` inside the block."""
    from verl.trainer.ppo import core_algos

    original = core_algos.agg_loss
    recorded: list[torch.Tensor] = []

    def recording(loss_mat: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        recorded.append(loss_mat)
        return original(loss_mat, *args, **kwargs)

    core_algos.agg_loss = recording
    try:
        yield recorded
    finally:
        core_algos.agg_loss = original


def _actor_config(clip_ratio_low: float, clip_ratio_high: float, clip_ratio_c: float) -> Any:
    """The smallest ActorConfig verl's losses accept (token-mean, no global batch info)."""
    from verl.workers.config import ActorConfig

    return ActorConfig(
        strategy="fsdp",
        rollout_n=1,
        ppo_micro_batch_size_per_gpu=1,
        clip_ratio_low=clip_ratio_low,
        clip_ratio_high=clip_ratio_high,
        clip_ratio_c=clip_ratio_c,
    )


def _registered_loss(
    name: str,
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    config: Any,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Run verl's registered loss ``name``; return its agg_loss input and its clipfrac."""
    from verl.trainer.ppo.core_algos import get_policy_loss_fn

    loss_fn = get_policy_loss_fn(name)
    with _recorded_loss_matrices() as recorded:
        _, metrics = loss_fn(
            old_log_prob=old_log_prob,
            log_prob=log_prob,
            advantages=advantages,
            response_mask=response_mask,
            loss_agg_mode="token-mean",
            config=config,
        )
    if len(recorded) != 1:
        raise RuntimeError(f"verl's {name!r} loss called agg_loss {len(recorded)} times, not once")
    clipfrac = torch.as_tensor(metrics["actor/pg_clipfrac"], dtype=log_prob.dtype)
    return recorded[0], {"clipfrac": clipfrac}


class LossOps:
    """`loss` operations through verl's registered policy losses and value loss."""

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
        """loss.ppo_clip / loss.dual_clip: registry ``vanilla``.

        verl's vanilla loss always applies the dual clip at ``clip_ratio_c``; without one,
        the bound is +inf (verl only asserts it exceeds 1), i.e. no dual clip.
        """
        bound = float("inf") if clip_ratio_c is None else clip_ratio_c
        config = _actor_config(clip_ratio_low, clip_ratio_high, bound)
        return _registered_loss(
            "vanilla", old_log_prob, log_prob, advantages, response_mask, config
        )

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
        """loss.gspo: registry ``gspo``."""
        config = _actor_config(clip_ratio_low, clip_ratio_high, 3.0)
        return _registered_loss("gspo", old_log_prob, log_prob, advantages, response_mask, config)

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
        """loss.cispo: registry ``cispo``."""
        config = _actor_config(clip_ratio_low, clip_ratio_high, 3.0)
        return _registered_loss("cispo", old_log_prob, log_prob, advantages, response_mask, config)

    def dppo_tv_loss(
        self,
        old_log_prob: torch.Tensor,
        log_prob: torch.Tensor,
        advantages: torch.Tensor,
        response_mask: torch.Tensor,
        *,
        clip_ratio_low: float,
        clip_ratio_high: float,
        clip_ratio_c: float,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """loss.dppo_tv: registry ``dppo_tv`` (clip_ratio_c caps the detached ratio)."""
        config = _actor_config(clip_ratio_low, clip_ratio_high, clip_ratio_c)
        return _registered_loss(
            "dppo_tv", old_log_prob, log_prob, advantages, response_mask, config
        )

    def gmpo_loss(
        self,
        old_log_prob: torch.Tensor,
        log_prob: torch.Tensor,
        advantages: torch.Tensor,
        response_mask: torch.Tensor,
        *,
        clip_ratio_low: float,
        clip_ratio_high: float,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """loss.gmpo: registry ``geo_mean``, one row at a time (see the module docstring);
        clipfrac is verl's ``pg_clipfrac`` + ``pg_clipfrac_lower`` of the whole batch (the
        clip on A > 0 and on A < 0 tokens)."""
        from verl.trainer.ppo.core_algos import get_policy_loss_fn

        loss_fn = get_policy_loss_fn("geo_mean")
        config = _actor_config(clip_ratio_low, clip_ratio_high, 3.0)
        rows = []
        for i in range(log_prob.shape[0]):
            row_loss, _ = loss_fn(
                old_log_prob=old_log_prob[i : i + 1],
                log_prob=log_prob[i : i + 1],
                advantages=advantages[i : i + 1],
                response_mask=response_mask[i : i + 1],
                loss_agg_mode="token-mean",
                config=config,
            )
            on_actions = response_mask[i].bool()
            rows.append(torch.where(on_actions, row_loss.expand_as(on_actions), 0.0))
        _, metrics = loss_fn(
            old_log_prob=old_log_prob,
            log_prob=log_prob,
            advantages=advantages,
            response_mask=response_mask,
            loss_agg_mode="token-mean",
            config=config,
        )
        shares = metrics["actor/pg_clipfrac"] + metrics["actor/pg_clipfrac_lower"]
        loss = torch.stack(rows) if rows else log_prob.new_zeros(log_prob.shape)
        return loss, {"clipfrac": torch.as_tensor(shares, dtype=log_prob.dtype)}

    def value_loss(
        self,
        vpreds: torch.Tensor,
        returns: torch.Tensor,
        values: torch.Tensor,
        response_mask: torch.Tensor,
        *,
        cliprange_value: float,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """loss.value_clip: ``core_algos.compute_value_loss`` (per token: see the module
        docstring); vf_clipfrac from the call over the whole mask."""
        from verl.trainer.ppo.core_algos import compute_value_loss

        def call(mask: torch.Tensor, mode: str) -> tuple[torch.Tensor, torch.Tensor]:
            return compute_value_loss(
                vpreds=vpreds,
                returns=returns,
                values=values,
                response_mask=mask,
                cliprange_value=cliprange_value,
                loss_agg_mode=mode,
            )

        _, clipfrac = call(response_mask, "token-mean")
        # zeros that belong to the graph of vpreds (a batch without action tokens included)
        loss = torch.where(torch.zeros_like(response_mask, dtype=torch.bool), vpreds, 0.0)
        for i, t in response_mask.nonzero().tolist():
            only_this_token = torch.zeros_like(response_mask)
            only_this_token[i, t] = 1
            token_loss, _ = call(only_this_token, "token-sum")
            loss = loss.index_put((torch.tensor(i), torch.tensor(t)), token_loss)
        return loss, {"vf_clipfrac": torch.as_tensor(clipfrac, dtype=vpreds.dtype)}

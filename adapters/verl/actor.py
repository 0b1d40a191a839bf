"""verl bindings for the CONTRACT area `loss`: the engine workers' actor and critic losses
(``verl.workers.utils.losses.ppo_loss`` / ``value_loss``), called as the engine calls them.

The engine hands ``ppo_loss`` a micro-batch (``TensorDict``) and the model output: the
log-probs of every sequence position as a nested tensor, which ``ppo_loss`` cuts to the
responses itself (``no_padding_2_padding``: the model output is left-shifted by one token).
The adapter builds that micro-batch with a one-token prompt per row and the whole padded
width as the response (prompts / responses nested in the v1 trainer, padded with the
attention mask under ``RayPPOTrainer``: ``Release.nested_micro_batches``), so the cut
returns exactly the given (B, T) tensors, autograd graph included; ``dp_size``, ``batch_num_tokens`` and ``global_batch_size`` are what the engine
sets for one data-parallel rank holding the whole mini-batch (the all-reduced
``loss_mask.sum()`` and ``ppo_mini_batch_size * rollout.n``).

The contract compares per-token losses; ``ppo_loss`` returns the aggregate. For the policy
losses the per-token matrix is the ``loss_mat`` the registered loss hands to
``core_algos.agg_loss`` (recorded while the call runs; verl's own tensor). GMPO
(``geo_mean``) reduces by itself with ``torch.mean`` over the micro-batch's rows and never
calls ``agg_loss``: its per-row loss is ``ppo_loss`` on a micro-batch of that row alone (a
micro-batch size the engine runs), written on the row's action tokens. The actor's total
(``actor_loss``) and the critic's value loss are read per token as ``ppo_loss`` /
``value_loss`` over a mask that keeps that one token, so verl's own
composition (pg - entropy_coeff * entropy + kl_loss_coef * kl) is what is compared: the
actor's total and the critic's value loss per token are the call in ``token-mean`` mode on a
micro-batch whose only action token is that one (denominator 1; every release has the mode).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import torch

from rlconform.adapters.base import Inexpressible

_GIVEN = "rlconform_given_pg_loss"
# contract policy-loss modes -> verl's registered loss names
_LOSS_MODES = {
    "ppo_clip": "vanilla",
    "dual_clip": "vanilla",
    "gspo": "gspo",
    "gmpo": "geo_mean",
    "cispo": "cispo",
    "dppo_tv": "dppo_tv",
}


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


@contextlib.contextmanager
def _given_policy_loss(pg_loss: torch.Tensor) -> Iterator[str]:
    """A registered policy loss that returns ``pg_loss`` through verl's ``agg_loss``, so
    ``ppo_loss`` composes a given per-token policy term (the registry entry is removed
    again right after)."""
    from verl.trainer.ppo import core_algos

    def given(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, config, **kw):
        aggregate = core_algos.agg_loss(
            loss_mat=pg_loss,
            loss_mask=response_mask,
            loss_agg_mode=loss_agg_mode,
            **config.global_batch_info,
        )
        return aggregate, {}

    registry = core_algos.POLICY_LOSS_REGISTRY
    registry[_GIVEN] = given
    try:
        yield _GIVEN
    finally:
        registry.pop(_GIVEN, None)


def _actor_config(loss_mode: str, **fields: Any) -> Any:
    from verl.workers.config import ActorConfig
    from verl.workers.config.actor import PolicyLossConfig

    return ActorConfig(
        strategy="fsdp",
        rollout_n=1,
        ppo_micro_batch_size_per_gpu=1,
        policy_loss=PolicyLossConfig(loss_mode=loss_mode),
        **fields,
    )


def _sequence_output(values: torch.Tensor) -> torch.Tensor:
    """(B, T) per-response-token values as the model output ``ppo_loss`` cuts: one nested
    row of 1 + T positions per sample, position t holding the value of response token t."""
    rows, width = values.shape
    filler = values.new_zeros((rows, 1))
    flat = torch.cat([values, filler], dim=1).reshape(-1)
    offsets = torch.arange(0, rows * (width + 1) + 1, width + 1, device=values.device)
    return torch.nested.nested_tensor_from_jagged(flat, offsets=offsets)


def _micro_batch(
    nested: bool,
    fields: dict[str, torch.Tensor],
    response_mask: torch.Tensor,
    batch_num_tokens: int,
    global_batch_size: int | None = None,
    dp_size: int = 1,
) -> Any:
    """The micro-batch the engine hands the loss: prompts / responses nested as the v1
    TransferQueue stores them (``nested``), or padded with the attention mask as
    ``RayPPOTrainer``'s ``left_right_2_no_padding`` leaves them."""
    from tensordict import TensorDict
    from verl.utils import tensordict_utils as tu

    rows, width = response_mask.shape
    if rows == 0:
        raise Inexpressible(
            "a batch of no samples: the engine hands the loss its model output as a nested "
            "(ragged) tensor, which cannot have zero rows"
        )
    device = response_mask.device
    prompts = torch.zeros((rows, 1), dtype=torch.int64, device=device)
    responses = torch.zeros((rows, width), dtype=torch.int64, device=device)
    layout = {"prompts": prompts, "responses": responses}
    if nested:
        layout = {
            name: torch.nested.as_nested_tensor(list(value), layout=torch.jagged)
            for name, value in layout.items()
        }
    else:
        layout["attention_mask"] = torch.ones((rows, 1 + width), dtype=torch.int64, device=device)
    data = TensorDict({**layout, "response_mask": response_mask, **fields}, batch_size=[rows])
    tu.assign_non_tensor(
        data,
        dp_size=dp_size,
        batch_num_tokens=batch_num_tokens,
        global_batch_size=rows if global_batch_size is None else global_batch_size,
    )
    return data


def _value(metric: Any) -> float:
    """A reported metric: verl's ``Metric`` (aggregated) or a plain number."""
    return float(metric.aggregate()) if hasattr(metric, "aggregate") else float(metric)


def _graph_zeros(*inputs: torch.Tensor) -> torch.Tensor:
    """Zeros of the inputs' shape that belong to their autograd graphs (so a batch without an
    action token still has a differentiable, zero loss)."""
    zeros = torch.zeros_like(inputs[0])
    for x in inputs:
        zeros = torch.where(torch.zeros_like(x, dtype=torch.bool), x, zeros)
    return zeros


def _per_token(call: Any, response_mask: torch.Tensor, *inputs: torch.Tensor) -> torch.Tensor:
    """The (B, T) matrix whose token (i, t) is ``call(mask keeping only (i, t))``."""
    out = _graph_zeros(*inputs)
    for i, t in response_mask.nonzero().tolist():
        only = torch.zeros_like(response_mask)
        only[i, t] = 1
        out = out.index_put((torch.tensor(i), torch.tensor(t)), call(only).reshape(()))
    return out


class ActorLossOps:
    """`loss` operations through ``losses.ppo_loss`` and ``losses.value_loss``."""

    def _ppo_loss(
        self,
        config: Any,
        log_prob: torch.Tensor,
        response_mask: torch.Tensor,
        fields: dict[str, torch.Tensor],
        entropy: torch.Tensor | None = None,
        mini_batch_mask: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        """``ppo_loss`` on one micro-batch of the mini-batch whose mask is
        ``mini_batch_mask`` (default: the micro-batch is the whole mini-batch)."""
        from verl.workers.utils.losses import ppo_loss

        model_output = {"log_probs": _sequence_output(log_prob)}
        if entropy is not None:
            model_output["entropy"] = _sequence_output(entropy)
        whole = response_mask if mini_batch_mask is None else mini_batch_mask
        data = _micro_batch(
            self.release.nested_micro_batches,
            fields,
            response_mask,
            int(whole.sum()),
            whole.shape[0],
        )
        return ppo_loss(config, model_output, data)

    def _policy_loss(
        self,
        loss_mode: str,
        old_log_prob: torch.Tensor,
        log_prob: torch.Tensor,
        advantages: torch.Tensor,
        response_mask: torch.Tensor,
        **clips: float,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        config = _actor_config(loss_mode, **clips)
        fields = {"old_log_probs": old_log_prob, "advantages": advantages}
        with _recorded_loss_matrices() as recorded:
            _, metrics = self._ppo_loss(config, log_prob, response_mask, fields)
        if len(recorded) != 1:
            raise RuntimeError(
                f"verl's {loss_mode!r} loss called agg_loss {len(recorded)} times, not once"
            )
        clipfrac = torch.as_tensor(_value(metrics["actor/pg_clipfrac"]), dtype=log_prob.dtype)
        return recorded[0], {"clipfrac": clipfrac}

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
        """loss.ppo_clip / loss.dual_clip: ``vanilla``. verl always applies the dual clip at
        ``clip_ratio_c``; without one the bound is +inf (verl only asserts it exceeds 1)."""
        bound = float("inf") if clip_ratio_c is None else clip_ratio_c
        return self._policy_loss(
            "vanilla",
            old_log_prob,
            log_prob,
            advantages,
            response_mask,
            clip_ratio_low=clip_ratio_low,
            clip_ratio_high=clip_ratio_high,
            clip_ratio_c=bound,
        )

    def gspo_loss(
        self, old_log_prob, log_prob, advantages, response_mask, *, clip_ratio_low, clip_ratio_high
    ):
        """loss.gspo: ``gspo``."""
        return self._policy_loss(
            "gspo",
            old_log_prob,
            log_prob,
            advantages,
            response_mask,
            clip_ratio_low=clip_ratio_low,
            clip_ratio_high=clip_ratio_high,
        )

    def cispo_loss(
        self, old_log_prob, log_prob, advantages, response_mask, *, clip_ratio_low, clip_ratio_high
    ):
        """loss.cispo: ``cispo``."""
        return self._policy_loss(
            "cispo",
            old_log_prob,
            log_prob,
            advantages,
            response_mask,
            clip_ratio_low=clip_ratio_low,
            clip_ratio_high=clip_ratio_high,
        )

    def sapo_loss(self, old_log_prob, log_prob, advantages, response_mask, *, tau_pos, tau_neg):
        """loss.sapo: ``sapo`` with ``ActorConfig.tau_pos`` / ``tau_neg`` (the per-token loss
        is the ``loss_mat`` it aggregates; its pg_clipfrac is a constant 0, no metric of the
        clause)."""
        loss, _ = self._policy_loss(
            "sapo",
            old_log_prob,
            log_prob,
            advantages,
            response_mask,
            tau_pos=float(tau_pos),
            tau_neg=float(tau_neg),
        )
        return loss, {}

    def dppo_tv_loss(
        self,
        old_log_prob,
        log_prob,
        advantages,
        response_mask,
        *,
        clip_ratio_low,
        clip_ratio_high,
        clip_ratio_c,
    ):
        """loss.dppo_tv: ``dppo_tv`` (clip_ratio_c caps the detached ratio)."""
        return self._policy_loss(
            "dppo_tv",
            old_log_prob,
            log_prob,
            advantages,
            response_mask,
            clip_ratio_low=clip_ratio_low,
            clip_ratio_high=clip_ratio_high,
            clip_ratio_c=clip_ratio_c,
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
        """loss.gmpo: ``geo_mean`` through ``ppo_loss``, one row per micro-batch for the
        per-row loss (module docstring); clipfrac is verl's ``pg_clipfrac`` +
        ``pg_clipfrac_lower`` of the whole batch (the clip on A > 0 and on A < 0 tokens)."""
        clips = {"clip_ratio_low": clip_ratio_low, "clip_ratio_high": clip_ratio_high}
        fields = {"old_log_probs": old_log_prob, "advantages": advantages}
        out = _graph_zeros(log_prob, advantages)
        for i in range(log_prob.shape[0]):
            row = slice(i, i + 1)
            loss, _ = self._ppo_loss(
                _actor_config("geo_mean", **clips),
                log_prob[row],
                response_mask[row],
                {name: value[row] for name, value in fields.items()},
                mini_batch_mask=response_mask,
            )
            on_actions = response_mask[i].bool()
            out = out.index_put((torch.tensor(i),), torch.where(on_actions, loss, out[i]))
        _, metrics = self._ppo_loss(
            _actor_config("geo_mean", **clips), log_prob, response_mask, fields
        )
        shares = _value(metrics["actor/pg_clipfrac"]) + _value(metrics["actor/pg_clipfrac_lower"])
        return out, {"clipfrac": torch.as_tensor(shares, dtype=log_prob.dtype)}

    def policy_loss_reduced(
        self,
        mode: str,
        old_log_prob: torch.Tensor,
        log_prob: torch.Tensor,
        advantages: torch.Tensor,
        response_mask: torch.Tensor,
        *,
        clip_ratio_low: float,
        clip_ratio_high: float,
        clip_ratio_c: float | None = None,
        global_batch_info: dict[str, Any],
    ) -> torch.Tensor:
        """loss.* (reduced, shard_invariance): the scalar ``ppo_loss`` returns for one
        micro-batch, i.e. what the engine back-propagates and sums over micro-batches: the
        registered loss of ``mode`` in the actor's ``loss_agg_mode`` (profile), with the
        mini-batch's ``dp_size`` / ``batch_num_tokens`` / ``global_batch_size`` in the
        micro-batch and ``loss_scale_factor`` in the config, as the engine sets them."""
        loss_mode = _LOSS_MODES[mode]
        fields = {"clip_ratio_low": clip_ratio_low, "clip_ratio_high": clip_ratio_high}
        if mode == "ppo_clip" or clip_ratio_c is not None:
            fields["clip_ratio_c"] = float("inf") if clip_ratio_c is None else clip_ratio_c
        config = _actor_config(
            loss_mode,
            loss_agg_mode=self.profile.get("loss_agg_mode", "token-mean"),
            loss_scale_factor=global_batch_info.get("loss_scale_factor"),
            **fields,
        )
        data = _micro_batch(
            self.release.nested_micro_batches,
            {"old_log_probs": old_log_prob, "advantages": advantages},
            response_mask,
            global_batch_info["batch_num_tokens"],
            global_batch_info["global_batch_size"],
            dp_size=global_batch_info.get("dp_size", 1),
        )
        from verl.workers.utils.losses import ppo_loss

        loss, _ = ppo_loss(config, {"log_probs": _sequence_output(log_prob)}, data)
        return loss

    def actor_loss(
        self,
        pg_loss: torch.Tensor,
        entropy: torch.Tensor,
        kl: torch.Tensor,
        response_mask: torch.Tensor,
        *,
        entropy_coeff: float,
        kl_coef: float,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """loss.total / loss.entropy_bonus: ``ppo_loss`` composing the given per-token policy
        term (a registered stand-in that aggregates it with ``agg_loss``), the entropy of the
        model output and the KL loss. The KL term is verl's ``kl_penalty`` in ``k1`` form of
        log-probs ``kl`` against a reference of 0, i.e. the given KL values themselves."""
        fields = {
            "old_log_probs": torch.zeros_like(kl),
            "advantages": torch.zeros_like(kl),
            "ref_log_prob": torch.zeros_like(kl),
        }
        with _given_policy_loss(pg_loss) as name:

            def config(mode: str) -> Any:
                return _actor_config(
                    name,
                    loss_agg_mode=mode,
                    entropy_coeff=entropy_coeff,
                    use_kl_loss=True,
                    kl_loss_coef=kl_coef,
                    kl_loss_type="k1",
                )

            def one_token(mask: torch.Tensor) -> torch.Tensor:
                loss, _ = self._ppo_loss(config("token-mean"), kl, mask, fields, entropy)
                return loss

            total = _per_token(one_token, response_mask, pg_loss, entropy, kl)
            _, metrics = self._ppo_loss(config("token-mean"), kl, response_mask, fields, entropy)
        reported = {
            "pg_loss": _value(metrics["actor/pg_loss"]),
            "entropy": _value(metrics["actor/entropy_loss"]),
            "kl_loss": _value(metrics["kl_loss"]),
        }
        return total, {k: torch.as_tensor(v, dtype=pg_loss.dtype) for k, v in reported.items()}

    def value_loss(
        self,
        vpreds: torch.Tensor,
        returns: torch.Tensor,
        values: torch.Tensor,
        response_mask: torch.Tensor,
        *,
        cliprange_value: float,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """loss.value_clip: the critic's ``losses.value_loss`` per token (module docstring);
        vf_clipfrac from the call over the whole mask."""
        from verl.workers.config import CriticConfig
        from verl.workers.utils.losses import value_loss

        # 0.7's CriticConfig loads a Hugging Face model config unless it is given one; the
        # value loss never reads it
        model = {"model_config": SimpleNamespace()} if self.release.critic_model_config else {}

        def call(mask: torch.Tensor, mode: str) -> tuple[torch.Tensor, dict[str, Any]]:
            config = CriticConfig(
                strategy="fsdp",
                rollout_n=1,
                ppo_micro_batch_size_per_gpu=1,
                cliprange_value=cliprange_value,
                loss_agg_mode=mode,
                **model,
            )
            data = _micro_batch(
                self.release.nested_micro_batches,
                {"values": values, "returns": returns},
                mask,
                int(mask.sum()),
            )
            return value_loss(config, {"values": _sequence_output(vpreds)}, data)

        _, metrics = call(response_mask, "token-mean")
        loss = _per_token(lambda mask: call(mask, "token-mean")[0], response_mask, vpreds)
        clipfrac = torch.as_tensor(_value(metrics["critic/vf_clipfrac"]), dtype=vpreds.dtype)
        return loss, {"vf_clipfrac": clipfrac}

"""Clauses of the CONTRACT area `loss`.

Every policy-loss operation has the signature ``op(old_log_prob, log_prob, advantages,
response_mask, *, clip_ratio_low, clip_ratio_high[, clip_ratio_c]) -> (loss (B, T),
metrics)`` with ``response_mask`` = 1 on action tokens and ``metrics["clipfrac"]`` a scalar.
Each check compares

1. the per-token loss on action tokens (other positions are ignored),
2. the scalar ``S = sum over action tokens of loss / N`` that the clause computes itself
   (a plain masked token-mean; aggregation modes are the `agg.*` clauses' business),
3. ``dS / d log_prob`` (autograd through the target) with the oracle's analytic gradient
   on action tokens, and exactly 0 everywhere else,
4. the metrics;
5. where the target implements ``policy_loss_reduced(mode, old, log_prob, adv, mask, *,
   clip_ratio_low, clip_ratio_high, clip_ratio_c, global_batch_info)`` (the loss of one
   micro-batch reduced to a scalar the way the trainer reduces it, with the mini-batch's
   global denominators ``{"dp_size", "batch_num_tokens", "global_batch_size",
   "loss_scale_factor"}``): ``reduced``, the full batch's scalar equals the oracle's per-token
   loss aggregated in the profile's ``loss_agg_mode`` (default token-mean; CONTRACT: every
   loss reaches its scalar through the configured mode with the global denominators), and
   ``shard_invariance``, the batch split into micro-batches, each reduced with the same
   global denominators and the scalars summed (as a trainer accumulates micro-batches),
   equals the full batch's scalar.

Padding (and only padding) holds the case's ``pad_value`` (0, NaN, inf, garbage) in every
input; mask holes hold ordinary finite values. Neither may reach the loss or the gradient.

Tolerance (CONTRACT §4): float error of exp(log-ratio) grows with |log-ratio| (and, for the
sequence losses, with the sum of |log-ratio| over the sample), so each element's allowed
error is scaled by ``magnitude * (1 + sum |x|)``. Branch points (ratio at a clip bound,
|log-ratio| at 20, the TV gap at its threshold, a value tie) are where float32 rounding may
legitimately pick the other branch: the generators keep every action token at least a
relative 1e-4 away from them, and the pinned examples are chosen the same way.
"""

from __future__ import annotations

import dataclasses
import math
import struct
from collections.abc import Callable
from typing import Any

import torch
from hypothesis import assume
from hypothesis import strategies as st

from rlconform.conformance import strategies as cs
from rlconform.conformance.compare import (
    Tolerance,
    assert_rows_close,
    assert_scalar_close,
    overflowed,
    with_actual_at,
)
from rlconform.conformance.errors import ClauseMismatch, TargetError
from rlconform.conformance.features import allows
from rlconform.conformance.harness import pad_right, to_float_list, unpad_right
from rlconform.conformance.registry import clause
from rlconform.oracle import loss as oracle

NAN = float("nan")
INF = float("inf")
LN2 = math.log(2.0)
_BRANCH_MARGIN = 1e-4
_NUDGE = 0.0137


def _f32(x: float) -> float:
    """x rounded to the nearest float32 (cases hold float32-exact numbers)."""
    return struct.unpack("<f", struct.pack("<f", x))[0]


# Shared plumbing ------------------------------------------------------------------------


def _masks(case: dict[str, Any]) -> list[list[int]]:
    return [list(s["mask"]) for s in case["samples"]]


def _padded_inputs(
    ctx: Any, case: dict[str, Any], fields: tuple[str, ...]
) -> tuple[dict[str, torch.Tensor], dict[str, list[list[float]]], torch.Tensor]:
    """Each field as a padded tensor (padding = pad_value) and, for the oracle, the valid
    values read back from that tensor (so both sides see the same dtype-rounded numbers)."""
    lengths = cs.lengths_of(case)
    width = cs.width_of_case(case)
    tensors, ragged = {}, {}
    for name in fields:
        tensor = ctx.floats([s[name] for s in case["samples"]], fill=case["pad_value"], width=width)
        tensors[name] = tensor
        ragged[name] = unpad_right(tensor, lengths)
    action = pad_right(_masks(case), width=width, dtype=torch.int64, device=ctx.device)
    return tensors, ragged, action


def _unpack(
    clause_id: str,
    result: Any,
    metric_keys: tuple[str, ...],
    optional: tuple[str, ...] = (),
) -> tuple[torch.Tensor, dict[str, float]]:
    """(loss, metrics as floats). A metric in ``optional`` may be ``None`` (the framework
    computes none): it is left out, and its check is not made. A key in ``metric_keys``
    must be present; it too may be ``None`` where the bound function computes no such
    metric (Unsloth's clip ratios are logged by its generated trainer, not by the loss)."""
    if not (isinstance(result, tuple) and len(result) == 2 and isinstance(result[1], dict)):
        raise ClauseMismatch(
            f"[{clause_id}] the operation must return (loss, metrics dict), got {type(result).__name__}",
            check="shape",
        )
    loss, metrics = result
    values = {}
    for key in metric_keys:
        if key not in metrics:
            raise ClauseMismatch(
                f"[{clause_id}] metric {key!r} is missing (got {sorted(metrics)})", check="shape"
            )
        if metrics[key] is not None:
            values[key] = float(torch.as_tensor(metrics[key]).detach().to("cpu", torch.float64))
    for key in optional:
        if metrics.get(key) is not None:
            values[key] = float(torch.as_tensor(metrics[key]).detach().to("cpu", torch.float64))
    return loss, values


def _assert_shape(clause_id: str, what: str, tensor: Any, shape: tuple[int, int]) -> None:
    actual = tuple(getattr(tensor, "shape", ()))
    if actual != shape:
        raise ClauseMismatch(
            f"[{clause_id}] {what}: shape {actual}, expected {shape}", check="shape"
        )


def _on_actions(rows: list[list[float]], masks: list[list[int]]) -> list[list[float]]:
    """Rows with every non-action position set to 0.0 (those positions are not compared)."""
    return [
        [float(v) if m else 0.0 for v, m in zip(row, mask, strict=True)]
        for row, mask in zip(rows, masks, strict=True)
    ]


def _assert_action_rows_close(
    clause_id: str,
    what: str,
    expected: list[list[float]],
    actual: list[list[float]],
    masks: list[list[int]],
    uids: list[Any],
    tolerance: Tolerance,
    scale: list[list[float]],
) -> None:
    assert_rows_close(
        clause_id,
        what,
        _on_actions(expected, masks),
        _on_actions(actual, masks),
        uids=uids,
        tolerance=tolerance,
        scale=scale,
    )


def _assert_zero_off_actions(
    clause_id: str, what: str, tensor: torch.Tensor, masks: list[list[int]], uids: list[Any]
) -> None:
    """Gradient hygiene: exactly 0 on mask holes and padding (NaN is not 0)."""
    for i, row in enumerate(to_float_list(tensor)):
        for t, value in enumerate(row):
            is_action = t < len(masks[i]) and masks[i][t]
            if not is_action and value != 0.0:
                where = "padding" if t >= len(masks[i]) else "a non-action token"
                raise ClauseMismatch(
                    f"[{clause_id}] {what}: not zero on {where} at sample uid={uids[i]!r}, "
                    f"column {t} (L_i={len(masks[i])}): actual {value!r}",
                    detail={
                        "what": what,
                        "uid": uids[i],
                        "token": t,
                        "expected": 0.0,
                        "actual": value,
                    },
                )


def _token_mean(loss: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
    """S = sum over action tokens / N in float64, differentiable; non-action values ignored."""
    values = loss.to(torch.float64)
    kept = torch.where(action.bool(), values, torch.zeros_like(values))
    return kept.sum() / max(int(action.sum()), 1)


def _gradients(
    clause_id: str, scalar: torch.Tensor, inputs: list[torch.Tensor]
) -> list[torch.Tensor]:
    """dS/d inputs through the target's autograd graph (a missing graph is a failure)."""
    if not scalar.requires_grad:
        raise ClauseMismatch(
            f"[{clause_id}] the loss is not differentiable: no gradient reaches the inputs",
            check="differentiable",
        )
    try:
        grads = torch.autograd.grad(scalar, inputs, allow_unused=True)
    except Exception as exc:  # the target's backward failed
        raise TargetError("backward", exc) from exc
    return [torch.zeros_like(x) if g is None else g for g, x in zip(grads, inputs, strict=True)]


def _weights(masks: list[list[int]]) -> list[list[float]]:
    """w_t = mask_t / N: the vector-Jacobian weights of the token-mean scalar."""
    count = sum(sum(mask) for mask in masks)
    return [[m / count if count else 0.0 for m in mask] for mask in masks]


def _total_scale(scales: list[list[float]], masks: list[list[int]]) -> float:
    return oracle.action_token_mean(scales, masks)


# Policy losses --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _PolicySpec:
    """How one policy-loss clause maps its case onto the target op and the oracle."""

    op: str
    loss: Callable[..., tuple[list[float], list[bool]]]
    grad: Callable[..., list[float]]
    oracle_params: Callable[[dict[str, Any], Any], dict[str, Any]]
    op_params: Callable[[dict[str, Any]], dict[str, Any]]
    # the metrics the op must return (SAPO clips nothing: none), and whether the mode is
    # one of ``policy_loss_reduced``'s (adapters.base.POLICY_LOSS_OPS)
    metrics: tuple[str, ...] = ("clipfrac",)
    reduced: bool = True


def _clips(case: dict[str, Any]) -> dict[str, Any]:
    return {"clip_low": case["clip_low"], "clip_high": case["clip_high"]}


def _op_clips(case: dict[str, Any]) -> dict[str, Any]:
    return {"clip_ratio_low": case["clip_low"], "clip_ratio_high": case["clip_high"]}


def _gspo_max(profile: Any) -> float | None:
    return profile.get("gspo_log_ratio_max", 10.0)


def _gmpo_clamp(profile: Any) -> float | None:
    return profile.get("gmpo_log_ratio_clamp", oracle.LOG_RATIO_CLAMP)


def _taus(case: dict[str, Any]) -> dict[str, Any]:
    return {"tau_pos": case["tau_pos"], "tau_neg": case["tau_neg"]}


_SPECS: dict[str, _PolicySpec] = {
    "ppo_clip": _PolicySpec(
        "ppo_clip_loss",
        oracle.ppo_clip_loss,
        oracle.ppo_clip_grad,
        lambda c, p: _clips(c),
        _op_clips,
    ),
    "dual_clip": _PolicySpec(
        "ppo_clip_loss",
        oracle.ppo_clip_loss,
        oracle.ppo_clip_grad,
        lambda c, p: {**_clips(c), "dual_clip": c["clip_c"]},
        lambda c: {**_op_clips(c), "clip_ratio_c": c["clip_c"]},
    ),
    "gspo": _PolicySpec(
        "gspo_loss",
        oracle.gspo_loss,
        oracle.gspo_grad,
        lambda c, p: {**_clips(c), "log_ratio_max": _gspo_max(p)},
        _op_clips,
    ),
    "gmpo": _PolicySpec(
        "gmpo_loss",
        oracle.gmpo_loss,
        oracle.gmpo_grad,
        lambda c, p: {**_clips(c), "log_ratio_clamp": _gmpo_clamp(p)},
        _op_clips,
    ),
    "cispo": _PolicySpec(
        "cispo_loss", oracle.cispo_loss, oracle.cispo_grad, lambda c, p: _clips(c), _op_clips
    ),
    "dppo_tv": _PolicySpec(
        "dppo_tv_loss",
        oracle.dppo_tv_loss,
        oracle.dppo_tv_grad,
        lambda c, p: {**_clips(c), "ratio_cap": c["clip_c"]},
        lambda c: {**_op_clips(c), "clip_ratio_c": c["clip_c"]},
    ),
    "sapo": _PolicySpec(
        "sapo_loss",
        oracle.sapo_loss,
        oracle.sapo_grad,
        lambda c, p: _taus(c),
        _taus,
        metrics=(),
        reduced=False,
    ),
}


def _policy_scales(
    mode: str,
    old: list[float],
    logp: list[float],
    adv: list[float],
    mask: list[int],
    loss: list[float],
    grad: list[float],
    params: dict[str, Any],
    count: int,
) -> tuple[list[float], list[float]]:
    """Per-token conditioning of the loss and of the gradient (see the module docstring);
    ``count`` = N, the batch's action tokens."""
    log_ratios = [oracle.clamped_log_ratio(lp, o) for o, lp in zip(old, logp, strict=True)]
    if mode in ("gspo", "gmpo"):
        raw = log_ratios if mode == "gmpo" else [lp - o for o, lp in zip(old, logp, strict=True)]
        cond = 1.0 + math.fsum(abs(x) for x, m in zip(raw, mask, strict=True) if m)
        if mode == "gmpo":
            rho, _ = oracle.gmpo_sequence(old, logp, adv, mask, **params)
            n = max(sum(mask), 1)
            magnitude = math.fsum(abs(a) for a, m in zip(adv, mask, strict=True) if m) / n * rho
            # g_s = (n / N) * (-A_bar rho) * slope_s / n
            return [magnitude * cond] * len(mask), [magnitude * cond / max(count, 1)] * len(mask)
        return [abs(v) * cond for v in loss], [abs(g) * cond for g in grad]
    if mode == "sapo":
        return [abs(v) * (1.0 + abs(x)) for v, x in zip(loss, log_ratios, strict=True)], [
            _sapo_grad_scale(o, lp, a, m, params, count)
            for o, lp, a, m in zip(old, logp, adv, mask, strict=True)
        ]
    return (
        [abs(v) * (1.0 + abs(x)) for v, x in zip(loss, log_ratios, strict=True)],
        [abs(g) * (1.0 + abs(x)) for g, x in zip(grad, log_ratios, strict=True)],
    )


# float32's unit roundoff, the coarsest precision the suite compares in.
_UNIT_ROUNDOFF_F32 = 2.0**-24


def _sapo_grad_scale(
    old: float, logp: float, adv: float, mask: int, params: dict[str, Any], count: int
) -> float:
    """The conditioning of loss.sapo's gradient -4 A sigma'(z) r / N at one token: sigma'(z)
    = sigma (1 - sigma) in the target's dtype carries an absolute error of about one unit
    roundoff u wherever 1 - sigma > u (so the magnitude is that of the factors, 4 |A| r / N)
    and at most sigma'(z) where the gate saturates. Beyond the log-ratio clamp the gradient
    is exactly 0 (scale 0)."""
    x = logp - old
    if not mask or abs(x) > oracle.LOG_RATIO_CLAMP:
        return 0.0
    tau = oracle.sapo_temperature(adv, params["tau_pos"], params["tau_neg"])
    ratio = math.exp(x)
    slope = oracle.sigmoid_slope(tau * (ratio - 1.0))
    magnitude = 4.0 * abs(adv) * ratio * min(1.0, slope / _UNIT_ROUNDOFF_F32) / max(count, 1)
    return magnitude * (1.0 + abs(x))


def _check_policy(ctx: Any, case: dict[str, Any], clause_id: str, mode: str) -> None:
    spec = _SPECS[mode]
    lengths, uids, masks = cs.lengths_of(case), cs.uids_of(case), _masks(case)
    tensors, ragged, action = _padded_inputs(ctx, case, ("old", "logp", "adv"))
    log_prob = tensors["logp"].requires_grad_(True)
    params = spec.oracle_params(case, ctx.profile)
    rows = list(zip(ragged["old"], ragged["logp"], ragged["adv"], masks, strict=True))
    results = [spec.loss(*row, uid=uid, **params) for row, uid in zip(rows, uids, strict=True)]
    expected = [r[0] for r in results]
    weights = _weights(masks)
    expected_grad = [
        spec.grad(*row, w, uid=uid, **params)
        for row, w, uid in zip(rows, weights, uids, strict=True)
    ]
    count = sum(sum(mask) for mask in masks)
    scales = [
        _policy_scales(mode, *row, e, g, params, count)
        for row, e, g in zip(rows, expected, expected_grad, strict=True)
    ]

    result = ctx.call(
        spec.op, tensors["old"], log_prob, tensors["adv"], action, **spec.op_params(case)
    )
    loss, metrics = _unpack(clause_id, result, spec.metrics)
    _assert_shape(clause_id, "per-token loss", loss, tuple(action.shape))
    # Without a log-ratio clamp (gspo_log_ratio_max None) the exact loss may exceed the
    # dtype's range: an infinity of the same sign is accepted there, as for the KL.
    loss_rows = unpad_right(loss, lengths)
    overflow = overflowed(expected, loss_rows, torch.finfo(ctx.dtype).max)
    expected = with_actual_at(expected, loss_rows, overflow)
    with ctx.check("loss"):
        _assert_action_rows_close(
            clause_id,
            "per-token loss",
            expected,
            loss_rows,
            masks,
            uids,
            ctx.tolerance,
            [s[0] for s in scales],
        )
    scalar = _token_mean(loss, action)
    with ctx.check("scalar"):
        assert_scalar_close(
            clause_id,
            "token-mean loss over action tokens",
            oracle.action_token_mean(expected, masks),
            float(scalar.detach()),
            tolerance=ctx.tolerance,
            scale=_total_scale([s[0] for s in scales], masks),
        )
    (grad,) = _gradients(clause_id, scalar, [log_prob])
    grad_rows = unpad_right(grad, lengths)
    with ctx.check("grad"):
        _assert_action_rows_close(
            clause_id,
            "d(token-mean loss)/d log_prob",
            with_actual_at(expected_grad, grad_rows, overflow),
            grad_rows,
            masks,
            uids,
            ctx.tolerance,
            [s[1] for s in scales],
        )
    with ctx.check("grad_off_actions"):
        _assert_zero_off_actions(clause_id, "d(token-mean loss)/d log_prob", grad, masks, uids)
    if "clipfrac" in metrics:  # None: the bound function computes no clip fraction
        with ctx.check("clipfrac"):
            assert_scalar_close(
                clause_id,
                "clipfrac (share of action tokens)",
                oracle.clip_fraction([r[1] for r in results], masks),
                metrics["clipfrac"],
                tolerance=ctx.tolerance,
            )
    if spec.reduced and ctx.target.implements("policy_loss_reduced"):
        _check_reduced(ctx, case, clause_id, mode, expected, [s[0] for s in scales])


def _global_batch_info(masks: list[list[int]]) -> dict[str, Any]:
    """The mini-batch's global denominators, as a trainer passes them to every micro-batch."""
    from rlconform.oracle import aggregate as agg_oracle

    return {
        "dp_size": 1,
        "batch_num_tokens": agg_oracle.action_token_count(masks),
        "global_batch_size": agg_oracle.sequence_count(masks),
        "loss_scale_factor": None,
    }


def _reduced(
    ctx: Any, case: dict[str, Any], mode: str, samples: list[dict[str, Any]], info: dict[str, Any]
) -> float:
    part = {**case, "samples": samples}
    tensors, _, action = _padded_inputs(ctx, part, ("old", "logp", "adv"))
    extra = {"clip_ratio_c": case["clip_c"]} if "clip_c" in case else {}
    value = ctx.call(
        "policy_loss_reduced",
        mode,
        tensors["old"],
        tensors["logp"],
        tensors["adv"],
        action,
        clip_ratio_low=case["clip_low"],
        clip_ratio_high=case["clip_high"],
        global_batch_info=dict(info),
        **extra,
    )
    if not isinstance(value, torch.Tensor) or value.numel() != 1:
        raise ClauseMismatch(
            f"policy_loss_reduced({mode!r}) must return a scalar tensor, got {value!r}",
            check="reduced",
        )
    return float(value.detach().reshape(()).to("cpu", torch.float64))


def _check_reduced(
    ctx: Any,
    case: dict[str, Any],
    clause_id: str,
    mode: str,
    expected: list[list[float]],
    scales: list[list[float]],
) -> None:
    """``reduced`` and ``shard_invariance`` of the trainer's own reduction (see the module
    docstring); micro-batches are the first ceil(B/2) samples and the rest."""
    from rlconform.oracle import aggregate as agg_oracle

    samples, masks = case["samples"], _masks(case)
    info = _global_batch_info(masks)
    agg_mode = ctx.profile.get("loss_agg_mode", "token-mean")
    settings = {
        "dp_size": 1,
        "num_tokens": info["batch_num_tokens"],
        "num_sequences": info["global_batch_size"],
        "norm_length": ctx.profile.get("agg_norm_length", 10),
    }
    scale = agg_oracle.aggregate(
        [[abs(x) for x in row] for row in scales], masks, agg_mode, **settings
    )
    k = 16.0 + agg_oracle.action_token_count(masks)
    full = _reduced(ctx, case, mode, samples, info)
    with ctx.check("reduced"):
        assert_scalar_close(
            clause_id,
            f"policy_loss_reduced({mode!r}) of the whole batch ({agg_mode}, global denominators)",
            agg_oracle.aggregate(expected, masks, agg_mode, **settings),
            full,
            tolerance=ctx.tolerance,
            scale=scale,
            k=k,
        )
    half = (len(samples) + 1) // 2
    parts = [p for p in (samples[:half], samples[half:]) if p]
    if len(parts) < 2:
        return
    combined = math.fsum(_reduced(ctx, case, mode, part, info) for part in parts)
    with ctx.check("shard_invariance"):
        assert_scalar_close(
            clause_id,
            f"policy_loss_reduced({mode!r}) summed over micro-batches of "
            f"{'+'.join(str(len(p)) for p in parts)} samples (expected = the whole batch)",
            full,
            combined,
            tolerance=ctx.tolerance,
            scale=scale,
            k=2 * k,
        )


# Checks and features ---------------------------------------------------------------------

# shape: (loss (B,T), metrics) with the named metrics; loss: per-token loss on action tokens;
# scalar: its token-mean; grad / grad_off_actions: d scalar / d input on action tokens, and
# exactly 0 elsewhere; clipfrac: the reported clip fraction; differentiable: a graph exists.
VALUE_CHECKS = ("shape", "loss", "scalar", "grad", "grad_off_actions", "clipfrac", "differentiable")
POLICY_CHECKS = (*VALUE_CHECKS, "reduced", "shard_invariance")
SAPO_CHECKS = tuple(c for c in VALUE_CHECKS if c != "clipfrac")
ACTOR_CHECKS = (
    "shape",
    "loss",
    "scalar",
    "grad_pg",
    "grad_entropy",
    "grad_kl",
    "grad_off_actions",
    "term_pg_loss",
    "term_entropy",
    "term_kl_loss",
    "differentiable",
)
LOSS_FEATURES = (
    "mask_holes",
    "padding_finite",
    "extra_padding",
    "empty_response",
    "actionless_sample",
    "empty_batch",
    "no_samples",
    "padding_nonfinite",
    "overflow",
    "zero_width",
)
POLICY_FEATURES = (*LOSS_FEATURES, "extreme_log_ratio")


# Generators -----------------------------------------------------------------------------


def _logprob() -> st.SearchStrategy[float]:
    """Old log-probs: ordinary, (edge) a token the old policy found very improbable, so that
    a log-ratio of +25 or +60 (beyond the +-20 clamp, inside exp's float32 range) is
    reachable: logp = min(0, old + ratio) clips every positive ratio of an ordinary old
    log-prob; (hardening) <= -100 where float32 exp underflows."""
    extreme = [-30.0, -65.0] if allows("edge") else []
    if allows("hardening"):
        extreme += [-99.5, -100.0, -150.0]
    return st.one_of(st.floats(-8.0, 0.0, width=32), st.sampled_from([0.0, -1e-6, *extreme]))


def _log_ratio() -> st.SearchStrategy[float]:
    """logp - old: ordinary, (edge) beyond the +-20 clamp, (hardening) beyond exp's range."""
    special = [0.0]
    if allows("edge"):
        special += [25.0, -25.0, 60.0, -60.0]
    if allows("hardening"):
        special += [99.5, -99.5, 150.0]
    return st.one_of(
        st.floats(-1.0, 1.0, width=32), st.floats(-6.0, 6.0, width=32), st.sampled_from(special)
    )


# |A| >= 2^-20 or exactly 0: a subnormal advantage makes -A r and -A clamp(r) underflow to
# the same float32 value, which is rounding, not a clipping decision.
_ADVANTAGE = st.one_of(
    st.tuples(st.floats(2.0**-20, 3.0, width=32), st.booleans()).map(
        lambda t: t[0] if t[1] else -t[0]
    ),
    st.just(0.0),
)

_PARAMS: dict[str, dict[str, tuple[float, ...]]] = {
    "ppo_clip": {"clip_low": (0.2, 0.1, 0.3), "clip_high": (0.2, 0.28, 0.5)},
    "dual_clip": {"clip_low": (0.2, 0.1), "clip_high": (0.2, 0.28), "clip_c": (3.0, 1.5, 10.0)},
    "gspo": {"clip_low": (0.2, 3e-4), "clip_high": (0.2, 4e-4)},
    "gmpo": {"clip_low": (0.4, 0.2), "clip_high": (0.4, 0.2)},
    "cispo": {"clip_low": (0.2, 1.0), "clip_high": (0.28, 2.0)},
    "dppo_tv": {"clip_low": (0.2, 0.05), "clip_high": (0.2, 0.05), "clip_c": (20.0, 3.0)},
    # verl, SkyRL and TRL default to tau_pos 1.0, tau_neg 1.05
    "sapo": {"tau_pos": (1.0, 0.5, 2.0), "tau_neg": (1.05, 0.5, 3.0)},
}


def _near(value: float, point: float) -> bool:
    return abs(value - point) <= _BRANCH_MARGIN * max(abs(point), 1.0)


def _near_ratio_bounds(ratio: float, case: dict[str, Any], mode: str) -> bool:
    bounds = [1.0 - case["clip_low"], 1.0 + case["clip_high"]]
    if mode == "dual_clip":
        bounds.append(case["clip_c"])
    return any(_near(ratio, b) for b in bounds if b > 0)


def clear_of_branch_points(
    mode: str, sample: dict[str, Any], case: dict[str, Any], profile: Any
) -> bool:
    """True when no action token of ``sample`` sits within a relative 1e-4 of a branch point
    of the ``mode`` loss (where float32 rounding could legitimately take the other branch)."""
    tokens = [
        (o, lp, a)
        for o, lp, a, m in zip(
            sample["old"], sample["logp"], sample["adv"], sample["mask"], strict=True
        )
        if m
    ]
    if mode == "gspo":
        s = oracle.gspo_sequence_log_ratio(sample["old"], sample["logp"], sample["mask"])
        limit = _gspo_max(profile)
        if limit is not None and _near(s, limit):
            return False
        return not _near_ratio_bounds(
            math.exp(min(s, limit if limit is not None else 700.0)), case, mode
        )
    for o, lp, _a in tokens:
        x = lp - o
        if _near(abs(x), oracle.LOG_RATIO_CLAMP):
            return False
        if mode == "gmpo":
            if _near(x, case["clip_high"]) or _near(x, -case["clip_low"]):
                return False
        elif mode == "dppo_tv":
            gap = math.exp(lp) - math.exp(o)
            if _near(gap, case["clip_high"]) or _near(gap, -case["clip_low"]):
                return False
        elif mode == "sapo":
            continue  # a smooth gate: the clamp is its only branch point
        elif _near_ratio_bounds(math.exp(oracle.clamped_log_ratio(lp, o)), case, mode):
            return False
    return True


@st.composite
def _policy_case(draw: Any, mode: str, profile: Any) -> dict[str, Any]:
    case: dict[str, Any] = {
        name: draw(st.sampled_from(values)) for name, values in _PARAMS[mode].items()
    }
    samples = []
    for i in range(draw(st.integers(cs.fewest_samples(0), 4))):
        length = draw(cs.lengths())
        sequence_adv = draw(st.one_of(st.none(), _ADVANTAGE))
        sample: dict[str, Any] = {
            "uid": f"s{i}",
            "mask": draw(cs.loss_mask(length)),
            "old": [],
            "logp": [],
            "adv": [],
        }
        for _ in range(length):
            old = draw(_logprob())
            sample["old"].append(old)
            sample["logp"].append(_f32(min(0.0, old + draw(_log_ratio()))))
            sample["adv"].append(draw(_ADVANTAGE) if sequence_adv is None else sequence_adv)
        for _ in range(8):
            if clear_of_branch_points(mode, sample, case, profile):
                break
            sample["old"] = [_f32(o - _NUDGE) for o in sample["old"]]
        assume(clear_of_branch_points(mode, sample, case, profile))
        samples.append(sample)
    case["samples"] = samples
    case["pad_value"] = draw(cs.pad_values())
    case["extra_pad"] = draw(st.integers(0, 2))
    return case


def _policy_strategy(mode: str) -> Callable[[Any], st.SearchStrategy[dict[str, Any]]]:
    return lambda profile: _policy_case(mode, profile)


def _sample(
    uid: str, mask: list[int], old: list[float], logp: list[float], adv: list[float]
) -> dict[str, Any]:
    return {"uid": uid, "mask": mask, "old": old, "logp": logp, "adv": adv}


# The inputs verl 0.9.1 was run on (research notes, t_loss.py): vanilla 0.277857, clipfrac
# 1/7; cispo 0.762869; dppo_tv 0.551114. Row s2 is a fully masked row.
_VERL_SAMPLES = [
    _sample(
        "s0", [1, 1, 1], [-0.9925, -1.5364, -0.1770], [-0.4925, -2.0364, -0.1270], [1.0, 1.0, -1.0]
    ),
    _sample(
        "s1",
        [1, 1, 1, 1],
        [-0.6148, -1.2682, -0.9802, -1.7929],
        [0.3852, -2.2682, -0.6802, -1.7929],
        [-1.0, 1.0, -1.0, 1.0],
    ),
    _sample(
        "s2",
        [0, 0, 0, 0],
        [-0.9113, -1.2646, -0.6978, -0.8034],
        [-0.8113, -1.1646, -0.5978, -0.7034],
        [2.0, 2.0, 2.0, 2.0],
    ),
]
_EXTREME_SAMPLES = [
    # |logp - old| far beyond 20 both ways, A = 0 on a huge ratio, a mask hole.
    _sample(
        "s0",
        [1, 1, 1, 0, 1],
        [-100.0, -0.5, -150.0, -3.0, -100.0],
        [-0.5, -100.0, -0.25, -2.0, -0.5],
        [-1.0, 1.0, 0.0, 2.0, 1.0],
    ),
    _sample("s1", [], [], [], []),
    # log-probs near -100 with an ordinary ratio.
    _sample("s2", [1, 1], [-99.0, -100.0], [-99.5, -99.75], [0.5, -0.5]),
]
# A log-ratio beyond the +-20 clamp but inside float32 exp's range (edge: stale off-policy
# data) where it matters: A < 0 takes the unclipped branch -A r, so r = exp(20), not
# exp(25) (the overflow samples above say nothing of the range in between).
_BEYOND_CLAMP_SAMPLES = [
    _sample("s0", [1, 1], [-30.0, -1.0], [-5.0, -1.0], [-1.0, 0.5]),
    _sample("s1", [1], [-2.0], [-2.5], [1.0]),
]
_NO_ACTION_SAMPLES = [
    _sample("s0", [0, 0, 0], [-1.0, -2.0, -3.0], [-0.5, -2.5, -1.0], [1.0, -1.0, 2.0]),
    _sample("s1", [], [], [], []),
]

# Samples whose responses are all empty: a zero-width batch (zero_width, hardening).
_ZERO_WIDTH_SAMPLES = [_sample("s0", [], [], [], []), _sample("s1", [], [], [], [])]


def _zero_width(**params: float) -> dict[str, Any]:
    return {"samples": _ZERO_WIDTH_SAMPLES, "pad_value": 0.0, "extra_pad": 0, **params}


_PPO_EXAMPLES = (
    {"clip_low": 0.2, "clip_high": 0.2, "samples": _VERL_SAMPLES, "pad_value": NAN, "extra_pad": 1},
    {
        "clip_low": 0.2,
        "clip_high": 0.2,
        "samples": _EXTREME_SAMPLES,
        "pad_value": NAN,
        "extra_pad": 2,
    },
    # Asymmetric eps: one token clipped above, one below, then 3 unclipped; clipfrac 2/5.
    {
        "clip_low": 0.1,
        "clip_high": 0.28,
        "samples": [
            _sample("s0", [1, 1], [-1.0, -1.0], [-0.5, -1.5], [1.0, -1.0]),
            _sample(
                "s1",
                [1, 1, 0, 1],
                [-1.0, -1.0, -1.0, -1.0],
                [-0.9, -1.05, -0.7, -0.8],
                [1.0, -1.0, 1.0, 0.5],
            ),
        ],
        "pad_value": INF,
        "extra_pad": 2,
    },
    {"clip_low": 0.2, "clip_high": 0.2, "samples": [], "pad_value": NAN, "extra_pad": 0},
    {
        "clip_low": 0.2,
        "clip_high": 0.2,
        "samples": _NO_ACTION_SAMPLES,
        "pad_value": 7.5,
        "extra_pad": 1,
    },
    _zero_width(clip_low=0.2, clip_high=0.2),
    {
        "clip_low": 0.2,
        "clip_high": 0.2,
        "samples": _BEYOND_CLAMP_SAMPLES,
        "pad_value": 0.0,
        "extra_pad": 1,
    },
)

_LN2, _LN4 = math.log(2.0), math.log(4.0)
_DUAL_EXAMPLES = (
    # slime's worked example: ratios [4, 0.5], A [-1, 1], eps 0.2, c 3 -> [3.0, -0.5].
    {
        "clip_low": 0.2,
        "clip_high": 0.2,
        "clip_c": 3.0,
        "samples": [_sample("s0", [1, 1], [-2.0, -1.0], [-2.0 + _LN4, -1.0 - _LN2], [-1.0, 1.0])],
        "pad_value": NAN,
        "extra_pad": 1,
    },
    # slime's unit test: ratios [2, 2, 0.5], A [2, -2, 2], eps 0.2, c 1.5 -> [-2.4, 3.0, -1.0].
    {
        "clip_low": 0.2,
        "clip_high": 0.2,
        "clip_c": 1.5,
        "samples": [
            _sample(
                "s0",
                [1, 1, 1],
                [-1.0, -1.0, -1.0],
                [-1.0 + _LN2, -1.0 + _LN2, -1.0 - _LN2],
                [2.0, -2.0, 2.0],
            )
        ],
        "pad_value": 0.0,
        "extra_pad": 0,
    },
    # ratio e^5: A = 1 keeps -1.2 (never dual-clipped), A = -1 is capped at 3 (verl's check),
    # A = 0 gives 0; the hole (A = -1, ratio e^5) and the NaN padding must not matter.
    {
        "clip_low": 0.2,
        "clip_high": 0.2,
        "clip_c": 3.0,
        "samples": [
            _sample(
                "s0",
                [1, 1, 1, 0],
                [-6.0, -6.0, -6.0, -6.0],
                [-1.0, -1.0, -1.0, -1.0],
                [1.0, -1.0, 0.0, -1.0],
            ),
            _sample("s1", [1, 1], [-100.0, -0.5], [-0.5, -100.0], [-2.0, 2.0]),
        ],
        "pad_value": NAN,
        "extra_pad": 2,
    },
    # no action token in the batch: a sample of holes only and an empty one
    {
        "clip_low": 0.2,
        "clip_high": 0.2,
        "clip_c": 3.0,
        "samples": _NO_ACTION_SAMPLES,
        "pad_value": 7.5,
        "extra_pad": 1,
    },
    _zero_width(clip_low=0.2, clip_high=0.2, clip_c=3.0),
)

_GSPO_EXAMPLES = (
    # s = mean(0.5, -0.1, 0.2) = 0.2 over the action tokens (the hole's -2.5 is excluded),
    # rho = e^0.2; per-token A varies, so the stop-gradient form matters.
    {
        "clip_low": 0.2,
        "clip_high": 0.2,
        "samples": [
            _sample(
                "s0",
                [1, 1, 0, 1],
                [-1.0, -2.0, -0.5, -1.5],
                [-0.5, -2.1, -3.0, -1.3],
                [1.0, -1.0, 2.0, 0.5],
            ),
            _sample("s1", [1, 1], [-1.0, -1.0], [-0.95, -1.05], [1.0, 1.0]),
        ],
        "pad_value": NAN,
        "extra_pad": 2,
    },
    # s = 22.5 > 10 (clamped, zero gradient); s near -103 (rho ~ 0); L_i = 0.
    {
        "clip_low": 0.2,
        "clip_high": 0.2,
        "samples": [
            _sample("s0", [1, 1], [-100.0, -100.0], [-75.0, -80.0], [-1.0, 1.0]),
            _sample(
                "s1", [1, 1, 1], [-0.5, -1.0, -0.25], [-100.0, -120.0, -90.0], [1.0, 1.0, -1.0]
            ),
            _sample("s2", [], [], [], []),
        ],
        "pad_value": INF,
        "extra_pad": 1,
    },
    _zero_width(clip_low=0.2, clip_high=0.2),
)

_GMPO_EXAMPLES = (
    # verl's run: geo_mean = -0.102227 = (l_s0 + l_s1 + 0) / 3 rows.
    {"clip_low": 0.2, "clip_high": 0.2, "samples": _VERL_SAMPLES, "pad_value": NAN, "extra_pad": 1},
    # A < 0 with log-ratio 99.5 (clamped to 20), A > 0 with -99.5 (clamped to -20), A = 0.
    {
        "clip_low": 0.2,
        "clip_high": 0.2,
        "samples": [
            _sample("s0", [1, 1, 1], [-100.0, -1.0, -1.0], [-0.5, -1.25, -0.9], [-1.0, -1.0, -1.0]),
            _sample(
                "s1",
                [1, 1, 0, 1],
                [-0.5, -1.0, -1.0, -2.0],
                [-100.0, -1.5, -1.0, -1.9],
                [1.0, 1.0, 1.0, 1.0],
            ),
            _sample("s2", [1, 1], [-1.0, -1.0], [-0.5, -3.0], [0.0, 0.0]),
            _sample("s3", [], [], [], []),
        ],
        "pad_value": NAN,
        "extra_pad": 2,
    },
    _zero_width(clip_low=0.2, clip_high=0.2),
)

_CISPO_EXAMPLES = (
    {"clip_low": 0.2, "clip_high": 0.2, "samples": _VERL_SAMPLES, "pad_value": NAN, "extra_pad": 1},
    # The canonical lower bound 0 (clip_low 1): ratio e^-20 is not clipped; e^20 is.
    {
        "clip_low": 1.0,
        "clip_high": 0.28,
        "samples": _EXTREME_SAMPLES,
        "pad_value": INF,
        "extra_pad": 1,
    },
    _zero_width(clip_low=0.2, clip_high=0.2),
)

_LOG_HALF, _LOG_FIFTH = math.log(0.5), math.log(0.2)
_DPPO_EXAMPLES = (
    {
        "clip_low": 0.2,
        "clip_high": 0.2,
        "clip_c": 20.0,
        "samples": _VERL_SAMPLES,
        "pad_value": NAN,
        "extra_pad": 1,
    },
    # p - p_old = +0.3: masked for A > 0, kept for A < 0; -0.3: the reverse; A = 0; cap 2 < r = 2.5.
    {
        "clip_low": 0.2,
        "clip_high": 0.2,
        "clip_c": 2.0,
        "samples": [
            _sample(
                "s0",
                [1, 1, 0, 1, 1, 1],
                [_LOG_FIFTH, _LOG_FIFTH, -1.0, _LOG_HALF, _LOG_HALF, _LOG_FIFTH],
                [_LOG_HALF, _LOG_HALF, -0.5, _LOG_FIFTH, _LOG_FIFTH, _LOG_HALF],
                [1.0, -1.0, 1.0, 1.0, -1.0, 0.0],
            ),
            _sample("s1", [], [], [], []),
        ],
        "pad_value": NAN,
        "extra_pad": 1,
    },
    # |logp - old| far beyond 20: the ratio weight is capped at c, A = 0, logp near -100.
    {
        "clip_low": 0.2,
        "clip_high": 0.2,
        "clip_c": 3.0,
        "samples": _EXTREME_SAMPLES,
        "pad_value": -1e30,
        "extra_pad": 1,
    },
    _zero_width(clip_low=0.2, clip_high=0.2, clip_c=20.0),
)


@clause(
    "loss.ppo_clip",
    title="PPO clipped surrogate, clamped log-ratio, clipfrac",
    statement="""log_ratio = clamp(logp - old, -20, 20); ratio = exp(log_ratio);
    l = max(-A ratio, -A clamp(ratio, 1 - eps_low, 1 + eps_high)) per action token;
    clipfrac = share of action tokens where the clipped term is strictly larger. Asymmetric
    eps allowed. Loss and gradient stay finite for any log-ratio and for A = 0; the gradient
    w.r.t. log_prob is -A ratio where unclipped and |logp - old| <= 20, else 0.""",
    ops=("ppo_clip_loss",),
    strategy=_policy_strategy("ppo_clip"),
    examples=_PPO_EXAMPLES,
    checks=POLICY_CHECKS,
    meets=POLICY_FEATURES,
)
def check_ppo_clip(ctx: Any, case: dict[str, Any]) -> None:
    """Op ``ppo_clip_loss(old, log_prob, adv, mask, *, clip_ratio_low, clip_ratio_high)``
    (no dual clip). No profile keys."""
    _check_policy(ctx, case, "loss.ppo_clip", "ppo_clip")


@clause(
    "loss.dual_clip",
    title="Dual clip on negative advantages only",
    statement="""With clip_ratio_c = c > 1: for A < 0, l = min(l_ppo, -A c); never applied to
    A >= 0. The gradient is 0 where the bound -A c is active. clipfrac is the PPO clipfrac
    (the dual-clip bound is not counted).""",
    ops=("ppo_clip_loss",),
    strategy=_policy_strategy("dual_clip"),
    examples=_DUAL_EXAMPLES,
    checks=POLICY_CHECKS,
    meets=POLICY_FEATURES,
)
def check_dual_clip(ctx: Any, case: dict[str, Any]) -> None:
    """Op ``ppo_clip_loss(..., clip_ratio_c=c)``. No profile keys."""
    _check_policy(ctx, case, "loss.dual_clip", "dual_clip")


@clause(
    "loss.gspo",
    title="GSPO: sequence-level ratio with per-token gradient",
    statement="""s_i = mean over the sample's action tokens of (logp - old); every token's ratio
    is exp(logp_t - sg(logp_t) + sg(s_i)) clamped at log-ratio <= gspo_log_ratio_max (value
    exp(s_i), gradient w.r.t. its own logp_t only); l_t = max(-A_t rho, -A_t clamp(rho, 1 -
    eps_low, 1 + eps_high)); no dual clip; clipfrac per token as in PPO.""",
    ops=("gspo_loss",),
    strategy=_policy_strategy("gspo"),
    examples=_GSPO_EXAMPLES,
    checks=POLICY_CHECKS,
    meets=POLICY_FEATURES,
)
def check_gspo(ctx: Any, case: dict[str, Any]) -> None:
    """Op ``gspo_loss(old, log_prob, adv, mask, *, clip_ratio_low, clip_ratio_high)``.
    Profile key ``gspo_log_ratio_max`` (default 10.0 as verl; None = no clamp)."""
    _check_policy(ctx, case, "loss.gspo", "gspo")


@clause(
    "loss.gmpo",
    title="GMPO: geometric mean of sign-aware clipped token ratios",
    statement="""x_t = clamp(logp_t - old_t, -20, 20); y_t = min(x_t, eps_high) if A_t > 0,
    max(x_t, -eps_low) if A_t < 0, 0 if A_t = 0; rho = exp(mean over action tokens of y);
    A_bar = mean over action tokens of A; the sequence loss -A_bar rho is the per-token loss
    on every action token (compared there; the token-mean scalar weights sequences by their
    action-token count). clipfrac = share of action tokens where the sign-aware clip is
    active.""",
    ops=("gmpo_loss",),
    strategy=_policy_strategy("gmpo"),
    examples=_GMPO_EXAMPLES,
    checks=POLICY_CHECKS,
    meets=POLICY_FEATURES,
)
def check_gmpo(ctx: Any, case: dict[str, Any]) -> None:
    """Op ``gmpo_loss(old, log_prob, adv, mask, *, clip_ratio_low, clip_ratio_high)``.
    Profile key ``gmpo_log_ratio_clamp`` (default 20.0; verl applies none: None)."""
    _check_policy(ctx, case, "loss.gmpo", "gmpo")


@clause(
    "loss.cispo",
    title="CISPO: clipped importance weight under stop-gradient",
    statement="""r = exp(clamp(logp - old, -20, 20)); l_t = -sg(clamp(r, 1 - eps_low, 1 + eps_high))
    A_t logp_t; the gradient w.r.t. logp_t is -clamp(r) A_t (the clipped ratio carries no
    gradient, so a forward-identical loss without the stop-gradient fails); clipfrac = share
    of action tokens with r outside [1 - eps_low, 1 + eps_high].""",
    ops=("cispo_loss",),
    strategy=_policy_strategy("cispo"),
    examples=_CISPO_EXAMPLES,
    checks=POLICY_CHECKS,
    meets=POLICY_FEATURES,
)
def check_cispo(ctx: Any, case: dict[str, Any]) -> None:
    """Op ``cispo_loss(old, log_prob, adv, mask, *, clip_ratio_low, clip_ratio_high)``."""
    _check_policy(ctx, case, "loss.cispo", "cispo")


@clause(
    "loss.dppo_tv",
    title="DPPO with the total-variation trust region",
    statement="""p = exp(logp), p_old = exp(old); a token is inside the trust region when
    p - p_old <= eps_high (A > 0) or p - p_old >= -eps_low (A <= 0); l_t = -A_t sg(min(r, c))
    logp_t inside, 0 outside; gradient -A_t min(r, c) inside; clipfrac = share of action
    tokens outside.""",
    ops=("dppo_tv_loss",),
    strategy=_policy_strategy("dppo_tv"),
    examples=_DPPO_EXAMPLES,
    checks=POLICY_CHECKS,
    meets=POLICY_FEATURES,
)
def check_dppo_tv(ctx: Any, case: dict[str, Any]) -> None:
    """Op ``dppo_tv_loss(old, log_prob, adv, mask, *, clip_ratio_low, clip_ratio_high,
    clip_ratio_c)`` (c caps the stop-gradient ratio weight)."""
    _check_policy(ctx, case, "loss.dppo_tv", "dppo_tv")


_SAPO_EXAMPLES = (
    {
        "tau_pos": 1.0,
        "tau_neg": 1.05,
        "samples": _VERL_SAMPLES,
        "pad_value": NAN,
        "extra_pad": 1,
    },
    # |logp - old| far beyond 20: r = e^20 saturates the gate (loss -4A/tau, gradient 0
    # beyond the clamp), r = e^-20 leaves it at sigma(-tau); A = 0 on a huge ratio.
    {
        "tau_pos": 1.0,
        "tau_neg": 1.05,
        "samples": _EXTREME_SAMPLES,
        "pad_value": INF,
        "extra_pad": 1,
    },
    # The temperature follows the advantage's sign: at r = 1 the loss is -2A/tau (A = 1,
    # tau_pos 2: -1; A = -1, tau_neg 0.5: 4) and the gradient the plain -A; r = 2 and
    # r = 1/2 on either sign; a hole.
    {
        "tau_pos": 2.0,
        "tau_neg": 0.5,
        "samples": [
            _sample(
                "s0",
                [1, 1, 1, 1],
                [-1.0, -1.0, -1.5, -1.5],
                [-1.0, -1.0, -1.5, -1.5],
                [1.0, -1.0, 1.0, -1.0],
            ),
            _sample(
                "s1",
                [1, 0, 1, 1, 1],
                [-2.0, -0.5, -2.0, -1.0, -1.0],
                [-2.0 + LN2, -3.0, -2.0 + LN2, -1.0 - LN2, -1.0 - LN2],
                [0.5, 2.0, -0.5, 0.5, -0.5],
            ),
        ],
        "pad_value": NAN,
        "extra_pad": 2,
    },
    # One advantage per completion (the layout TRL, Liger and Unsloth take) with a log-ratio
    # of 99.5, beyond float32 exp's range: the contract's clamp saturates the gate (loss
    # -4A/tau, gradient 0), an unclamped ratio is inf and its gradient 0 x inf.
    {
        "tau_pos": 1.0,
        "tau_neg": 1.05,
        "samples": [
            _sample("s0", [1, 1], [-100.0, -1.0], [-0.5, -0.75], [1.0, 1.0]),
            _sample("s1", [1, 1], [-1.0, -99.0], [-1.25, -0.5], [-0.5, -0.5]),
        ],
        "pad_value": 0.0,
        "extra_pad": 1,
    },
    _zero_width(tau_pos=1.0, tau_neg=1.05),
)


@clause(
    "loss.sapo",
    title="SAPO: a sigmoid gate on the ratio instead of a clip",
    statement="""r = exp(clamp(logp - old, -20, 20)); tau = tau_pos where A_t > 0, else tau_neg;
    l_t = -A_t (4 / tau) sigmoid(tau (r - 1)); the gate is differentiated through r, so the
    gradient w.r.t. logp_t is -4 A_t sigmoid'(tau (r - 1)) r (the plain -A_t at r = 1; 0
    beyond the clamp). SAPO clips nothing (no clip fraction). Token-level ratio only.""",
    ops=("sapo_loss",),
    strategy=_policy_strategy("sapo"),
    examples=_SAPO_EXAMPLES,
    checks=SAPO_CHECKS,
    meets=POLICY_FEATURES,
)
def check_sapo(ctx: Any, case: dict[str, Any]) -> None:
    """Op ``sapo_loss(old, log_prob, adv, mask, *, tau_pos, tau_neg)`` (metrics: any, none
    read). Not in ``policy_loss_reduced``'s modes yet: no ``reduced`` check."""
    _check_policy(ctx, case, "loss.sapo", "sapo")


# Value loss -----------------------------------------------------------------------------


def clear_of_value_branch_points(sample: dict[str, Any], clip: float) -> bool:
    """No action token near |v - v_old| = c or near a tie (v - R)^2 = (v_clip - R)^2."""
    for v, ret, v_old, m in zip(
        sample["vpreds"], sample["returns"], sample["values"], sample["mask"], strict=True
    ):
        if not m:
            continue
        if _near(abs(v - v_old), clip):
            return False
        v_clip = min(max(v, v_old - clip), v_old + clip)
        if v_clip != v and _near(abs(v - ret), abs(v_clip - ret)):
            return False
    return True


@st.composite
def _value_case(draw: Any) -> dict[str, Any]:
    clip = draw(st.sampled_from([0.2, 0.5]))
    samples = []
    for i in range(draw(st.integers(cs.fewest_samples(0), 4))):
        length = draw(cs.lengths())
        sample: dict[str, Any] = {
            "uid": f"s{i}",
            "mask": draw(cs.loss_mask(length)),
            "vpreds": [],
            "returns": [],
            "values": [],
        }
        for _ in range(length):
            v_old = draw(cs.finite(-3.0, 3.0))
            sample["values"].append(v_old)
            sample["vpreds"].append(
                _f32(v_old + draw(st.one_of(cs.finite(-1.0, 1.0), st.just(0.0))))
            )
            sample["returns"].append(draw(cs.finite(-3.0, 3.0)))
        for _ in range(8):
            if clear_of_value_branch_points(sample, clip):
                break
            sample["vpreds"] = [_f32(v - _NUDGE) for v in sample["vpreds"]]
        assume(clear_of_value_branch_points(sample, clip))
        samples.append(sample)
    return {
        "clip": clip,
        "samples": samples,
        "pad_value": draw(cs.pad_values()),
        "extra_pad": draw(st.integers(0, 2)),
    }


_VALUE_EXAMPLES = (
    # v 1.0 (v_old 0.5, c 0.2 -> v_clip 0.7), R 1.5: 0.5 * max(0.25, 0.64) = 0.32, clipped;
    # v 2.0, R 0.0: 0.5 * max(4, 0.49) = 2.0, unclipped. A hole, L_i = 0, NaN padding.
    {
        "clip": 0.2,
        "samples": [
            {
                "uid": "s0",
                "mask": [1, 1, 0],
                "vpreds": [1.0, 2.0, 9.0],
                "returns": [1.5, 0.0, -9.0],
                "values": [0.5, 0.5, 0.0],
            },
            {"uid": "s1", "mask": [], "vpreds": [], "returns": [], "values": []},
        ],
        "pad_value": NAN,
        "extra_pad": 2,
    },
    # v == R (zero loss, zero gradient) and v == v_old; inf padding.
    {
        "clip": 0.5,
        "samples": [
            {
                "uid": "s0",
                "mask": [1, 1],
                "vpreds": [0.25, -1.0],
                "returns": [0.25, 1.0],
                "values": [0.25, -1.0],
            }
        ],
        "pad_value": INF,
        "extra_pad": 1,
    },
    # Samples but no action token in the batch (empty_batch): a response of holes only
    # (garbage values there) and an empty one.
    {
        "clip": 0.2,
        "samples": [
            {
                "uid": "s0",
                "mask": [0, 0],
                "vpreds": [3.0, -2.0],
                "returns": [1.0, 9.0],
                "values": [0.0, 0.5],
            },
            {"uid": "s1", "mask": [], "vpreds": [], "returns": [], "values": []},
        ],
        "pad_value": 7.5,
        "extra_pad": 1,
    },
)


@clause(
    "loss.value_clip",
    title="Clipped value loss and vf_clipfrac",
    statement="""v_clip = clamp(v, v_old - c, v_old + c); l = value_loss_scale * max((v - R)^2,
    (v_clip - R)^2) per action token (scale 0.5); vf_clipfrac = share of action tokens where
    the clipped term is strictly larger; gradient w.r.t. vpreds 2 scale (v - R) where the
    unclipped term is the max, else 0.""",
    ops=("value_loss",),
    strategy=_value_case(),
    examples=_VALUE_EXAMPLES,
    checks=VALUE_CHECKS,
    meets=LOSS_FEATURES,
)
def check_value_clip(ctx: Any, case: dict[str, Any]) -> None:
    """Op ``value_loss(vpreds, returns, values, mask, *, cliprange_value) -> (loss, {"vf_clipfrac"})``
    (verl argument order); ``vf_clipfrac`` None where the framework computes none (check
    ``clipfrac`` is then not made). Profile key ``value_loss_scale`` (default 0.5; slime
    1.0)."""
    clause_id = "loss.value_clip"
    lengths, uids, masks = cs.lengths_of(case), cs.uids_of(case), _masks(case)
    tensors, ragged, action = _padded_inputs(ctx, case, ("vpreds", "returns", "values"))
    vpreds = tensors["vpreds"].requires_grad_(True)
    params = {"clip": case["clip"], "scale": ctx.profile.get("value_loss_scale", 0.5)}
    rows = list(zip(ragged["vpreds"], ragged["returns"], ragged["values"], masks, strict=True))
    results = [
        oracle.value_clip_loss(*row, uid=uid, **params) for row, uid in zip(rows, uids, strict=True)
    ]
    expected = [r[0] for r in results]
    expected_grad = [
        oracle.value_clip_grad(*row, w, uid=uid, **params)
        for row, w, uid in zip(rows, _weights(masks), uids, strict=True)
    ]
    size = [
        [abs(v) + abs(r) + abs(o) + case["clip"] for v, r, o, _ in zip(*row, strict=True)]
        for row in rows
    ]
    loss_scale = [[params["scale"] * s * s for s in row] for row in size]
    grad_scale = [
        [abs(g) * s for g, s in zip(grow, srow, strict=True)]
        for grow, srow in zip(expected_grad, size, strict=True)
    ]

    result = ctx.call(
        "value_loss",
        vpreds,
        tensors["returns"],
        tensors["values"],
        action,
        cliprange_value=case["clip"],
    )
    loss, metrics = _unpack(clause_id, result, (), optional=("vf_clipfrac",))
    _assert_shape(clause_id, "per-token value loss", loss, tuple(action.shape))
    with ctx.check("loss"):
        _assert_action_rows_close(
            clause_id,
            "per-token value loss",
            expected,
            unpad_right(loss, lengths),
            masks,
            uids,
            ctx.tolerance,
            loss_scale,
        )
    scalar = _token_mean(loss, action)
    with ctx.check("scalar"):
        assert_scalar_close(
            clause_id,
            "token-mean value loss over action tokens",
            oracle.action_token_mean(expected, masks),
            float(scalar.detach()),
            tolerance=ctx.tolerance,
            scale=_total_scale(loss_scale, masks),
        )
    (grad,) = _gradients(clause_id, scalar, [vpreds])
    with ctx.check("grad"):
        _assert_action_rows_close(
            clause_id,
            "d(token-mean value loss)/d vpreds",
            expected_grad,
            unpad_right(grad, lengths),
            masks,
            uids,
            ctx.tolerance,
            grad_scale,
        )
    with ctx.check("grad_off_actions"):
        _assert_zero_off_actions(clause_id, "d(token-mean value loss)/d vpreds", grad, masks, uids)
    if "vf_clipfrac" not in metrics:
        return
    with ctx.check("clipfrac"):
        assert_scalar_close(
            clause_id,
            "vf_clipfrac (share of action tokens)",
            oracle.clip_fraction([r[1] for r in results], masks),
            metrics["vf_clipfrac"],
            tolerance=ctx.tolerance,
        )


# Entropy bonus and total actor loss -----------------------------------------------------

_TERMS = ("pg", "entropy", "kl")


@st.composite
def _actor_case(draw: Any, with_kl: bool) -> dict[str, Any]:
    samples = []
    for i in range(draw(st.integers(cs.fewest_samples(0), 4))):
        length = draw(cs.lengths())
        sample: dict[str, Any] = {"uid": f"s{i}", "mask": draw(cs.loss_mask(length))}
        sample["pg"] = draw(st.lists(cs.finite(-3.0, 3.0), min_size=length, max_size=length))
        sample["entropy"] = draw(st.lists(cs.finite(0.0, 5.0), min_size=length, max_size=length))
        sample["kl"] = (
            draw(st.lists(cs.finite(0.0, 10.0), min_size=length, max_size=length))
            if with_kl
            else [0.0] * length
        )
        samples.append(sample)
    return {
        "entropy_coeff": draw(st.sampled_from([0.01, 0.0, 0.001, 0.5])),
        "kl_coef": draw(st.sampled_from([0.1, 0.0, 0.001, 1.0])) if with_kl else 0.0,
        "samples": samples,
        "pad_value": draw(cs.pad_values()),
        "extra_pad": draw(st.integers(0, 2)),
    }


def _check_actor(ctx: Any, case: dict[str, Any], clause_id: str) -> None:
    lengths, uids, masks = cs.lengths_of(case), cs.uids_of(case), _masks(case)
    tensors, ragged, action = _padded_inputs(ctx, case, _TERMS)
    inputs = [tensors[name].requires_grad_(True) for name in _TERMS]
    coefs = {"entropy_coeff": case["entropy_coeff"], "kl_coef": case["kl_coef"]}
    rows = list(zip(*(ragged[name] for name in _TERMS), masks, strict=True))
    expected = [
        oracle.actor_loss(*row, uid=uid, **coefs) for row, uid in zip(rows, uids, strict=True)
    ]
    expected_grads = [
        oracle.actor_loss_grad(m, w, **coefs) for m, w in zip(masks, _weights(masks), strict=True)
    ]
    scale = [
        [
            abs(p) + coefs["entropy_coeff"] * abs(h) + coefs["kl_coef"] * abs(k)
            for p, h, k in zip(*row[:3], strict=True)
        ]
        for row in rows
    ]

    result = ctx.call("actor_loss", *inputs, action, **coefs)
    total, metrics = _unpack(clause_id, result, ("pg_loss", "entropy", "kl_loss"))
    _assert_shape(clause_id, "per-token total loss", total, tuple(action.shape))
    with ctx.check("loss"):
        _assert_action_rows_close(
            clause_id,
            "per-token total loss",
            expected,
            unpad_right(total, lengths),
            masks,
            uids,
            ctx.tolerance,
            scale,
        )
    scalar = _token_mean(total, action)
    with ctx.check("scalar"):
        assert_scalar_close(
            clause_id,
            "token-mean total loss over action tokens",
            oracle.action_token_mean(expected, masks),
            float(scalar.detach()),
            tolerance=ctx.tolerance,
            scale=_total_scale(scale, masks),
        )
    grads = _gradients(clause_id, scalar, inputs)
    for k, (name, grad) in enumerate(zip(_TERMS, grads, strict=True)):
        what = f"d(token-mean total loss)/d {name}"
        expected_rows = [g[k] for g in expected_grads]
        grad_scale = [[abs(g) for g in row] for row in expected_rows]
        with ctx.check(f"grad_{name}"):
            _assert_action_rows_close(
                clause_id,
                what,
                expected_rows,
                unpad_right(grad, lengths),
                masks,
                uids,
                ctx.tolerance,
                grad_scale,
            )
        with ctx.check("grad_off_actions"):
            _assert_zero_off_actions(clause_id, what, grad, masks, uids)
    for key, name in (("pg_loss", "pg"), ("entropy", "entropy"), ("kl_loss", "kl")):
        values = ragged[name]
        with ctx.check(f"term_{key}"):
            assert_scalar_close(
                clause_id,
                f"reported term {key!r} (action-token mean)",
                oracle.action_token_mean(values, masks),
                metrics[key],
                tolerance=ctx.tolerance,
                scale=oracle.action_token_mean([[abs(v) for v in row] for row in values], masks),
            )


def _actor_sample(
    uid: str, mask: list[int], pg: list[float], entropy: list[float], kl: list[float]
) -> dict[str, Any]:
    return {"uid": uid, "mask": mask, "pg": pg, "entropy": entropy, "kl": kl}


_ENTROPY_EXAMPLES = (
    # pg [0.5, -0.2], H [1, 2], c_ent 0.01 -> [0.49, -0.22]; the hole's H = 3 is ignored.
    {
        "entropy_coeff": 0.01,
        "kl_coef": 0.0,
        "samples": [
            _actor_sample("s0", [1, 1, 0], [0.5, -0.2, 0.1], [1.0, 2.0, 3.0], [0.0, 0.0, 0.0]),
            _actor_sample("s1", [], [], [], []),
        ],
        "pad_value": NAN,
        "extra_pad": 2,
    },
    {
        "entropy_coeff": 0.5,
        "kl_coef": 0.0,
        "samples": [_actor_sample("s0", [1, 1], [0.0, 1.0], [2.0, 0.5], [0.0, 0.0])],
        "pad_value": INF,
        "extra_pad": 1,
    },
)

_TOTAL_EXAMPLES = (
    # verl ppo_loss run: pg 0.3242925703525543 + 0.5 * kl 0.09946729987859726 = 0.374026209...
    {
        "entropy_coeff": 0.0,
        "kl_coef": 0.5,
        "samples": [_actor_sample("s0", [1], [0.3242925703525543], [1.3], [0.09946729987859726])],
        "pad_value": 0.0,
        "extra_pad": 0,
    },
    # 0.5 - 0.01 * 1.0 + 0.1 * 0.2 = 0.51 on the first token; a hole, L_i = 0, NaN padding.
    {
        "entropy_coeff": 0.01,
        "kl_coef": 0.1,
        "samples": [
            _actor_sample("s0", [1, 0, 1], [0.5, 9.0, -1.0], [1.0, 9.0, 2.0], [0.2, 9.0, 3.0]),
            _actor_sample("s1", [], [], [], []),
        ],
        "pad_value": NAN,
        "extra_pad": 2,
    },
    # A huge finite value (1e30) at padding and in a hole, where a float32 exp or square
    # overflows (overflow): masked away, the total must not see it.
    {
        "entropy_coeff": 0.01,
        "kl_coef": 0.1,
        "samples": [
            _actor_sample("s0", [1, 0, 1], [0.5, 1e30, -1.0], [1.0, 1e30, 2.0], [0.2, 1e30, 3.0]),
            _actor_sample("s1", [1], [0.25], [0.5], [0.1]),
        ],
        "pad_value": -1e30,
        "extra_pad": 1,
    },
)


@clause(
    "loss.entropy_bonus",
    title="Entropy bonus sign",
    statement="""total = pg - c_ent * H per action token (the minus sign rewards entropy); the
    gradient w.r.t. H is -c_ent / N on action tokens (the entropy is not detached).""",
    ops=("actor_loss",),
    strategy=_actor_case(with_kl=False),
    examples=_ENTROPY_EXAMPLES,
    checks=ACTOR_CHECKS,
    meets=LOSS_FEATURES,
)
def check_entropy_bonus(ctx: Any, case: dict[str, Any]) -> None:
    """Op ``actor_loss(pg_loss, entropy, kl, mask, *, entropy_coeff, kl_coef) -> (total,
    {"pg_loss", "entropy", "kl_loss"})`` with kl = 0 and kl_coef = 0."""
    _check_actor(ctx, case, "loss.entropy_bonus")


@clause(
    "loss.total",
    title="Total actor loss and its reported terms",
    statement="""total = pg - c_ent H + c_kl KL per action token; gradients w.r.t. pg, H and KL
    are 1, -c_ent and c_kl (over N) on action tokens, 0 elsewhere; each term is reported
    separately as its action-token mean (pg_loss, entropy, kl_loss, without coefficients).""",
    ops=("actor_loss",),
    strategy=_actor_case(with_kl=True),
    examples=_TOTAL_EXAMPLES,
    checks=ACTOR_CHECKS,
    meets=LOSS_FEATURES,
)
def check_total(ctx: Any, case: dict[str, Any]) -> None:
    """Op ``actor_loss(pg_loss, entropy, kl, mask, *, entropy_coeff, kl_coef)``."""
    _check_actor(ctx, case, "loss.total")

"""Clauses of the CONTRACT area `agg`: loss aggregation modes and their shard invariance.

Operations (verl-compatible signatures):
- ``agg_loss(loss_mat (B,T), loss_mask (B,T), mode, dp_size=1, batch_num_tokens=None,
  global_batch_size=None, loss_scale_factor=None) -> scalar tensor`` (verl mode names);
- ``agg_batch_info(loss_mask) -> {"batch_num_tokens": int, "global_batch_size": int}``:
  one shard's share of the global denominators, counted the way the trainer counts them;
  the trainer sums (all-reduces) the shares and passes them to every ``agg_loss`` call.

Profile key: ``agg_norm_length`` (the contract's ``norm_length``, default 10), the constant
length C of seq-mean-token-sum-norm used when ``loss_scale_factor`` is not given.

Checks of every mode clause: ``scalar`` (agg_loss returns a one-element tensor),
``loss_local`` / ``grad_local`` (one call with local denominators: value, d loss / d loss_mat
on valid positions), ``loss_global`` / ``grad_global`` (the same with given global
denominators, as a trainer passes them), ``grad_padding`` (the gradient is 0 at padding).
Loss values at padding hold the case's ``pad_value`` and at mask holes the sample's own
garbage: neither may reach the loss or the gradient.

Tolerance: the loss is a weighted sum of per-token losses, so its rounding error is bounded
by k * eps * (the same aggregation of |l|), with k growing with the number of terms; that
conditioning term is the ``scale`` passed to the comparison. The gradient (a weight per
token) is compared with the base tolerance.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from hypothesis import strategies as st

from rlconform.adapters.base import Inexpressible, Unsupported
from rlconform.conformance import strategies as cs
from rlconform.conformance.compare import assert_rows_close, assert_scalar_close
from rlconform.conformance.context import CheckContext
from rlconform.conformance.distributed import prestart, run_gloo
from rlconform.conformance.errors import ClauseMismatch, TargetError
from rlconform.conformance.harness import assert_padding_zero, pad_right, unpad_right
from rlconform.conformance.registry import clause
from rlconform.oracle import aggregate as oracle

DEFAULT_NORM_LENGTH = 10
GLOO_TIMEOUT_S = 60.0
COMBINES = ("micro-batches", "dp-ranks")

_NAN = float("nan")
_INF = float("inf")


# ---------------------------------------------------------------------------- cases


def _sample(uid: str, mask: list[int], loss: list[float]) -> dict[str, Any]:
    return {"uid": uid, "mask": mask, "loss": loss}


@st.composite
def _mode_case(draw: Any) -> dict[str, Any]:
    """A ragged batch plus the global information of a data-parallel call.

    ``other_tokens`` / ``other_sequences``: what the other ranks and micro-batches add to
    this shard's own counts to make the mini-batch's ``batch_num_tokens`` /
    ``global_batch_size``.
    """
    case = draw(cs.token_batch(fields=("loss",)))
    case["dp_size"] = draw(st.integers(2, 4))
    case["other_tokens"] = draw(st.integers(0, 6))
    case["other_sequences"] = draw(st.integers(0, 3))
    case["loss_scale_factor"] = draw(st.sampled_from([1, 3, 7]))
    return case


def _split_sizes(draw: Any, n: int, k: int) -> list[int]:
    cuts = sorted(draw(st.lists(st.integers(0, n), min_size=k - 1, max_size=k - 1)))
    return [b - a for a, b in zip([0, *cuts], [*cuts, n])]


@st.composite
def _shard_case(draw: Any) -> dict[str, Any]:
    """A ragged batch cut into k contiguous shards (uneven, possibly empty) and a mode."""
    case = draw(cs.token_batch(fields=("loss",), min_samples=0))
    k = draw(st.integers(1, 4))
    case["mode"] = draw(st.sampled_from(oracle.MODES))
    case["combine"] = draw(st.sampled_from(COMBINES))
    case["shards"] = _split_sizes(draw, len(case["samples"]), k)
    case["loss_scale_factor"] = draw(st.sampled_from([None, 3]))
    return case


# verl's measured example (research notes §1.5): row s2 is fully masked, s1 is padded.
_VERL_SAMPLES = [
    _sample("s0", [1, 1, 1, 0], [1.0, 2.0, 3.0, 4.0]),
    _sample("s1", [1, 1], [5.0, 6.0]),
    _sample("s2", [0, 0, 0, 0], [7.0, 7.0, 7.0, 7.0]),
]
_VERL_GLOBAL = {"dp_size": 2, "other_tokens": 5, "other_sequences": 2, "loss_scale_factor": 2}

# CONTRACT mask.loss: 20 positions, action tokens 4 + 5 = 9 holding 2.0 (x4) and 4.0 (x5).
_TWENTY_POSITIONS = [
    _sample("s0", [1, 0, 1, 0, 1, 0, 1, 0, 0, 0], [2.0] * 10),
    _sample("s1", [0, 1, 1, 1, 1, 1, 0, 0, 0, 0], [4.0] * 10),
]


def _mode_examples(*more: dict[str, Any]) -> tuple[dict[str, Any], ...]:
    """Boundary cases every mode clause pins (CONTRACT §3)."""
    dp = {"dp_size": 3, "other_tokens": 4, "other_sequences": 1, "loss_scale_factor": 3}
    return (
        {"samples": _VERL_SAMPLES, "pad_value": 0.0, "extra_pad": 0, **_VERL_GLOBAL},
        # NaN at padding and at the mask holes (tool observations); an L_i = 0 row.
        {
            "samples": [
                _sample("s0", [1, 0, 1], [0.5, _NAN, -1.5]),
                _sample("s1", [], []),
                _sample("s2", [0, 1, 1, 1, 1, 1], [_NAN, 1.0, 2.0, -2.0, 0.25, 4.0]),
            ],
            "pad_value": _NAN,
            "extra_pad": 2,
            **dp,
        },
        # inf padding, a fully masked row, uneven lengths.
        {
            "samples": [
                _sample("s0", [1], [2.0]),
                _sample("s1", [0, 0, 0], [1.0, 1.0, 1.0]),
                _sample("s2", [1, 1, 1, 1, 1], [1.0, -1.0, 3.0, 0.5, 0.5]),
            ],
            "pad_value": _INF,
            "extra_pad": 1,
            **dp,
        },
        # All-masked batch (no action token anywhere): 0, never 0/0.
        {
            "samples": [_sample("s0", [0, 0], [1.0, 2.0]), _sample("s1", [], [])],
            "pad_value": _NAN,
            "extra_pad": 1,
            "dp_size": 2,
            "other_tokens": 0,
            "other_sequences": 0,
            "loss_scale_factor": 3,
        },
        # Empty batch.
        {"samples": [], "pad_value": 0.0, "extra_pad": 0, **dp},
        *more,
    )


# ---------------------------------------------------------------------------- helpers


def _padded(
    ctx: CheckContext, samples: list[dict[str, Any]], pad_value: float, extra_pad: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """(loss_mat, loss_mask): ``pad_value`` at padding, garbage at mask holes (ignored)."""
    width = max((len(s["mask"]) for s in samples), default=0) + extra_pad
    rows = _loss_rows(samples, pad_value)
    loss_mat = pad_right(rows, width=width, fill=pad_value, dtype=ctx.dtype, device=ctx.device)
    return loss_mat.requires_grad_(True), _mask_tensor(ctx, samples, extra_pad)


def _mask_tensor(ctx: CheckContext, samples: list[dict[str, Any]], extra_pad: int) -> torch.Tensor:
    width = max((len(s["mask"]) for s in samples), default=0) + extra_pad
    return pad_right(
        [s["mask"] for s in samples], width=width, dtype=torch.int64, device=ctx.device
    )


def _loss_rows(samples: list[dict[str, Any]], pad_value: float) -> list[list[float]]:
    """Per-token losses as the target receives them (mask holes keep their garbage)."""
    return [list(s["loss"]) for s in samples]


def _agg_with_grad(
    ctx: CheckContext,
    clause_id: str,
    loss_mat: torch.Tensor,
    loss_mask: torch.Tensor,
    mode: str,
    **kwargs: Any,
) -> tuple[float, torch.Tensor]:
    """Call ``agg_loss``; return its value and d value / d loss_mat (zeros if no grad path)."""
    value = ctx.call("agg_loss", loss_mat, loss_mask, mode, **kwargs)
    if not isinstance(value, torch.Tensor) or value.numel() != 1:
        raise ClauseMismatch(
            f"[{clause_id}] agg_loss({mode!r}) must return a scalar tensor, got {value!r}",
            detail={"what": "loss", "actual": repr(value)},
            check="scalar",
        )
    grad = None
    if value.requires_grad:
        try:
            (grad,) = torch.autograd.grad(value.reshape(()), loss_mat, allow_unused=True)
        except Exception as exc:  # the implementation's backward failed
            raise TargetError("agg_loss (backward)", exc) from exc
    if grad is None:
        grad = torch.zeros_like(loss_mat)
    return float(value.detach().reshape(()).to("cpu", torch.float64)), grad.detach()


def _conditioning(
    rows: list[list[float]], masks: list[list[int]], mode: str, settings: dict
) -> float:
    """The same aggregation of |l|: the scale of the rounding error of the weighted sum."""
    return oracle.aggregate([[abs(x) for x in row] for row in rows], masks, mode, **settings)


def _sum_k(masks: list[list[int]], shards: int = 1) -> float:
    """Roundoff multiplier: a float sum of n terms errs by up to about n * eps * sum|x|."""
    return 16.0 + oracle.action_token_count(masks) + shards


def _settings(call_kwargs: dict[str, Any], default_norm: float) -> dict[str, Any]:
    """The oracle keywords equivalent to an ``agg_loss`` call's keywords."""
    norm = call_kwargs.get("loss_scale_factor")
    return {
        "dp_size": call_kwargs.get("dp_size", 1),
        "num_tokens": call_kwargs.get("batch_num_tokens"),
        "num_sequences": call_kwargs.get("global_batch_size"),
        "norm_length": default_norm if norm is None else norm,
    }


def _describe(call_kwargs: dict[str, Any]) -> str:
    if not call_kwargs:
        return "single call, local denominators"
    return ", ".join(f"{k}={v}" for k, v in call_kwargs.items())


def _norm_default(ctx: CheckContext) -> float:
    return ctx.profile.get("agg_norm_length", DEFAULT_NORM_LENGTH)


# ---------------------------------------------------------------------------- modes


def _check_mode(ctx: CheckContext, case: dict[str, Any], mode: str, clause_id: str) -> None:
    """Oracle on ragged rows vs target on padded rows, single-call and global forms, + gradient."""
    samples = case["samples"]
    uids = [s["uid"] for s in samples]
    lengths = [len(s["mask"]) for s in samples]
    masks = [s["mask"] for s in samples]
    rows = _loss_rows(samples, case["pad_value"])
    global_form = {
        "dp_size": case["dp_size"],
        "batch_num_tokens": oracle.action_token_count(masks) + case["other_tokens"],
        "global_batch_size": oracle.sequence_count(masks) + case["other_sequences"],
        "loss_scale_factor": case["loss_scale_factor"],
    }
    for name, call_kwargs in (("local", {}), ("global", global_form)):
        settings = _settings(call_kwargs, _norm_default(ctx))
        form = _describe(call_kwargs)
        loss_mat, loss_mask = _padded(ctx, samples, case["pad_value"], case["extra_pad"])
        value, grad = _agg_with_grad(ctx, clause_id, loss_mat, loss_mask, mode, **call_kwargs)
        with ctx.check(f"loss_{name}"):
            assert_scalar_close(
                clause_id,
                f"agg_loss({mode!r}) ({form})",
                oracle.aggregate(rows, masks, mode, **settings),
                value,
                tolerance=ctx.tolerance,
                scale=_conditioning(rows, masks, mode, settings),
                k=_sum_k(masks),
            )
        what = f"d agg_loss / d loss_mat ({form})"
        with ctx.check("grad_padding"):
            assert_padding_zero(clause_id, what, grad, lengths, uids)
        with ctx.check(f"grad_{name}"):
            assert_rows_close(
                clause_id,
                what,
                oracle.aggregate_gradient(masks, mode, **settings),
                unpad_right(grad, lengths),
                uids=uids,
                tolerance=ctx.tolerance,
            )


MODE_CHECKS = ("scalar", "loss_local", "grad_local", "loss_global", "grad_global", "grad_padding")
MODE_FEATURES = (
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


_MODE_STATEMENT_TAIL = """Checked against the oracle in the single-call form (local
    denominators) and with given global denominators (dp_size > 1, batch_num_tokens,
    global_batch_size, loss_scale_factor), with garbage at padding and mask-0 positions
    (ignored), together with the gradient d loss / d loss_mat (the weight of each token; 0 at
    padding). An aggregate over no action token (an all-filtered mini-batch) is 0 with zero
    gradient, never NaN."""


@clause(
    "agg.token_mean",
    title="token-mean: sum(l m) / action tokens of the whole mini-batch",
    statement="""sum(l * m) / N, N = action tokens of the whole mini-batch across all
    data-parallel ranks and micro-batches (not the local count), times dp_size. """
    + _MODE_STATEMENT_TAIL,
    ops=("agg_loss",),
    checks=MODE_CHECKS,
    meets=MODE_FEATURES,
    strategy=_mode_case(),
    examples=_mode_examples(
        {
            "samples": _TWENTY_POSITIONS,
            "pad_value": 0.0,
            "extra_pad": 0,
            "dp_size": 2,
            "other_tokens": 9,
            "other_sequences": 0,
            "loss_scale_factor": 1,
        },
    ),
)
def check_token_mean(ctx: CheckContext, case: dict[str, Any]) -> None:
    _check_mode(ctx, case, "token-mean", "agg.token_mean")


@clause(
    "agg.token_sum",
    title="token-sum: sum(l m), times dp_size",
    statement="""sum(l * m), times dp_size so that DDP's gradient averaging leaves the sum
    over every action token of the global batch. """
    + _MODE_STATEMENT_TAIL,
    ops=("agg_loss",),
    checks=MODE_CHECKS,
    meets=MODE_FEATURES,
    strategy=_mode_case(),
    examples=_mode_examples(),
)
def check_token_sum(ctx: CheckContext, case: dict[str, Any]) -> None:
    _check_mode(ctx, case, "token-sum", "agg.token_sum")


@clause(
    "agg.seq_mean_token_sum",
    title="seq-mean-token-sum: per-sequence token sums over the number of sequences",
    statement="""sum over sequences of (sum_t l m) / S, S = sequences with at least one
    action token over the whole mini-batch (a fully masked row is not counted), times
    dp_size. """
    + _MODE_STATEMENT_TAIL,
    ops=("agg_loss",),
    checks=MODE_CHECKS,
    meets=MODE_FEATURES,
    strategy=_mode_case(),
    examples=_mode_examples(),
)
def check_seq_mean_token_sum(ctx: CheckContext, case: dict[str, Any]) -> None:
    _check_mode(ctx, case, "seq-mean-token-sum", "agg.seq_mean_token_sum")


@clause(
    "agg.seq_mean_token_mean",
    title="seq-mean-token-mean: mean over sequences of the per-sequence token mean",
    statement="""sum over sequences of (sum_t l m / sum_t m) / S, S = sequences with at
    least one action token over the whole mini-batch, times dp_size. """
    + _MODE_STATEMENT_TAIL,
    ops=("agg_loss",),
    checks=MODE_CHECKS,
    meets=MODE_FEATURES,
    strategy=_mode_case(),
    examples=_mode_examples(),
)
def check_seq_mean_token_mean(ctx: CheckContext, case: dict[str, Any]) -> None:
    _check_mode(ctx, case, "seq-mean-token-mean", "agg.seq_mean_token_mean")


@clause(
    "agg.seq_mean_token_sum_norm",
    title="seq-mean-token-sum-norm: sum(l m) / (S * a constant length) (Dr. GRPO)",
    statement="""sum(l * m) / (S * C), S = sequences with at least one action token over
    the whole mini-batch, C a constant length: loss_scale_factor when given, else the
    profile's agg_norm_length (never the padded width), times dp_size. """
    + _MODE_STATEMENT_TAIL,
    ops=("agg_loss",),
    checks=MODE_CHECKS,
    meets=MODE_FEATURES,
    strategy=_mode_case(),
    examples=_mode_examples(),
)
def check_seq_mean_token_sum_norm(ctx: CheckContext, case: dict[str, Any]) -> None:
    _check_mode(ctx, case, "seq-mean-token-sum-norm", "agg.seq_mean_token_sum_norm")


# ---------------------------------------------------------------------------- shards


def _shards(samples: list[dict[str, Any]], sizes: list[int]) -> list[list[dict[str, Any]]]:
    if sum(sizes) != len(samples):
        raise ValueError(f"shard sizes {sizes} do not cover {len(samples)} samples")
    starts = [sum(sizes[:r]) for r in range(len(sizes))]
    return [samples[start : start + size] for start, size in zip(starts, sizes)]


def _batch_info(ctx: CheckContext, loss_mask: torch.Tensor) -> dict[str, int]:
    info = ctx.call("agg_batch_info", loss_mask)
    missing = {"batch_num_tokens", "global_batch_size"} - set(info)
    if missing:
        raise ClauseMismatch(
            f"[agg.shard_invariance] agg_batch_info must return batch_num_tokens and "
            f"global_batch_size; missing {sorted(missing)}",
            detail={"what": "agg_batch_info", "actual": repr(info)},
            check="batch_info",
        )
    return {key: int(info[key]) for key in ("batch_num_tokens", "global_batch_size")}


def _full_batch(ctx: CheckContext, case: dict[str, Any]) -> tuple[float, list[list[float]]]:
    """The target's own single call on the whole batch: value and ragged gradient rows."""
    loss_mat, loss_mask = _padded(ctx, case["samples"], case["pad_value"], case["extra_pad"])
    value, grad = _agg_with_grad(
        ctx,
        "agg.shard_invariance",
        loss_mat,
        loss_mask,
        case["mode"],
        loss_scale_factor=case["loss_scale_factor"],
    )
    return value, unpad_right(grad, [len(s["mask"]) for s in case["samples"]])


def _shard_call(
    ctx: CheckContext,
    part: list[dict[str, Any]],
    case: dict[str, Any],
    dp_size: int,
    info: dict[str, int],
) -> tuple[float, list[list[float]]]:
    """One shard's ``agg_loss`` with the global denominators, padded to the shard's own width."""
    loss_mat, loss_mask = _padded(ctx, part, case["pad_value"], case["extra_pad"])
    value, grad = _agg_with_grad(
        ctx,
        "agg.shard_invariance",
        loss_mat,
        loss_mask,
        case["mode"],
        dp_size=dp_size,
        loss_scale_factor=case["loss_scale_factor"],
        **info,
    )
    return value, unpad_right(grad, [len(s["mask"]) for s in part])


def _in_process(
    ctx: CheckContext, case: dict[str, Any]
) -> tuple[float, list[list[float]], dict[str, int]]:
    """Micro-batches: losses and gradients add up. DP ranks: loss x dp_size, gradients averaged."""
    parts = _shards(case["samples"], case["shards"])
    shares = [_batch_info(ctx, _mask_tensor(ctx, part, case["extra_pad"])) for part in parts]
    info = {
        key: sum(share[key] for share in shares)
        for key in ("batch_num_tokens", "global_batch_size")
    }
    ranks = len(parts) if case["combine"] == "dp-ranks" else 1
    values, grads = [], []
    for part in parts:
        value, grad = _shard_call(ctx, part, case, ranks, info)
        values.append(value)
        grads.extend(grad)
    total = math.fsum(values) / ranks
    return total, [[g / ranks for g in row] for row in grads], info


def _denominators(info: dict[str, int], samples: list[dict[str, Any]]) -> str:
    """The denominators the target counted, beside the contract's counts of the same batch."""
    masks = [s["mask"] for s in samples]
    return (
        f"batch_num_tokens={info['batch_num_tokens']} (action tokens: "
        f"{oracle.action_token_count(masks)}), global_batch_size={info['global_batch_size']} "
        f"(sequences with an action token: {oracle.sequence_count(masks)})"
    )


def _compare_with_full(
    ctx: CheckContext, case: dict[str, Any], how: str, value: float, grads: list[list[float]]
) -> None:
    samples = case["samples"]
    masks = [s["mask"] for s in samples]
    full_value, full_grads = _full_batch(ctx, case)
    settings = _settings({"loss_scale_factor": case["loss_scale_factor"]}, _norm_default(ctx))
    scale = _conditioning(_loss_rows(samples, case["pad_value"]), masks, case["mode"], settings)
    what = f"agg_loss({case['mode']!r}) over {how}"
    with ctx.check("loss"):
        assert_scalar_close(
            "agg.shard_invariance",
            f"{what}: expected = the full batch in one call, actual = the combined shards",
            full_value,
            value,
            tolerance=ctx.tolerance,
            scale=scale,
            k=_sum_k(masks, len(case["shards"])),
        )
    with ctx.check("grad"):
        assert_rows_close(
            "agg.shard_invariance",
            f"d loss / d loss_mat, {what}: expected = full batch, actual = combined shards",
            full_grads,
            grads,
            uids=[s["uid"] for s in samples],
            tolerance=ctx.tolerance,
        )


def _shard_examples() -> tuple[dict[str, Any], ...]:
    uneven = [
        _sample("s0", [1], [4.0]),
        _sample("s1", [1, 1, 1, 1, 1, 1], [1.0, 2.0, 0.5, -1.0, 3.0, 2.0]),
        _sample("s2", [1, 0, 1], [-2.0, 5.0, 1.0]),
        _sample("s3", [], []),
    ]
    empty_row = [
        _sample("s0", [1, 1], [1.0, 3.0]),
        _sample("s1", [0, 0, 0], [2.0, 2.0, 2.0]),
        _sample("s2", [1, 1, 1], [2.0, 4.0, 6.0]),
        _sample("s3", [1], [5.0]),
    ]
    in_process = [
        # token-mean: uneven token counts, an empty micro-batch, an L_i = 0 row, NaN padding.
        {
            "samples": uneven,
            "pad_value": _NAN,
            "extra_pad": 1,
            "mode": "token-mean",
            "combine": "micro-batches",
            "shards": [1, 0, 3],
            "loss_scale_factor": None,
        },
        {
            "samples": uneven,
            "pad_value": 7.5,
            "extra_pad": 0,
            "mode": "token-mean",
            "combine": "dp-ranks",
            "shards": [1, 3],
            "loss_scale_factor": None,
        },
        # A fully masked row: counted by global_batch_size but not by the local default?
        {
            "samples": empty_row,
            "pad_value": 0.0,
            "extra_pad": 0,
            "mode": "seq-mean-token-sum",
            "combine": "micro-batches",
            "shards": [2, 2],
            "loss_scale_factor": None,
        },
        {
            "samples": empty_row,
            "pad_value": 0.0,
            "extra_pad": 0,
            "mode": "seq-mean-token-mean",
            "combine": "dp-ranks",
            "shards": [2, 2],
            "loss_scale_factor": None,
        },
        # Micro-batches of different padded widths: C must not be the width.
        {
            "samples": empty_row,
            "pad_value": -1e30,
            "extra_pad": 2,
            "mode": "seq-mean-token-sum-norm",
            "combine": "micro-batches",
            "shards": [1, 3],
            "loss_scale_factor": None,
        },
        {
            "samples": uneven,
            "pad_value": _INF,
            "extra_pad": 0,
            "mode": "token-sum",
            "combine": "dp-ranks",
            "shards": [2, 2],
            "loss_scale_factor": None,
        },
    ]

    def on_ranks(
        world_size: int, shards_by_mode: dict[str, tuple[list, list[int]]]
    ) -> dict[str, Any]:
        cases = [
            {
                "samples": samples,
                "pad_value": _NAN,
                "extra_pad": 1,
                "mode": mode,
                "combine": "dp-ranks",
                "shards": shards,
                "loss_scale_factor": None,
            }
            for mode, (samples, shards) in shards_by_mode.items()
        ]
        return {"world_size": world_size, "cases": cases}

    gloo = [
        on_ranks(
            2,
            {
                "token-mean": (uneven, [1, 3]),
                "token-sum": (uneven, [3, 1]),
                "seq-mean-token-sum": (empty_row, [2, 2]),
                "seq-mean-token-mean": (empty_row, [1, 3]),
                "seq-mean-token-sum-norm": (empty_row, [3, 1]),
            },
        ),
        on_ranks(
            3,
            {
                "token-mean": (uneven, [1, 1, 2]),
                "seq-mean-token-sum": (empty_row, [1, 1, 2]),
                "seq-mean-token-mean": (uneven, [2, 1, 1]),
                "seq-mean-token-sum-norm": (uneven, [1, 2, 1]),
            },
        ),
    ]
    return (*in_process, *gloo)


def _gloo_features(case: dict[str, Any]) -> set[str]:
    """A gloo case holds its sub-cases under ``cases``: their features, as the walker
    reads them (it only sees a case's own ``samples``)."""
    from rlconform.conformance.features import generic_features

    found: set[str] = set()
    for sub in case.get("cases", ()):
        found |= generic_features(sub)
    return found & set((*MODE_FEATURES, "uneven_shards", "empty_shard"))


@clause(
    "agg.shard_invariance",
    title="Micro-batch and data-parallel splits give the full-batch loss and gradient",
    statement="""Splitting a batch into k micro-batches or k data-parallel ranks, each
    aggregated with the global denominators (the sum of every shard's agg_batch_info) and
    combined the way the trainer combines them (sum of micro-batch losses; DDP gradient
    averaging of losses multiplied by dp_size), gives the full-batch loss and gradient of one
    call with local denominators. Checked in-process (uneven token counts, empty micro-batches,
    fully masked rows, shards of different padded widths) and on real torch.distributed gloo
    processes for world sizes 2 and 3.""",
    ops=("agg_loss", "agg_batch_info"),
    strategy=_shard_case(),
    examples=_shard_examples(),
    checks=("scalar", "batch_info", "loss", "grad"),
    meets=(*MODE_FEATURES, "uneven_shards", "empty_shard"),
    case_features=_gloo_features,
    prepare=lambda target, device: _start_worlds(target, device),
)
def check_shard_invariance(ctx: CheckContext, case: dict[str, Any]) -> None:
    if "world_size" in case:
        _check_on_gloo(ctx, case)
        return
    value, grads, info = _in_process(ctx, case)
    sizes = "+".join(str(size) for size in case["shards"])
    how = (
        f"{len(case['shards'])} {case['combine']} of {sizes} samples with the summed "
        + _denominators(info, case["samples"])
    )
    _compare_with_full(ctx, case, how, value, grads)


# ---------------------------------------------------------------------------- gloo


def _start_worlds(target: Any, device: str) -> None:
    """Start the gloo worlds of the pinned gloo cases in the background, each running its
    case once (the target's first calls import what they need); the results are dropped."""
    for case in _shard_examples():
        if "world_size" in case:
            payload = {"target": target, "device": device, "cases": case["cases"]}
            prestart(case["world_size"], _gloo_rank, payload)


def _check_on_gloo(ctx: CheckContext, case: dict[str, Any]) -> None:
    """One gloo run: every sub-case on the same process group; rank 0 reports the results."""
    world_size = case["world_size"]
    payload = {"target": ctx.target, "device": ctx.device, "cases": case["cases"]}
    reports = run_gloo(_gloo_rank, world_size, payload, timeout_s=GLOO_TIMEOUT_S)
    for rank, report in enumerate(reports):
        for problem in report["problems"]:
            _raise_remote(rank, problem)
    for sub, (value, grads, info) in zip(case["cases"], reports[0]["results"]):
        sizes = "+".join(str(size) for size in sub["shards"])
        how = (
            f"{world_size} gloo ranks holding {sizes} samples (loss and gradients all-reduced "
            f"and averaged) with the all-reduced " + _denominators(info, sub["samples"])
        )
        _compare_with_full(ctx, sub, how, value, grads)


def _raise_remote(rank: int, problem: dict[str, Any]) -> None:
    if problem["kind"] == "skip":
        kind = Inexpressible if problem["inexpressible"] else Unsupported
        raise TargetError(problem["op"], kind(problem["message"]))
    if problem["kind"] == "mismatch":
        raise ClauseMismatch(
            problem["message"] + f" (on gloo rank {rank})",
            detail=problem["detail"],
            check=problem.get("check"),
        )
    failure = TargetError(problem["op"], RuntimeError(problem["message"]))
    failure.summary = f"{problem['message']} (on gloo rank {rank})"
    failure.traceback = problem["traceback"]
    raise failure


def _gloo_rank(rank: int, world_size: int, payload: dict[str, Any]) -> dict[str, Any]:
    """Per rank: its shard, all-reduced denominators, agg_loss x dp_size, DDP-averaged gradient.

    A failing target call is recorded and replaced by zeros, so that every rank still joins
    every collective (no rank is left waiting).
    """
    import torch.distributed as dist

    ctx = CheckContext(target=payload["target"], device=payload["device"])
    results, problems = [], []
    for sub in payload["cases"]:
        part = _shards(sub["samples"], sub["shards"])[rank]
        offset = sum(len(s["mask"]) for s in sub["samples"][: sum(sub["shards"][:rank])])
        total_tokens = sum(len(s["mask"]) for s in sub["samples"])
        counts = torch.zeros(2, dtype=torch.int64)
        value, grads = 0.0, [[0.0] * len(s["mask"]) for s in part]
        try:
            info = _batch_info(ctx, _mask_tensor(ctx, part, sub["extra_pad"]))
            counts = torch.tensor([info["batch_num_tokens"], info["global_batch_size"]])
        except (ClauseMismatch, TargetError) as failure:
            problems.append(_problem(failure))
        dist.all_reduce(counts)
        info = {"batch_num_tokens": int(counts[0]), "global_batch_size": int(counts[1])}
        try:
            value, grads = _shard_call(ctx, part, sub, world_size, info)
        except (ClauseMismatch, TargetError) as failure:
            problems.append(_problem(failure))
        loss = torch.tensor([value], dtype=torch.float64)
        flat = torch.zeros(total_tokens, dtype=torch.float64)
        flat[offset : offset + sum(len(row) for row in grads)] = torch.tensor(
            [g for row in grads for g in row], dtype=torch.float64
        )
        dist.all_reduce(loss)
        dist.all_reduce(flat)
        averaged = (flat / world_size).tolist()
        lengths = [len(s["mask"]) for s in sub["samples"]]
        starts = [sum(lengths[:i]) for i in range(len(lengths))]
        rows = [averaged[start : start + n] for start, n in zip(starts, lengths)]
        results.append((float(loss) / world_size, rows, info))
    return {"results": results if rank == 0 else None, "problems": problems}


def _problem(failure: ClauseMismatch | TargetError) -> dict[str, Any]:
    if isinstance(failure, TargetError) and isinstance(
        failure.original, (Inexpressible, Unsupported)
    ):
        return {
            "kind": "skip",
            "op": failure.op,
            "message": str(failure.original),
            "inexpressible": isinstance(failure.original, Inexpressible),
        }
    if isinstance(failure, ClauseMismatch):
        return {
            "kind": "mismatch",
            "message": failure.message,
            "detail": failure.detail,
            "check": failure.check,
        }
    return {
        "kind": "target",
        "op": failure.op,
        "message": failure.summary,
        "traceback": failure.traceback,
    }

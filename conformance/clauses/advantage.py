"""Clauses of the CONTRACT area `adv`: advantage estimators and their shared invariants.

One operation per estimator, so a target may implement a subset. Every operation takes
right-padded (B, T) tensors with ``response_mask`` = 1 on action tokens (holes for tool
observations included, as verl's ``response_mask``) and returns ``(advantages, returns)``,
both (B, T). Advantages and returns are compared on action tokens only; ``adv.invariants``
separately requires exact zeros everywhere else. Token rewards are read over the whole
response, mask holes included (CONTRACT reward credit: score_i is their sum; the
return-based estimators credit a hole's reward to the preceding action token); reward
padding is 0 by protocol. Values, log-probs and weights at mask-0 positions are ignored.
``index`` is the group labels as a numpy object array (verl's ``uid`` column).

Operations (each returns ``(advantages, returns)``):

- ``advantage_gae(token_level_rewards, values, response_mask, gamma, lam,
  bootstrap_value=None, terminated=None)``: (B,) float and (B,) bool; None = all terminated.
- ``advantage_grpo(token_level_rewards, response_mask, index, epsilon, norm_by_std)``;
  ``advantage_grpo_passk`` takes the same arguments.
- ``advantage_rloo``, ``advantage_reinforce_pp_baseline``, ``advantage_opo``:
  ``(token_level_rewards, response_mask, index)``.
- ``advantage_reinforce_pp(token_level_rewards, response_mask, gamma)``.
- ``advantage_remax(token_level_rewards, reward_baselines, response_mask)``.
- ``advantage_gpg(token_level_rewards, response_mask, index, f_norm)``.
- ``advantage_optimal_token_baseline(token_level_rewards, response_mask, index,
  old_log_probs, sum_pi_squared, rollout_is_weights=None, epsilon=1e-8)``.
- ``advantage_gdpo(reward_components, response_mask, index, weights, epsilon,
  norm_by_std)``: ``reward_components`` is (B, K), one scalar per sample and component.

Profile keys (``ctx.profile.get(key, contract default)``):

- ``grpo_std_ddof`` (1), ``grpo_eps`` (1e-6), ``grpo_singleton`` ("mean0_std1" | "zero"):
  adv.grpo, adv.grpo_passk (ddof, eps) and adv.gdpo.
- ``rloo_singleton`` ("score" | "zero"): adv.rloo.
- ``singleton_baseline`` ("zero": a group of one has baseline 0, verl | "self": its own
  score, so advantage 0): adv.reinforce_pp_baseline, adv.opo, adv.gpg.
- ``gpg_alpha`` ("informative": GPG paper, B / samples of groups with two distinct scores |
  "nonzero_score": verl, B / samples with a nonzero score | "one"): adv.gpg.
- ``whiten_degenerate`` ("zeros" | "raise", verl): what batch whitening does when the batch
  has at most one action token (adv.gae, adv.reinforce_pp, adv.reinforce_pp_baseline,
  adv.gdpo). The contract default is zeros: centring removes the only value.
- ``whiten_std_eps`` (None | float): None is the contract's (x - mean) / sqrt(var + 1e-8);
  a float puts the stabiliser on the std, (x - mean) / (std + eps) (AReaL's
  ``Normalization``, eps 1e-5): same estimators.

Tolerance: each estimator's allowed error is ``k * eps(dtype) * scale`` (k = 4) on top of
CONTRACT §4's atol/rtol, where ``scale`` is a first-order rounding-error bound (in units of eps)
propagated through the estimator's formula from the float64 inputs: representation and
summation error of the scores, of the group mean, of the difference, of the std, and of
the final division; whitening divides by sqrt(var + 1e-8), so near-equal inputs get a large
but finite scale. Honest float32 stays well inside; a variance computed as E[x^2] - mean^2
(GRPO on scores 1.0 / 1.00001: +-0.005 instead of +-0.62) does not.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from hypothesis import strategies as st

from rlconform.conformance import strategies as cs
from rlconform.conformance.compare import Tolerance, assert_equal, assert_rows_close
from rlconform.conformance.errors import ClauseMismatch, TargetError
from rlconform.conformance.features import allows
from rlconform.conformance.harness import pad_right, to_float_list, unpad_right
from rlconform.conformance.registry import clause
from rlconform.oracle import advantage as oracle
from rlconform.oracle.errors import ContractError

Rows = list[list[float]]

# ---------------------------------------------------------------------------------------
# Cases: {"samples": [{"uid", "group", "mask", "rewards", ...}], "pad_value", "extra_pad",
# "params": {...}}. Rewards carry the sample's score on its last action token, or (edge) on
# its last token when that is a tool observation, plus dense shaping rewards in some cases
# and (edge) rewards on mask holes: all of them are credited (CONTRACT reward credit).
# Values, log-probs and weights at mask-0 positions hold garbage (finite; hardening: huge
# or non-finite), padding the case's pad_value: neither may influence any output. Reward
# padding is 0 (the padded protocol cannot tell a trailing hole from padding).

_GAMMAS = (1.0, 0.99, 0.9, 0.5, 0.0)
_LAMBDAS = (1.0, 0.95, 0.5, 0.0)
_COMPONENT_VALUES = (0.0, 1.0, 1.00001, 0.5, -2.0)
_HOLE_REWARDS = (0.5, -1.0, 2.0)


@st.composite
def _group_labels(draw: Any, min_group_size: int, max_samples: int) -> list[str]:
    if min_group_size <= 1:
        return draw(cs.group_labels(draw(st.integers(cs.fewest_samples(1), max_samples))))
    sizes = draw(st.sampled_from([[2], [3], [2, 2], [2, 3], [3, 2]]))
    labels = [f"g{g}" for g, size in enumerate(sizes) for _ in range(size)]
    return list(draw(st.permutations(labels)))


def _hole_reward(draw: Any) -> float:
    """A reward on a mask-0 token: 0, or (edge) a real reward the estimators must credit."""
    if allows("edge") and draw(st.integers(0, 3)) == 0:
        return draw(st.sampled_from(_HOLE_REWARDS))
    return 0.0


@st.composite
def _sample(
    draw: Any,
    uid: str,
    group: str,
    score: float,
    dense: bool,
    fields: Sequence[str],
    n_components: int,
) -> dict[str, Any]:
    length = draw(cs.lengths())
    mask = draw(cs.loss_mask(length))
    garbage = cs.hole_values()
    rewards = [
        (draw(cs.finite(-1.0, 1.0)) if dense else 0.0) if m else _hole_reward(draw) for m in mask
    ]
    actions = [t for t, m in enumerate(mask) if m]
    if actions:
        at_tail = allows("edge") and not mask[-1] and draw(st.booleans())
        carrier = length - 1 if at_tail else actions[-1]
        rewards[carrier] = score
    sample: dict[str, Any] = {"uid": uid, "group": group, "mask": mask, "rewards": rewards}
    if "values" in fields:
        sample["values"] = [draw(cs.finite()) if m else draw(garbage) for m in mask]
        sample["terminated"] = draw(st.booleans())
        sample["bootstrap"] = draw(cs.finite())
    if "baseline" in fields:
        sample["baseline"] = draw(cs.finite(-3.0, 3.0))
    if "logprobs" in fields:
        logprobs, pi_squared = [], []
        hole_logprobs = (0.0, -2.0) + ((1000.0, -1e4) if allows("hardening") else ())
        for m in mask:
            if not m:
                logprobs.append(draw(st.sampled_from(hole_logprobs)))
                pi_squared.append(draw(garbage))
                continue
            logprob = draw(st.sampled_from((0.0, -1e-3, -0.1, -0.7, -2.0, -8.0)))
            p = math.exp(logprob)
            logprobs.append(logprob)
            pi_squared.append(p * p + draw(st.sampled_from((0.0, 0.3, 1.0))) * (1.0 - p) ** 2)
        sample["old_logprobs"] = logprobs
        sample["sum_pi_squared"] = pi_squared
        sample["is_weights"] = [
            draw(st.sampled_from((1.0, 0.5, 2.0))) if m else draw(garbage) for m in mask
        ]
    if "components" in fields:
        sample["components"] = [
            draw(st.sampled_from(_COMPONENT_VALUES)) for _ in range(n_components)
        ]
        if not allows("edge"):
            sample["components"] = [c + int(uid[1:]) for c in sample["components"]]
    return sample


_PARAMS = {
    "gamma": st.sampled_from(_GAMMAS),
    "lam": st.sampled_from(_LAMBDAS),
    "bootstrap": st.booleans(),
    "norm_by_std": st.booleans(),
    "f_norm": st.sampled_from((1.0, 0.5, 2.0)),
    "is_weights": st.booleans(),
}


@st.composite
def advantage_case(
    draw: Any,
    *,
    fields: Sequence[str] = (),
    params: Sequence[str] = (),
    min_group_size: int = 1,
    dense: bool = True,
    max_samples: int = 5,
) -> dict[str, Any]:
    """A ragged batch for the estimators: groups (singleton, partial, interleaved), scores
    (general, binary, all-equal, nearly equal), mask holes with garbage values and credited
    rewards, garbage padding; restricted to the current domain (CONTRACT §0a)."""
    labels = draw(_group_labels(min_group_size, max_samples))
    scores = draw(cs.rewards(len(labels), labels))
    dense = dense and draw(st.integers(0, 3)) == 0
    n_components = draw(st.integers(1, 3)) if "components" in fields else 0
    samples = [
        draw(_sample(f"s{i}", label, scores[i], dense, fields, n_components))
        for i, label in enumerate(labels)
    ]
    case: dict[str, Any] = {
        "samples": samples,
        "pad_value": draw(cs.pad_values()),
        "extra_pad": draw(st.integers(0, 2)),
    }
    drawn = {name: draw(_PARAMS[name]) for name in params}
    if "components" in fields:
        drawn["weights"] = [draw(st.sampled_from((1.0, 0.5, 2.0))) for _ in range(n_components)]
    case["params"] = drawn
    return case


def _s(uid: str, group: str, mask: list[int], rewards: list[float], **extra: Any) -> dict[str, Any]:
    """A pinned sample (keeps the examples below short)."""
    return {"uid": uid, "group": group, "mask": mask, "rewards": rewards, **extra}


def _case(
    samples: list[dict[str, Any]], pad_value: float = 0.0, extra_pad: int = 0, **params: Any
) -> dict[str, Any]:
    return {"samples": samples, "pad_value": pad_value, "extra_pad": extra_pad, "params": params}


# ---------------------------------------------------------------------------------------
# Layout: ragged case -> padded tensors in the target's dtype and device.


def _masks(case: dict[str, Any]) -> list[list[int]]:
    return [s["mask"] for s in case["samples"]]


def _labels(case: dict[str, Any]) -> list[str]:
    return [s["group"] for s in case["samples"]]


def _token_field(ctx: Any, case: dict[str, Any], name: str, width: int) -> torch.Tensor:
    """A per-token field padded with the case's pad_value; token rewards are padded with 0."""
    fill = 0.0 if name == "rewards" else case["pad_value"]
    return ctx.floats([s[name] for s in case["samples"]], fill=fill, width=width)


def _response_mask(ctx: Any, case: dict[str, Any], width: int) -> torch.Tensor:
    return pad_right(_masks(case), width=width, fill=0, dtype=torch.int64, device=ctx.device)


def _per_sample(ctx: Any, values: list[float]) -> torch.Tensor:
    return torch.tensor(values, dtype=ctx.dtype, device=ctx.device)


def _index(case: dict[str, Any]) -> np.ndarray:
    """Group labels as verl passes its ``uid`` column: a numpy object array of str."""
    return np.array(_labels(case), dtype=object)


# ---------------------------------------------------------------------------------------
# Conditioning: first-order rounding-error bounds in units of eps (see module docstring).


def _score_error(rewards: list[float], mask: list[int]) -> float:
    """Representation plus summation error of score_i (exact for a single nonzero reward)."""
    terms = [abs(r) for r in rewards if r != 0]
    return 0.5 * max(len(terms), 1) * math.fsum(terms)


def _suffix_sum_error(rewards: list[float], mask: list[int]) -> float:
    """Error of a reverse cumulative sum of the credited rewards anywhere in the row (by
    scan or by total - prefix; crediting a hole's reward adds one rounding per term)."""
    terms = [abs(r) for r in rewards if r != 0]
    return 0.5 * (2 * len(terms) + 1) * math.fsum(terms)


def _mean_error(values: list[float], errors: list[float]) -> float:
    """Error of a mean: the inputs' own errors, summation (log2 n + 1 levels), division."""
    n = len(values)
    if n == 0:
        return 0.0
    mean_abs = math.fsum(abs(v) for v in values) / n
    summation = 0.5 * math.ceil(math.log2(n) + 1) * mean_abs
    return math.fsum(errors) / n + summation + 0.5 * abs(math.fsum(values) / n)


def _std_of(values: list[float], ddof: int) -> float:
    mean = math.fsum(values) / len(values)
    return math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (len(values) - ddof))


def _group_normalized_error(
    scores: list[float],
    errors: list[float],
    labels: list[str],
    advantages: list[float],
    *,
    epsilon: float,
    norm_by_std: bool,
    ddof: int,
) -> list[float]:
    """Bound on the error of (s - mean) / (std + eps), or s - mean, per sample."""
    out = [0.0] * len(scores)
    for members in oracle.group_members(labels).values():
        group = [scores[i] for i in members]
        if len(members) == 1:
            i = members[0]
            out[i] = errors[i] + abs(advantages[i])
            continue
        mean_error = _mean_error(group, [errors[i] for i in members])
        mean = math.fsum(group) / len(group)
        diff_error = {i: errors[i] + mean_error + 0.5 * abs(scores[i] - mean) for i in members}
        if not norm_by_std:
            for i in members:
                out[i] = diff_error[i]
            continue
        std = _std_of(group, ddof)
        std_error = 1.5 * max(diff_error.values()) + len(group) * std
        for i in members:
            out[i] = (diff_error[i] + abs(advantages[i]) * std_error) / (std + epsilon) + abs(
                advantages[i]
            )
    return out


def _whiten_error(
    x_rows: Rows,
    error_rows: Rows,
    masks: list[list[int]],
    out_rows: Rows,
    std_eps: float | None = None,
) -> Rows:
    """Bound on the error of (x - mean) / sqrt(var + 1e-8) (or / (std + ``std_eps``), profile
    ``whiten_std_eps``) given each x's own error."""
    xs = [x for row, mask in zip(x_rows, masks) for x, m in zip(row, mask) if m]
    errors = [e for row, mask in zip(error_rows, masks) for e, m in zip(row, mask) if m]
    n = len(xs)
    if n <= 1:
        return [[0.0] * len(mask) for mask in masks]
    mean = math.fsum(xs) / n
    var = math.fsum((x - mean) ** 2 for x in xs) / (n - 1)
    std = math.sqrt(var + oracle.WHITEN_EPS) if std_eps is None else math.sqrt(var) + std_eps
    mean_error = _mean_error(xs, errors)
    worst_diff = max(e + mean_error + 0.5 * abs(x - mean) for x, e in zip(xs, errors))
    std_error = 1.5 * worst_diff + n * std
    return [
        [
            ((e + mean_error + 0.5 * abs(x - mean)) + abs(w) * std_error) / std + abs(w)
            if m
            else 0.0
            for x, e, w, m in zip(x_row, e_row, w_row, mask)
        ]
        for x_row, e_row, w_row, mask in zip(x_rows, error_rows, out_rows, masks)
    ]


# ---------------------------------------------------------------------------------------
# Estimators: oracle expectation, call into the target, conditioning scale.


@dataclasses.dataclass(frozen=True)
class Expected:
    advantages: Rows
    returns: Rows
    advantage_scale: Rows
    return_scale: Rows


@dataclasses.dataclass(frozen=True)
class Estimator:
    """One estimator clause. ``returns_defined``: the contract defines its returns (GAE: A +
    V; REINFORCE++ and the optimal token baseline: G; ReMax: the reverse cumulative sum).
    The outcome estimators' returns are a framework convention (verl copies the
    advantages), so neither the ``returns`` check nor the invariants look at them."""

    clause: str
    op: str
    group_local: bool
    expect: Callable[[Any, dict[str, Any]], Expected]
    call: Callable[[Any, dict[str, Any], int], Any]
    k: float = 4.0
    returns_defined: bool = False


def _credit_error(sample: dict[str, Any]) -> list[float]:
    """Rounding of the credited rewards: each one is a sum of the rewards it carries."""
    terms = [abs(r) for r in sample["rewards"]]
    carried = oracle.credited_rewards(terms, sample["mask"])
    counts = oracle.credited_rewards([1.0 if r else 0.0 for r in sample["rewards"]], sample["mask"])
    return [0.5 * n * c for n, c in zip(counts, carried)]


def _scores_and_errors(case: dict[str, Any]) -> tuple[list[float], list[float]]:
    scores = [oracle.sample_score(s["rewards"], s["mask"]) for s in case["samples"]]
    errors = [_score_error(s["rewards"], s["mask"]) for s in case["samples"]]
    return scores, errors


def _outcome_expected(
    case: dict[str, Any], advantages: Rows, per_sample_error: list[float]
) -> Expected:
    scale = oracle.broadcast(per_sample_error, _masks(case))
    return Expected(advantages, [list(r) for r in advantages], scale, [list(r) for r in scale])


def _per_sample_values(rows: Rows, masks: list[list[int]]) -> list[float]:
    return [next((v for v, m in zip(row, mask) if m), 0.0) for row, mask in zip(rows, masks)]


# adv.gae ---------------------------------------------------------------------------------


def _bootstraps(ctx: Any, case: dict[str, Any]) -> bool:
    """Truncated samples bootstrap: the case asks for it and the profile's
    ``truncated_bootstrap`` (default True) says the framework takes a bootstrap value."""
    return bool(case["params"]["bootstrap"]) and bool(ctx.profile.get("truncated_bootstrap", True))


def _gae_expect(ctx: Any, case: dict[str, Any]) -> Expected:
    samples, p = case["samples"], case["params"]
    bootstraps = _bootstraps(ctx, case)
    terminated = [s["terminated"] if bootstraps else True for s in samples]
    bootstrap = [s["bootstrap"] for s in samples]
    masks = _masks(case)
    rewards = [oracle.credited_rewards(s["rewards"], s["mask"]) for s in samples]
    credit_error = [_credit_error(s) for s in samples]
    values = [s["values"] for s in samples]
    degenerate = ctx.profile.get("whiten_degenerate", "zeros")
    at_holes = bool(ctx.profile.get("discount_at_holes", False))
    advantages, returns = oracle.gae(
        [s["rewards"] for s in samples],
        values,
        masks,
        terminated,
        bootstrap,
        gamma=p["gamma"],
        lam=p["lam"],
        whiten_degenerate=degenerate,
        whiten_std_eps=ctx.profile.get("whiten_std_eps"),
        discount_at_holes=at_holes,
    )
    raw = [
        [a - v if m else 0.0 for a, v, m in zip(ret, val, mask)]
        for ret, val, mask in zip(returns, values, masks)
    ]
    raw_error, return_error = [], []
    gamma, lam = p["gamma"], p["lam"]
    for r, c, v, mask, a, done, boot in zip(
        rewards, credit_error, values, masks, raw, terminated, bootstrap
    ):
        errors, ret_errors = [0.0] * len(mask), [0.0] * len(mask)
        next_value = 0.0 if done else boot
        next_adv, next_error, following = 0.0, 0.0, None
        for t in reversed(range(len(mask))):
            if not mask[t]:
                continue
            # gamma ** steps <= gamma; its own rounding grows with the number of steps
            steps = following - t if at_holes and following is not None else 1
            delta = r[t] + gamma * next_value - v[t]
            errors[t] = (
                abs(r[t])
                + c[t]
                + (1 + steps) * abs(gamma * next_value)
                + abs(v[t])
                + abs(delta)
                + (1 + steps) * gamma * lam * abs(next_adv)
                + abs(a[t])
                + gamma * lam * next_error
            )
            ret_errors[t] = errors[t] + abs(v[t]) + abs(a[t] + v[t])
            next_value, next_adv, next_error, following = v[t], a[t], errors[t], t
        raw_error.append(errors)
        return_error.append(ret_errors)
    return Expected(
        advantages,
        returns,
        _whiten_error(raw, raw_error, masks, advantages, ctx.profile.get("whiten_std_eps")),
        return_error,
    )


def _gae_call(ctx: Any, case: dict[str, Any], width: int) -> Any:
    samples, p = case["samples"], case["params"]
    kwargs = {}
    if _bootstraps(ctx, case):
        kwargs["bootstrap_value"] = _per_sample(ctx, [s["bootstrap"] for s in samples])
        kwargs["terminated"] = torch.tensor(
            [s["terminated"] for s in samples], dtype=torch.bool, device=ctx.device
        )
    return ctx.call(
        "advantage_gae",
        _token_field(ctx, case, "rewards", width),
        _token_field(ctx, case, "values", width),
        _response_mask(ctx, case, width),
        p["gamma"],
        p["lam"],
        **kwargs,
    )


# adv.grpo --------------------------------------------------------------------------------


def _grpo_expect(ctx: Any, case: dict[str, Any]) -> Expected:
    p = case["params"]
    eps, ddof = ctx.profile.get("grpo_eps", 1e-6), ctx.profile.get("grpo_std_ddof", 1)
    singleton = ctx.profile.get("grpo_singleton", "mean0_std1")
    masks = _masks(case)
    advantages, _ = oracle.grpo(
        [s["rewards"] for s in case["samples"]],
        masks,
        _labels(case),
        epsilon=eps,
        norm_by_std=p["norm_by_std"],
        std_ddof=ddof,
        singleton=singleton,
    )
    scores, errors = _scores_and_errors(case)
    per_sample = oracle.group_normalized(
        scores,
        _labels(case),
        epsilon=eps,
        norm_by_std=p["norm_by_std"],
        std_ddof=ddof,
        singleton=singleton,
    )
    bound = _group_normalized_error(
        scores,
        errors,
        _labels(case),
        per_sample,
        epsilon=eps,
        norm_by_std=p["norm_by_std"],
        ddof=ddof,
    )
    return _outcome_expected(case, advantages, bound)


def _grpo_call(ctx: Any, case: dict[str, Any], width: int) -> Any:
    return ctx.call(
        "advantage_grpo",
        _token_field(ctx, case, "rewards", width),
        _response_mask(ctx, case, width),
        _index(case),
        epsilon=ctx.profile.get("grpo_eps", 1e-6),
        norm_by_std=case["params"]["norm_by_std"],
    )


# adv.rloo --------------------------------------------------------------------------------


def _rloo_expect(ctx: Any, case: dict[str, Any]) -> Expected:
    masks, labels = _masks(case), _labels(case)
    advantages, _ = oracle.rloo(
        [s["rewards"] for s in case["samples"]],
        masks,
        labels,
        singleton=ctx.profile.get("rloo_singleton", "score"),
    )
    scores, errors = _scores_and_errors(case)
    per_sample = _per_sample_values(advantages, masks)
    bound = [0.0] * len(scores)
    for members in oracle.group_members(labels).values():
        n = len(members)
        group_error = _mean_error([scores[j] for j in members], [errors[j] for j in members])
        for i in members:
            factor = n / (n - 1) if n > 1 else 1.0
            bound[i] = errors[i] + factor * (group_error + abs(scores[i])) + abs(per_sample[i])
    return _outcome_expected(case, advantages, bound)


def _rloo_call(ctx: Any, case: dict[str, Any], width: int) -> Any:
    return ctx.call(
        "advantage_rloo",
        _token_field(ctx, case, "rewards", width),
        _response_mask(ctx, case, width),
        _index(case),
    )


# adv.reinforce_pp ------------------------------------------------------------------------


def _reinforce_pp_expect(ctx: Any, case: dict[str, Any]) -> Expected:
    gamma = case["params"]["gamma"]
    masks = _masks(case)
    at_holes = bool(ctx.profile.get("discount_at_holes", False))
    advantages, returns = oracle.reinforce_pp(
        [s["rewards"] for s in case["samples"]],
        masks,
        gamma=gamma,
        whiten_degenerate=ctx.profile.get("whiten_degenerate", "zeros"),
        whiten_std_eps=ctx.profile.get("whiten_std_eps"),
        discount_at_holes=at_holes,
    )
    return_error = []
    for sample, mask, ret in zip(case["samples"], masks, returns):
        r = oracle.credited_rewards(sample["rewards"], mask)
        c = _credit_error(sample)
        errors = [0.0] * len(mask)
        next_return, next_error, following = 0.0, 0.0, None
        for t in reversed(range(len(mask))):
            if mask[t]:
                steps = following - t if at_holes and following is not None else 1
                errors[t] = (
                    abs(r[t])
                    + c[t]
                    + (1 + steps) * abs(gamma * next_return)
                    + abs(ret[t])
                    + gamma * next_error
                )
                next_return, next_error, following = ret[t], errors[t], t
        return_error.append(errors)
    return Expected(
        advantages,
        returns,
        _whiten_error(returns, return_error, masks, advantages, ctx.profile.get("whiten_std_eps")),
        return_error,
    )


def _reinforce_pp_call(ctx: Any, case: dict[str, Any], width: int) -> Any:
    return ctx.call(
        "advantage_reinforce_pp",
        _token_field(ctx, case, "rewards", width),
        _response_mask(ctx, case, width),
        case["params"]["gamma"],
    )


# adv.reinforce_pp_baseline ---------------------------------------------------------------


def _reinforce_pp_baseline_expect(ctx: Any, case: dict[str, Any]) -> Expected:
    masks, labels = _masks(case), _labels(case)
    singleton = ctx.profile.get("singleton_baseline", "zero")
    advantages, _ = oracle.reinforce_pp_baseline(
        [s["rewards"] for s in case["samples"]],
        masks,
        labels,
        singleton_baseline=singleton,
        whiten_degenerate=ctx.profile.get("whiten_degenerate", "zeros"),
        whiten_std_eps=ctx.profile.get("whiten_std_eps"),
    )
    scores, errors = _scores_and_errors(case)
    centred, centred_error = [0.0] * len(scores), [0.0] * len(scores)
    for members in oracle.group_members(labels).values():
        group = [scores[j] for j in members]
        mean_error = _mean_error(group, [errors[j] for j in members])
        baseline = (
            math.fsum(group) / len(group)
            if len(group) > 1
            else (0.0 if singleton == "zero" else group[0])
        )
        for i in members:
            centred[i] = scores[i] - baseline
            centred_error[i] = errors[i] + mean_error + 0.5 * abs(centred[i])
    x_rows = oracle.broadcast(centred, masks)
    scale = _whiten_error(
        x_rows,
        oracle.broadcast(centred_error, masks),
        masks,
        advantages,
        ctx.profile.get("whiten_std_eps"),
    )
    return Expected(advantages, [list(r) for r in advantages], scale, [list(r) for r in scale])


def _reinforce_pp_baseline_call(ctx: Any, case: dict[str, Any], width: int) -> Any:
    return ctx.call(
        "advantage_reinforce_pp_baseline",
        _token_field(ctx, case, "rewards", width),
        _response_mask(ctx, case, width),
        _index(case),
    )


# adv.remax -------------------------------------------------------------------------------


def _remax_expect(ctx: Any, case: dict[str, Any]) -> Expected:
    samples, masks = case["samples"], _masks(case)
    advantages, returns = oracle.remax(
        [s["rewards"] for s in samples], masks, [s["baseline"] for s in samples]
    )
    return_error = [
        [
            _suffix_sum_error(s["rewards"], s["mask"]) + abs(g) if m else 0.0
            for g, m in zip(ret, s["mask"])
        ]
        for s, ret in zip(samples, returns)
    ]
    advantage_error = [
        [e + abs(s["baseline"]) + abs(a) for e, a in zip(errors, adv)]
        for s, errors, adv in zip(samples, return_error, advantages)
    ]
    return Expected(advantages, returns, advantage_error, return_error)


def _remax_call(ctx: Any, case: dict[str, Any], width: int) -> Any:
    return ctx.call(
        "advantage_remax",
        _token_field(ctx, case, "rewards", width),
        _per_sample(ctx, [s["baseline"] for s in case["samples"]]),
        _response_mask(ctx, case, width),
    )


# adv.opo ---------------------------------------------------------------------------------


def _opo_expect(ctx: Any, case: dict[str, Any]) -> Expected:
    masks, labels = _masks(case), _labels(case)
    advantages, _ = oracle.opo(
        [s["rewards"] for s in case["samples"]],
        masks,
        labels,
        singleton_baseline=ctx.profile.get("singleton_baseline", "zero"),
    )
    scores, errors = _scores_and_errors(case)
    lengths = [sum(m) for m in masks]
    per_sample = _per_sample_values(advantages, masks)
    bound = [0.0] * len(scores)
    for members in oracle.group_members(labels).values():
        total = sum(lengths[j] for j in members)
        if total == 0:
            continue
        weighted = [lengths[j] * scores[j] for j in members]
        baseline_error = (
            math.fsum(lengths[j] * (errors[j] + abs(scores[j])) for j in members) / total
            + 0.5 * len(members) * math.fsum(abs(w) for w in weighted) / total
        )
        for i in members:
            bound[i] = errors[i] + baseline_error + abs(per_sample[i])
    return _outcome_expected(case, advantages, bound)


def _opo_call(ctx: Any, case: dict[str, Any], width: int) -> Any:
    return ctx.call(
        "advantage_opo",
        _token_field(ctx, case, "rewards", width),
        _response_mask(ctx, case, width),
        _index(case),
    )


# adv.grpo_passk --------------------------------------------------------------------------


def _grpo_passk_expect(ctx: Any, case: dict[str, Any]) -> Expected:
    p = case["params"]
    eps, ddof = ctx.profile.get("grpo_eps", 1e-6), ctx.profile.get("grpo_std_ddof", 1)
    masks, labels = _masks(case), _labels(case)
    advantages, _ = oracle.grpo_passk(
        [s["rewards"] for s in case["samples"]],
        masks,
        labels,
        epsilon=eps,
        norm_by_std=p["norm_by_std"],
        std_ddof=ddof,
    )
    scores, errors = _scores_and_errors(case)
    per_sample = _per_sample_values(advantages, masks)
    bound = [0.0] * len(scores)
    for members in oracle.group_members(labels).values():
        gap_error = 2 * max(errors[j] + abs(scores[j]) for j in members)
        group = [scores[j] for j in members]
        for i in members:
            bound[i] = gap_error + abs(per_sample[i])
            if p["norm_by_std"]:
                std = _std_of(group, ddof)
                diff_error = _mean_error(group, [errors[j] for j in members]) + max(
                    errors[j] + abs(scores[j]) for j in members
                )
                std_error = 1.5 * diff_error + len(group) * std
                bound[i] = (gap_error + abs(per_sample[i]) * std_error) / (std + eps) + abs(
                    per_sample[i]
                )
    return _outcome_expected(case, advantages, bound)


def _grpo_passk_call(ctx: Any, case: dict[str, Any], width: int) -> Any:
    return ctx.call(
        "advantage_grpo_passk",
        _token_field(ctx, case, "rewards", width),
        _response_mask(ctx, case, width),
        _index(case),
        epsilon=ctx.profile.get("grpo_eps", 1e-6),
        norm_by_std=case["params"]["norm_by_std"],
    )


# adv.gpg ---------------------------------------------------------------------------------


def _gpg_expect(ctx: Any, case: dict[str, Any]) -> Expected:
    f_norm = case["params"]["f_norm"]
    masks, labels = _masks(case), _labels(case)
    advantages, _ = oracle.gpg(
        [s["rewards"] for s in case["samples"]],
        masks,
        labels,
        f_norm=f_norm,
        alpha_rule=ctx.profile.get("gpg_alpha", "informative"),
        singleton_baseline=ctx.profile.get("singleton_baseline", "zero"),
    )
    scores, errors = _scores_and_errors(case)
    per_sample = _per_sample_values(advantages, masks)
    alpha = oracle.gpg_alpha(scores, labels, ctx.profile.get("gpg_alpha", "informative"))
    bound = [0.0] * len(scores)
    for members in oracle.group_members(labels).values():
        group_error = _mean_error([scores[j] for j in members], [errors[j] for j in members])
        for i in members:
            bound[i] = alpha * (errors[i] + group_error + abs(scores[i])) / f_norm + 3 * abs(
                per_sample[i]
            )
    return _outcome_expected(case, advantages, bound)


def _gpg_call(ctx: Any, case: dict[str, Any], width: int) -> Any:
    return ctx.call(
        "advantage_gpg",
        _token_field(ctx, case, "rewards", width),
        _response_mask(ctx, case, width),
        _index(case),
        f_norm=case["params"]["f_norm"],
    )


# adv.optimal_token_baseline --------------------------------------------------------------


def _otb_expect(ctx: Any, case: dict[str, Any]) -> Expected:
    samples, masks, labels = case["samples"], _masks(case), _labels(case)
    use_is = case["params"]["is_weights"]
    is_weights = [s["is_weights"] for s in samples] if use_is else None
    advantages, returns = oracle.optimal_token_baseline(
        [s["rewards"] for s in samples],
        masks,
        labels,
        [s["old_logprobs"] for s in samples],
        [s["sum_pi_squared"] for s in samples],
        is_weights,
    )
    g_error, cum, cum_error = [], [], []
    for i, s in enumerate(samples):
        mask = s["mask"]
        g_error.append([_suffix_sum_error(s["rewards"], mask) + abs(g) for g in returns[i]])
        total, total_error = 0.0, 0.0
        w_row, e_row = [0.0] * len(mask), [0.0] * len(mask)
        for t, m in enumerate(mask):
            if not m:
                continue
            p = math.exp(s["old_logprobs"][t])
            sq = s["is_weights"][t] ** 2 if use_is else 1.0
            w = (1.0 - 2.0 * p + s["sum_pi_squared"][t]) * sq
            total += w
            total_error += (
                (1.0 + 4.0 * p + s["sum_pi_squared"][t] + abs(w / sq)) * sq
                + 2 * abs(w)
                + abs(total)
            )
            w_row[t], e_row[t] = total, total_error
        cum.append(w_row)
        cum_error.append(e_row)
    scale = [[0.0] * len(m) for m in masks]
    for members in oracle.group_members(labels).values():
        width = max(len(masks[i]) for i in members)
        for t in range(width):
            active = [i for i in members if t < len(masks[i]) and masks[i][t]]
            baseline_error, baseline = 0.0, 0.0
            if len(active) >= 2:
                denominator = math.fsum(cum[i][t] for i in active) + 1e-8
                numerator = math.fsum(returns[i][t] * cum[i][t] for i in active)
                baseline = numerator / denominator
                n = len(active)
                numerator_error = math.fsum(
                    g_error[i][t] * abs(cum[i][t])
                    + abs(returns[i][t]) * cum_error[i][t]
                    + n * abs(returns[i][t] * cum[i][t])
                    for i in active
                )
                denominator_error = math.fsum(cum_error[i][t] + n * abs(cum[i][t]) for i in active)
                baseline_error = (
                    numerator_error + abs(baseline) * denominator_error
                ) / denominator + abs(baseline)
            for i in active:
                scale[i][t] = g_error[i][t] + baseline_error + abs(advantages[i][t])
    return Expected(advantages, returns, scale, g_error)


def _otb_call(ctx: Any, case: dict[str, Any], width: int) -> Any:
    kwargs = {}
    if case["params"]["is_weights"]:
        kwargs["rollout_is_weights"] = _token_field(ctx, case, "is_weights", width)
    return ctx.call(
        "advantage_optimal_token_baseline",
        _token_field(ctx, case, "rewards", width),
        _response_mask(ctx, case, width),
        _index(case),
        _token_field(ctx, case, "old_logprobs", width),
        _token_field(ctx, case, "sum_pi_squared", width),
        **kwargs,
    )


# adv.gdpo --------------------------------------------------------------------------------


def _gdpo_expect(ctx: Any, case: dict[str, Any]) -> Expected:
    p = case["params"]
    eps, ddof = ctx.profile.get("grpo_eps", 1e-6), ctx.profile.get("grpo_std_ddof", 1)
    singleton = ctx.profile.get("grpo_singleton", "mean0_std1")
    masks, labels = _masks(case), _labels(case)
    components = [s["components"] for s in case["samples"]]
    advantages, _ = oracle.gdpo(
        components,
        masks,
        labels,
        p["weights"],
        epsilon=eps,
        norm_by_std=p["norm_by_std"],
        std_ddof=ddof,
        singleton=singleton,
        whiten_degenerate=ctx.profile.get("whiten_degenerate", "zeros"),
        whiten_std_eps=ctx.profile.get("whiten_std_eps"),
    )
    n = len(components)
    total, total_error = [0.0] * n, [0.0] * n
    for k, weight in enumerate(p["weights"]):
        scores = [float(c[k]) for c in components]
        normalized = oracle.group_normalized(
            scores,
            labels,
            epsilon=eps,
            norm_by_std=p["norm_by_std"],
            std_ddof=ddof,
            singleton=singleton,
        )
        errors = _group_normalized_error(
            scores,
            [0.5 * abs(s) for s in scores],
            labels,
            normalized,
            epsilon=eps,
            norm_by_std=p["norm_by_std"],
            ddof=ddof,
        )
        for i in range(n):
            total[i] += weight * normalized[i]
            total_error[i] += abs(weight) * (errors[i] + abs(normalized[i]))
    total_error = [e + len(p["weights"]) * abs(t) for e, t in zip(total_error, total)]
    scale = _whiten_error(
        oracle.broadcast(total, masks),
        oracle.broadcast(total_error, masks),
        masks,
        advantages,
        ctx.profile.get("whiten_std_eps"),
    )
    return Expected(advantages, [list(r) for r in advantages], scale, [list(r) for r in scale])


def _gdpo_call(ctx: Any, case: dict[str, Any], width: int) -> Any:
    p = case["params"]
    components = torch.tensor(
        [s["components"] for s in case["samples"]] or [[0.0] * len(p["weights"])],
        dtype=ctx.dtype,
        device=ctx.device,
    )[: len(case["samples"])]
    return ctx.call(
        "advantage_gdpo",
        components,
        _response_mask(ctx, case, width),
        _index(case),
        weights=list(p["weights"]),
        epsilon=ctx.profile.get("grpo_eps", 1e-6),
        norm_by_std=p["norm_by_std"],
    )


ESTIMATORS: dict[str, Estimator] = {
    spec.clause: spec
    for spec in (
        Estimator("adv.gae", "advantage_gae", False, _gae_expect, _gae_call, returns_defined=True),
        Estimator("adv.grpo", "advantage_grpo", True, _grpo_expect, _grpo_call),
        Estimator("adv.rloo", "advantage_rloo", True, _rloo_expect, _rloo_call),
        Estimator(
            "adv.reinforce_pp",
            "advantage_reinforce_pp",
            False,
            _reinforce_pp_expect,
            _reinforce_pp_call,
            returns_defined=True,
        ),
        Estimator(
            "adv.reinforce_pp_baseline",
            "advantage_reinforce_pp_baseline",
            False,
            _reinforce_pp_baseline_expect,
            _reinforce_pp_baseline_call,
        ),
        Estimator(
            "adv.remax", "advantage_remax", True, _remax_expect, _remax_call, returns_defined=True
        ),
        Estimator("adv.opo", "advantage_opo", True, _opo_expect, _opo_call),
        Estimator(
            "adv.grpo_passk", "advantage_grpo_passk", True, _grpo_passk_expect, _grpo_passk_call
        ),
        Estimator("adv.gpg", "advantage_gpg", False, _gpg_expect, _gpg_call),
        Estimator(
            "adv.optimal_token_baseline",
            "advantage_optimal_token_baseline",
            True,
            _otb_expect,
            _otb_call,
            returns_defined=True,
        ),
        Estimator("adv.gdpo", "advantage_gdpo", False, _gdpo_expect, _gdpo_call),
    )
}


# ---------------------------------------------------------------------------------------
# Shared checking logic.


def _on_actions(rows: Rows, masks: list[list[int]]) -> Rows:
    """Rows with every non-action position set to 0: comparisons see action tokens only."""
    return [[float(v) if m else 0.0 for v, m in zip(row, mask)] for row, mask in zip(rows, masks)]


def _outputs(spec: Estimator, result: Any, n: int, width: int) -> tuple[torch.Tensor, torch.Tensor]:
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        raise ClauseMismatch(
            f"[{spec.clause}] {spec.op} must return (advantages, returns), got {type(result).__name__}",
            detail={"what": "return value"},
            check="shape",
        )
    advantages, returns = result
    for what, tensor in (("advantages", advantages), ("returns", returns)):
        shape = tuple(getattr(tensor, "shape", ()))
        assert_equal(spec.clause, f"{spec.op} {what} shape", (n, width), shape, check="shape")
    return advantages, returns


def _expect_error(
    spec: Estimator, ctx: Any, case: dict[str, Any], width: int, reason: ContractError
) -> None:
    """The contract says the input is invalid (or the profile says raise): the target must raise."""
    try:
        result = spec.call(ctx, case, width)
    except TargetError:
        return
    raise ClauseMismatch(
        f"[{spec.clause}] {spec.op} returned {type(result).__name__} where the contract requires an "
        f"error: {reason}",
        detail={"what": "error expected", "expected": str(reason), "actual": "no error"},
        check="raises",
    )


def _compare(
    ctx: Any,
    spec: Estimator,
    case: dict[str, Any],
    expected: Expected,
    advantages: Any,
    returns: Any,
    tolerance: Tolerance,
    label: str = "",
    check: str | None = None,
) -> None:
    """Advantages and returns on action tokens; each a check of its own (``advantages``,
    ``returns``) unless ``check`` names the invariant being tested."""
    masks = _masks(case)
    lengths = cs.lengths_of(case)
    uids = cs.uids_of(case)
    compared = [("advantages", expected.advantages, advantages, expected.advantage_scale)]
    if spec.returns_defined:
        compared.append(("returns", expected.returns, returns, expected.return_scale))
    for what, want, got, scale in compared:
        with ctx.check(check or what):
            assert_rows_close(
                spec.clause,
                f"{spec.op} {what}{label} (action tokens)",
                _on_actions(want, masks),
                _on_actions(unpad_right(got, lengths), masks),
                uids=uids,
                tolerance=tolerance,
                scale=scale,
                k=spec.k,
            )


def _check_estimator(spec: Estimator, ctx: Any, case: dict[str, Any]) -> None:
    width = cs.width_of_case(case)
    try:
        expected = spec.expect(ctx, case)
    except ContractError as reason:
        _expect_error(spec, ctx, case, width, reason)
        return
    advantages, returns = _outputs(spec, spec.call(ctx, case, width), len(case["samples"]), width)
    _compare(ctx, spec, case, expected, advantages, returns, ctx.tolerance)


# shape: (advantages, returns), both (B, T); advantages / returns: the oracle's values on
# action tokens; raises: the contract (or the profile) requires an error for this input.
ESTIMATOR_CHECKS = ("shape", "advantages", "returns", "raises")
OUTCOME_CHECKS = ("shape", "advantages", "raises")
# The §0a features an estimator's cases can have. Reward padding is 0 by protocol, so an
# estimator that reads rewards only (the outcome estimators) meets no padding garbage.
OUTCOME_FEATURES = (
    "mask_holes",
    "unequal_groups",
    "extra_padding",
    "empty_response",
    "actionless_sample",
    "singleton_group",
    "equal_scores",
    "hole_reward",
    "empty_batch",
    "no_samples",
    "zero_width",
)
# Estimators that also read values or log-probs, padded with the case's garbage.
ESTIMATOR_FEATURES = (*OUTCOME_FEATURES, "padding_finite", "padding_nonfinite", "overflow")


def _register(
    clause_id: str,
    *,
    title: str,
    statement: str,
    strategy: Any,
    examples: Sequence[dict[str, Any]],
    meets: tuple[str, ...] = OUTCOME_FEATURES,
) -> None:
    spec = ESTIMATORS[clause_id]

    def check(ctx: Any, case: dict[str, Any]) -> None:
        _check_estimator(spec, ctx, case)

    check.__name__ = f"check_{clause_id.split('.', 1)[1]}"
    check.__doc__ = statement
    clause(
        clause_id,
        title=title,
        statement=statement,
        ops=(spec.op,),
        strategy=strategy,
        examples=examples,
        checks=ESTIMATOR_CHECKS if spec.returns_defined else OUTCOME_CHECKS,
        meets=meets,
    )(check)


# ---------------------------------------------------------------------------------------
# Pinned examples (CONTRACT §3 boundary classes) and clause registrations.

_NAN, _INF = float("nan"), float("inf")

# fmt: off
_GAE_EXAMPLES = (
    # Tool observation (mask 0, garbage reward and value) inside a response; NaN padding;
    # a truncated sample bootstraps, a terminated one ignores its (nonzero) bootstrap.
    _case([_s("s0", "g0", [1, 0, 0, 1], [0.0, 1000.0, 2.5, 1.0], values=[0.5, -4.0, 1000.0, 0.25], terminated=True, bootstrap=3.0),
           _s("s1", "g0", [1, 1, 1], [0.0, 0.0, 0.5], values=[0.1, 0.2, 0.3], terminated=False, bootstrap=2.0)],
          pad_value=_NAN, extra_pad=2, gamma=0.9, lam=0.95, bootstrap=True),
    # L_i = 0 next to L_i = max, inf padding, gamma = lam = 1 (returns = suffix sums).
    _case([_s("s0", "g0", [], [], values=[], terminated=True, bootstrap=-1.0),
           _s("s1", "g0", [1] * 6, [0.0] * 5 + [1.0], values=[1.0] * 6, terminated=False, bootstrap=0.5)],
          pad_value=_INF, extra_pad=1, gamma=1.0, lam=1.0, bootstrap=True),
    # Nearly-equal raw advantages: whitening is ill-conditioned here.
    _case([_s("s0", "g0", [1], [1.0], values=[0.0], terminated=True, bootstrap=0.0),
           _s("s1", "g1", [1], [1.00001], values=[0.0], terminated=True, bootstrap=0.0)],
          pad_value=-1e30, gamma=1.0, lam=1.0, bootstrap=False),
    # A single action token in the whole batch (whitening degenerate: profile).
    _case([_s("s0", "g0", [0, 1, 0], [5.0, 1.0, 5.0], values=[9.0, 0.5, 9.0], terminated=True, bootstrap=0.0)],
          pad_value=_NAN, extra_pad=1, gamma=0.99, lam=0.95, bootstrap=False),
    # Samples but no action token in the batch (empty_batch): a response of tool tokens
    # only (garbage reward and values there) and an empty one.
    _case([_s("s0", "g0", [0, 0], [0.0, 0.0], values=[0.5, -4.0], terminated=True, bootstrap=0.0),
           _s("s1", "g0", [], [], values=[], terminated=True, bootstrap=0.0)],
          pad_value=7.5, extra_pad=1, gamma=0.9, lam=0.95, bootstrap=False),
    # Empty batch.
    _case([], gamma=1.0, lam=1.0, bootstrap=False),
)

_GROUP_EXAMPLES = (
    # Scores 1.0 vs 1.00001 (CONTRACT §4: GRPO gives +-0.62, a cancelling variance +-0.005);
    # a singleton group; NaN padding.
    _case([_s("s0", "g0", [1, 1], [0.0, 1.0]),
           _s("s1", "g0", [1, 1, 1], [0.0, 0.0, 1.00001]),
           _s("s2", "g1", [1], [3.0])],
          pad_value=_NAN, extra_pad=1, norm_by_std=True, f_norm=1.0),
    # All-equal scores in a group; partial, interleaved groups; garbage in mask holes.
    _case([_s("s0", "g0", [1, 0, 1], [0.0, 0.25, 0.25]),
           _s("s1", "g1", [1, 1], [0.0, 1.0]),
           _s("s2", "g0", [1], [0.5]),
           _s("s3", "g1", [1, 1, 0], [0.0, 0.0, 2.5]),
           _s("s4", "g0", [1, 1], [0.25, 0.25])],
          pad_value=_INF, extra_pad=2, norm_by_std=False, f_norm=0.5),
    # An L_i = 0 sample (score 0) in a group; garbage padding.
    _case([_s("s0", "g0", [], []),
           _s("s1", "g0", [1] * 6, [0.0] * 5 + [2.0]),
           _s("s2", "g0", [0, 1], [-4.0, 1.0])],
          pad_value=7.5, norm_by_std=True, f_norm=2.0),
    # Empty batch.
    _case([], norm_by_std=True, f_norm=1.0),
)

_RFPP_EXAMPLES = (
    # A tool observation does not end the episode: the return is carried through it and
    # written at action tokens only.
    _case([_s("s0", "g0", [1, 0, 1, 1], [0.0, 2.0, 0.0, 1.0]), _s("s1", "g0", [1, 1], [0.5, 0.0])],
          pad_value=_NAN, extra_pad=1, gamma=0.5),
    _case([_s("s0", "g0", [1, 1, 1], [1.0, 1.0, 1.0]),
           _s("s1", "g1", [], []),
           _s("s2", "g2", [0, 1, 0, 1], [2.5, 1.0, -4.0, 1.00001])],
          pad_value=-1e30, extra_pad=2, gamma=1.0),
    # A single action token in the whole batch.
    _case([_s("s0", "g0", [1], [1.0])], pad_value=_NAN, extra_pad=1, gamma=0.9),
    _case([], gamma=0.9),
)

_REMAX_EXAMPLES = (
    _case([_s("s0", "g0", [1, 0, 1, 1], [0.5, 2.0, 0.0, 1.0], baseline=0.5),
           _s("s1", "g0", [], [], baseline=2.0),
           _s("s2", "g1", [1, 1], [0.0, 1.00001], baseline=1.0)],
          pad_value=_NAN, extra_pad=2),
    # Samples but no action token in the batch (empty_batch): nothing to credit.
    _case([_s("s0", "g0", [0, 0], [0.0, 0.0], baseline=0.5), _s("s1", "g0", [], [], baseline=1.0)],
          pad_value=_NAN, extra_pad=1),
    _case([]),
)

_OPO_EXAMPLES = (
    # Every sample of a group has L = 0 (verl: 0/0 = NaN leaks into the output).
    _case([_s("s0", "g0", [], []), _s("s1", "g0", [0, 0], [1.0, 2.0]), _s("s2", "g1", [1], [1.0])],
          pad_value=_NAN, extra_pad=1),
)

_PASSK_EXAMPLES = (
    # Ties at the top give 0; the best sample gets s_max - s_second.
    _case([_s("s0", "g0", [1], [1.0]), _s("s1", "g0", [1, 0], [0.5, 0.5]), _s("s2", "g0", [1], [0.0]),
           _s("s3", "g1", [1, 1], [0.0, 1.0]), _s("s4", "g1", [1], [0.5])],
          pad_value=_NAN, extra_pad=1, norm_by_std=True),
    _case([_s("s0", "g0", [1, 1], [0.0, 1.00001]), _s("s1", "g0", [], [])], pad_value=_INF, norm_by_std=False),
    # A group of one: pass@k is undefined, the operation must raise.
    _case([_s("s0", "g0", [1], [1.0]), _s("s1", "g0", [1], [0.0]), _s("s2", "g1", [1], [1.0])], norm_by_std=True),
    # Samples but no action token in the batch (empty_batch).
    _case([_s("s0", "g0", [0, 0], [0.0, 0.0]), _s("s1", "g0", [], [])], pad_value=_NAN, extra_pad=1, norm_by_std=True),
    _case([], norm_by_std=True),
)

_OTB_EXAMPLES = (
    # Holes with garbage (exp(1000) overflows, NaN), importance weights, pi near 0 and 1.
    _case([_s("s0", "g0", [1, 1, 1], [0.0, 0.0, 1.0], old_logprobs=[-0.1, -0.7, -2.0],
              sum_pi_squared=[0.82, 0.3, 0.2], is_weights=[1.0, 2.0, 0.5]),
           _s("s1", "g0", [1, 0, 1, 1], [0.0, 2.5, 0.0, 0.0], old_logprobs=[-0.7, 1000.0, -0.1, 0.0],
              sum_pi_squared=[0.4, _NAN, 0.9, 1.0], is_weights=[1.0, 7.5, 1.0, 1.0]),
           _s("s2", "g1", [1, 1], [0.5, 0.5], old_logprobs=[-8.0, -1e-3],
              sum_pi_squared=[0.5, 0.999], is_weights=[2.0, 1.0])],
          pad_value=_NAN, extra_pad=1, is_weights=True),
    # A lone longest sample: its tail has no baseline; its partner has L = 0.
    _case([_s("s0", "g0", [1, 1], [0.0, 0.5], old_logprobs=[-0.7, -0.7], sum_pi_squared=[0.3, 0.3], is_weights=[1.0, 1.0]),
           _s("s1", "g0", [], [], old_logprobs=[], sum_pi_squared=[], is_weights=[])],
          pad_value=_INF, extra_pad=2, is_weights=False),
    _case([], is_weights=False),
)

_GDPO_EXAMPLES = (
    _case([_s("s0", "g0", [1, 1], [0.0, 0.0], components=[1.0, 0.0]),
           _s("s1", "g0", [1, 0, 1], [0.0, 9.0, 0.0], components=[1.00001, 1.0]),
           _s("s2", "g1", [1], [0.0], components=[0.5, -2.0]),
           _s("s3", "g0", [], [], components=[0.0, 1.0])],
          pad_value=_NAN, extra_pad=1, norm_by_std=True, weights=[1.0, 0.5]),
    _case([_s("s0", "g0", [0, 1], [0.0, 0.0], components=[1.0])], pad_value=_INF, norm_by_std=False, weights=[2.0]),
    # Samples but no action token in the batch (empty_batch): nothing to whiten.
    _case([_s("s0", "g0", [0], [0.0], components=[1.0]), _s("s1", "g0", [], [], components=[0.0])],
          pad_value=_NAN, extra_pad=1, norm_by_std=True, weights=[1.0]),
    _case([], norm_by_std=True, weights=[1.0]),
)
# Groups of two and three (unequal_groups, nominal: no edge feature), distinct scores, finite
# padding: the group baselines that do not meet it by generation within the ci budget.
_UNEQUAL_GROUPS = _case([_s("s0", "g0", [1, 1], [0.0, 1.0]),
                         _s("s1", "g0", [1], [0.5]),
                         _s("s2", "g1", [1, 1, 1], [0.0, 0.0, 2.0]),
                         _s("s3", "g1", [1, 1], [0.0, 1.5]),
                         _s("s4", "g1", [1], [0.25])],
                        pad_value=7.5, extra_pad=1, gamma=1.0)
# Samples but no action token in the batch (empty_batch), for the group estimators that do
# not meet it by generation within the ci budget.
_NO_ACTION_TOKEN = _case([_s("s0", "g0", [0, 0], [0.0, 0.0]), _s("s1", "g0", [], [])],
                         pad_value=_NAN, extra_pad=1, norm_by_std=True, f_norm=1.0)
# fmt: on


def _with_params(cases: Sequence[dict[str, Any]], *names: str) -> tuple[dict[str, Any], ...]:
    """The same pinned cases with only the parameters an estimator reads."""
    return tuple({**c, "params": {n: c["params"][n] for n in names}} for c in cases)


_register(
    "adv.gae",
    title="GAE skips non-action tokens, bootstraps truncated samples, whitens over the batch",
    statement="""delta_t = r_t + gamma V_{t+1} - V_t; A_t = delta_t + gamma lambda A_{t+1}; positions
    with mask 0 are skipped (next value and running advantage carried through); r are the
    credited rewards (a reward on a mask-0 token counts on the preceding action token); the value
    after the last token is 0 when terminated, the bootstrap value when truncated (profile
    truncated_bootstrap, default true: false means the framework treats a length-truncated
    response as terminated); returns = A + V before whitening; advantages whitened over all
    action tokens of the batch (masked mean, unbiased masked variance, rsqrt(var + 1e-8)).
    Profile: whiten_degenerate (<= 1 action token: zeros, or raise), discount_at_holes.""",
    strategy=advantage_case(fields=("values",), params=("gamma", "lam", "bootstrap")),
    examples=_GAE_EXAMPLES,
    meets=(*ESTIMATOR_FEATURES, "truncated_sample"),
)

_register(
    "adv.grpo",
    title="GRPO: group-normalised score broadcast to action tokens",
    statement="""score_i = sum of the sample's token rewards over its response, mask holes
    included; per group mean and std (profile
    grpo_std_ddof, verl 1); A_i = (score_i - mean) / (std + eps) (grpo_eps 1e-6), or score_i - mean
    when norm_by_std is off (Dr. GRPO); a group of one: profile grpo_singleton (verl: mean 0,
    std 1); broadcast to action tokens; returns not checked (a framework convention).""",
    strategy=advantage_case(params=("norm_by_std",)),
    examples=_with_params(_GROUP_EXAMPLES, "norm_by_std"),
)

_register(
    "adv.rloo",
    title="RLOO: leave-one-out group baseline",
    statement="""A_i = score_i - mean of the other samples of the group = n/(n-1) (score_i - mean);
    a group of one: profile rloo_singleton (verl: A = score); broadcast to action tokens;
    returns not checked (a framework convention).""",
    strategy=advantage_case(),
    examples=_with_params((*_GROUP_EXAMPLES, _UNEQUAL_GROUPS)),
)

_register(
    "adv.reinforce_pp",
    title="REINFORCE++: discounted return over action tokens, batch-whitened",
    statement="""G_t = r_t + gamma G_{t+1} over action tokens of the credited rewards (a reward on
    a mask-0 token counts on the preceding action token), carried through mask-0 tokens (a tool
    observation is not the end of the episode, nor a discount step unless discount_at_holes;
    the return is written at action tokens only); returns = G; advantages = G whitened over all
    action tokens of the batch. Not group-local. Profile: whiten_degenerate.""",
    strategy=advantage_case(params=("gamma",)),
    examples=_RFPP_EXAMPLES,
)

_register(
    "adv.reinforce_pp_baseline",
    title="REINFORCE++ with baseline: group-centred score, batch-whitened",
    statement="""score_i - group mean (a group of one: profile singleton_baseline, verl 0),
    broadcast to action tokens, then whitened over all action tokens of the batch (token-
    weighted statistics); returns not checked (a framework convention). Not group-local. Profile: whiten_degenerate.""",
    strategy=advantage_case(),
    examples=_with_params((*_GROUP_EXAMPLES, _RFPP_EXAMPLES[2], _UNEQUAL_GROUPS)),
)

_register(
    "adv.remax",
    title="ReMax: reverse cumulative reward minus the greedy baseline",
    statement="""returns_t = sum of the credited rewards at action tokens >= t (a reward on a
    mask-0 token counts on the preceding action token); A_t = returns_t - b_i, b_i the reward
    of the greedy baseline response; per sample, so group-local.""",
    strategy=advantage_case(fields=("baseline",)),
    examples=_REMAX_EXAMPLES,
)

_register(
    "adv.opo",
    title="OPO: length-weighted group baseline",
    statement="""b = sum_j L_j score_j / sum_j L_j over the group, L_j = the number of action tokens
    of sample j; A_i = score_i - b; a group of one: profile singleton_baseline (verl: b = 0); a
    group without action tokens writes nothing; broadcast; returns not checked (a framework convention).""",
    strategy=advantage_case(),
    examples=(*_with_params((*_GROUP_EXAMPLES, _UNEQUAL_GROUPS)), *_OPO_EXAMPLES),
)

_register(
    "adv.grpo_passk",
    title="Pass@k GRPO: only each group's best sample gets an advantage",
    statement="""Per group (>= 2 samples, else an error): the first sample with the maximal score
    gets s_max - s_second, divided by (std + eps) when norm_by_std (std with grpo_std_ddof); every
    other sample 0, so ties at the top give 0; broadcast; returns not checked (a framework convention).""",
    strategy=advantage_case(params=("norm_by_std",), min_group_size=2, dense=False),
    examples=_PASSK_EXAMPLES,
)

_register(
    "adv.gpg",
    title="GPG: group-centred score scaled by alpha / f_norm",
    statement="""A_i = alpha (score_i - group mean) / f_norm; alpha = B / max(B_valid, 1), B the
    number of samples, B_valid by profile gpg_alpha ("informative": samples of groups with at
    least two distinct scores, GPG paper; "nonzero_score": samples with a nonzero score, verl;
    "one"); a group of one: profile singleton_baseline; broadcast; returns not checked (a framework convention).
    Not group-local (alpha is a batch statistic).""",
    strategy=advantage_case(params=("f_norm",), dense=False),
    examples=_with_params((*_GROUP_EXAMPLES, _NO_ACTION_TOKEN), "f_norm"),
)

_register(
    "adv.optimal_token_baseline",
    title="Optimal token baseline: per-position, variance-weighted group baseline",
    statement="""returns G_t = sum of credited rewards at action tokens >= t; w_t = (1 - 2 pi_t +
    sum_pi_squared_t) (times is_weight_t^2), pi_t = exp(old_logprob_t); W_t = cumulative w over
    action tokens; at column t of a group, B = sum_i G W / (sum_i W + 1e-8) over the samples with
    an action token there, and B = 0 where fewer than two have one (groups of one: B = 0);
    A = G - B on action tokens.""",
    strategy=advantage_case(fields=("logprobs",), params=("is_weights",)),
    examples=_OTB_EXAMPLES,
    meets=ESTIMATOR_FEATURES,
)

_register(
    "adv.gdpo",
    title="GDPO: per-component GRPO, weighted sum, batch-whitened",
    statement="""Each reward component k (a per-sample scalar) is group-normalised as in adv.grpo
    (grpo_std_ddof, grpo_eps, grpo_singleton, norm_by_std); the components are summed with
    their weights, broadcast to action tokens and whitened over all action tokens of the batch;
    returns not checked (a framework convention). Not group-local. Profile: whiten_degenerate.""",
    strategy=advantage_case(fields=("components",), params=("norm_by_std",)),
    examples=_GDPO_EXAMPLES,
)


# ---------------------------------------------------------------------------------------
# adv.invariants: metamorphic checks for every estimator the target implements.

_ALL_FIELDS = ("values", "baseline", "logprobs", "components")
_ALL_PARAMS = ("gamma", "lam", "bootstrap", "norm_by_std", "f_norm", "is_weights")


@st.composite
def _invariants_case(draw: Any) -> dict[str, Any]:
    case = draw(
        advantage_case(
            fields=_ALL_FIELDS, params=_ALL_PARAMS, min_group_size=2, dense=False, max_samples=5
        )
    )
    n_components = len(case["params"]["weights"])
    extra = [
        draw(_sample(f"x{i}", "gx", draw(cs.finite(-2.0, 2.0)), False, _ALL_FIELDS, n_components))
        for i in range(2)
    ]
    case["permutation"] = list(draw(st.permutations(range(len(case["samples"])))))
    case["extra_group"] = extra
    return case


def _full_sample(uid: str, group: str, mask: list[int], rewards: list[float]) -> dict[str, Any]:
    """A pinned sample carrying every field any estimator reads (holes hold garbage)."""
    n = len(mask)
    return _s(
        uid,
        group,
        mask,
        rewards,
        values=[0.5 - 0.25 * t if m else 1000.0 for t, m in enumerate(mask)],
        terminated=uid.endswith(("0", "2")),
        bootstrap=1.5,
        baseline=0.25,
        old_logprobs=[-0.7 if m else 1000.0 for m in mask],
        sum_pi_squared=[0.4 if m else 2.5 for m in mask],
        is_weights=[2.0 if m else -4.0 for m in mask],
        components=[rewards[-1] if n else 0.0, float(n)],
    )


_INVARIANT_EXAMPLES = (
    # Tool observations inside responses, NaN padding, two interleaved groups, a truncated
    # sample, L_i = 0; reversed order; another group of two to add.
    {
        "samples": [
            _full_sample("s0", "g0", [1, 0, 0, 1], [0.0, 2.5, 1000.0, 1.0]),
            _full_sample("s1", "g1", [1, 1, 0], [0.0, 0.5, -4.0]),
            _full_sample("s2", "g0", [1, 1], [0.0, 0.0]),
            _full_sample("s3", "g1", [], []),
        ],
        "pad_value": _NAN,
        "extra_pad": 1,
        "params": {
            "gamma": 0.9,
            "lam": 0.95,
            "bootstrap": True,
            "norm_by_std": True,
            "f_norm": 1.0,
            "is_weights": True,
            "weights": [1.0, 0.5],
        },
        "permutation": [3, 2, 1, 0],
        "extra_group": [
            _full_sample("x0", "gx", [1, 1, 1, 1, 1, 1], [0, 0, 0, 0, 0, 2.0]),
            _full_sample("x1", "gx", [0, 1], [7.5, -1.0]),
        ],
    },
    # edge: every response empty (a batch of aborted samples), one padding column: each
    # estimator's statistics see no token at all (a 0 / 0 must not reach the padding)
    {
        "samples": [
            _full_sample("s0", "g0", [], []),
            _full_sample("s1", "g0", [], []),
            _full_sample("s2", "g1", [], []),
            _full_sample("s3", "g1", [], []),
        ],
        "pad_value": 0.0,
        "extra_pad": 1,
        "params": {
            "gamma": 1.0,
            "lam": 1.0,
            "bootstrap": False,
            "norm_by_std": False,
            "f_norm": 1.0,
            "is_weights": False,
            "weights": [1.0],
        },
        "permutation": [0, 1, 2, 3],
        "extra_group": [
            _full_sample("x0", "gx", [], []),
            _full_sample("x1", "gx", [], []),
        ],
    },
)


def _implemented(target: Any) -> list[Estimator]:
    return [spec for spec in ESTIMATORS.values() if target.implements(spec.op)]


def _applies(target: Any) -> str | None:
    if _implemented(target):
        return None
    return "not implemented by target: no advantage_* operation"


def _assert_zero_off_actions(
    spec: Estimator, what: str, tensor: Any, masks: list[list[int]], uids: list[Any]
) -> None:
    """Outputs on action tokens only: every mask-0 position (hole or padding) is exactly 0."""
    for i, row in enumerate(to_float_list(tensor)):
        mask = masks[i]
        for t, value in enumerate(row):
            if (t < len(mask) and mask[t]) or value == 0:
                continue
            where = "padding" if t >= len(mask) else "a mask-0 token (tool observation)"
            raise ClauseMismatch(
                f"[adv.invariants] {spec.op} {what}: nonzero output at {where}, sample uid={uids[i]!r}, "
                f"column {t} (L_i={len(mask)}): actual {value!r}",
                detail={
                    "what": f"{spec.op} {what}",
                    "uid": uids[i],
                    "token": t,
                    "expected": 0.0,
                    "actual": value,
                },
            )


_INVARIANTS = ("zero_off_actions", "padding_invariance", "permutation", "group_locality")


def _invariant_check(spec: Estimator, invariant: str) -> str:
    """The check name of one invariant of one estimator, e.g. ``gae_zero_off_actions``."""
    return f"{spec.clause.split('.', 1)[1]}_{invariant}"


def _doubled(tolerance: Tolerance) -> Tolerance:
    return dataclasses.replace(tolerance, rtol=2 * tolerance.rtol, atol=2 * tolerance.atol)


def _own_output(case: dict[str, Any], base: Any, expected: Expected) -> Expected:
    """The target's own output on ``case``: the reference for a transformed run, allowed
    twice the oracle tolerance (each run may be off by one tolerance)."""
    lengths = cs.lengths_of(case)
    return Expected(
        unpad_right(base[0], lengths),
        unpad_right(base[1], lengths),
        [[2 * v for v in row] for row in expected.advantage_scale],
        [[2 * v for v in row] for row in expected.return_scale],
    )


def _permuted(case: dict[str, Any], order: list[int]) -> dict[str, Any]:
    return {**case, "samples": [case["samples"][j] for j in order]}


def _invariants_one(spec: Estimator, ctx: Any, case: dict[str, Any]) -> None:
    try:
        expected = spec.expect(ctx, case)
    except ContractError:
        return
    width = cs.width_of_case(case)
    n = len(case["samples"])
    checked = dataclasses.replace(spec, clause="adv.invariants")
    try:
        result = spec.call(ctx, case, width)
    except TargetError:
        return
    base = _outputs(checked, result, n, width)
    masks, uids = _masks(case), cs.uids_of(case)
    outputs = [("advantages", base[0])] + ([("returns", base[1])] if spec.returns_defined else [])
    for what, tensor in outputs:
        with ctx.check(_invariant_check(spec, "zero_off_actions")):
            _assert_zero_off_actions(spec, what, tensor, masks, uids)
    reference = _own_output(case, base, expected)
    tolerance = _doubled(ctx.tolerance)

    padded = spec.call(ctx, case, width + 3)
    padded = _outputs(checked, padded, n, width + 3)
    _compare(
        ctx,
        checked,
        case,
        reference,
        *padded,
        tolerance,
        label=" with 3 more padding columns",
        check=_invariant_check(spec, "padding_invariance"),
    )

    order = case["permutation"]
    permuted_case = _permuted(case, order)
    permuted = _outputs(checked, spec.call(ctx, permuted_case, width), n, width)
    permuted_reference = Expected(
        [reference.advantages[j] for j in order],
        [reference.returns[j] for j in order],
        [reference.advantage_scale[j] for j in order],
        [reference.return_scale[j] for j in order],
    )
    _compare(
        ctx,
        checked,
        permuted_case,
        permuted_reference,
        *permuted,
        tolerance,
        label=" after permuting samples",
        check=_invariant_check(spec, "permutation"),
    )

    if not spec.group_local:
        return
    extended_case = {**case, "samples": [*case["extra_group"], *case["samples"]]}
    extra = len(case["extra_group"])
    extended_width = max(width, cs.width_of_case(extended_case))
    extended = _outputs(
        checked, spec.call(ctx, extended_case, extended_width), n + extra, extended_width
    )
    _compare(
        ctx,
        checked,
        case,
        reference,
        extended[0][extra:],
        extended[1][extra:],
        tolerance,
        label=" after adding another group",
        check=_invariant_check(spec, "group_locality"),
    )


_INVARIANT_FEATURES = tuple(
    f
    for f in (*ESTIMATOR_FEATURES, "truncated_sample", "extra_padding")
    if f not in ("singleton_group", "no_samples")
)


def _invariant_features(case: dict[str, Any]) -> set[str]:
    """The padding-invariance check always pads three more columns with the case's
    pad_value, and the group-locality check runs the batch with ``extra_group`` prepended:
    both are part of every case (the walker sees only the case's own batch)."""
    from rlconform.conformance.features import generic_features, pad_value_features

    extended = {**case, "samples": [*case.get("extra_group", ()), *case["samples"]]}
    extended.pop("extra_group", None)
    grouping = generic_features(extended) & {"unequal_groups", "singleton_group", "equal_scores"}
    padding = set(pad_value_features(case.get("pad_value", 0.0)))
    return {"extra_padding"} | padding | grouping


@clause(
    "adv.invariants",
    title="Every estimator: permutation equivariant, padding invariant, action tokens only",
    statement="""For every advantage_* operation the target implements: permuting samples permutes
    the outputs; extra right padding changes nothing; outputs are exactly 0 at every mask-0
    position (holes and padding), advantages, and returns where the contract defines them; group-local estimators (GRPO,
    RLOO, OPO, pass@k, optimal token baseline, and per-sample ReMax) are unchanged by adding
    another group. Batch-whitened estimators (GAE, REINFORCE++, REINFORCE++ baseline, GDPO) and
    GPG (alpha is a batch statistic) are not group-local.""",
    ops=(),
    strategy=_invariants_case(),
    examples=_INVARIANT_EXAMPLES,
    applies=_applies,
    checks=(
        "shape",
        *(_invariant_check(spec, inv) for spec in ESTIMATORS.values() for inv in _INVARIANTS),
    ),
    meets=tuple(
        f
        for f in (*ESTIMATOR_FEATURES, "truncated_sample")
        if f not in ("singleton_group", "no_samples")
    ),
)
def check_invariants(ctx: Any, case: dict[str, Any]) -> None:
    failures: list[ClauseMismatch] = []
    for spec in _implemented(ctx.target):
        try:
            _invariants_one(spec, ctx, case)
        except ClauseMismatch as failure:
            failures.append(failure)
    if not failures:
        return
    first = failures[0]
    if len(failures) == 1:
        raise first
    others = "; ".join(f.message.splitlines()[0] for f in failures[1:])
    raise ClauseMismatch(
        f"{first.message}\n  also: {others}", detail=first.detail, check=first.check
    )

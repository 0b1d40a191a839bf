"""Clauses of the CONTRACT area `step`: the training step, end to end.

A case is a rollout mini-batch (ragged samples: loss mask with holes, score, old / ref /
current log-probs, entropies, critic values), the micro-batch size the trainer splits it
by, and the padding it is laid out with. Each case runs under every trainer config the
target declares (``trainer_configs()``; ``certify --trainer-config`` selects some): the
target's ``train_step`` (adapters/step_io.py) runs its trainer's chain and back-propagates;
the harness reads the gradients off the leaf tensors it handed in.

step.update compares stage by stage, each stage against the oracle fed with the target's
own previous stage (the token rewards it produced, the advantages it produced), so the
first check that fails is the **first diverging stage** and honest rounding of an earlier
stage does not spill into a later one. Checks, in chain order: ``token_rewards``,
``advantages``, ``returns``, ``per_token_loss``, ``loss``, ``gradient`` (action tokens),
``gradient_off_actions`` (exactly 0 at every other position: padding and tool tokens),
``entropy_gradient``, ``value_loss``, ``value_gradient``. A stage the target does not
expose is not compared; the later ones then use the oracle's value for it.

Float tolerance: CONTRACT §4 with ``16 eps * scale``; the scales bound the rounding of each
formula at that token (the advantages' come from the adv clauses' own bounds); where a
ratio (or a value) sits within rounding of a clip bound, the gradient there may be either
side's (the oracle's gradient with the bound nudged by 64 eps either way is accepted).
"""

from __future__ import annotations

import contextvars
import copy
import math
import struct
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from hypothesis import strategies as st

from rlconform.adapters.base import Inexpressible, Unsupported
from rlconform.adapters.step_io import StepBatch, StepOutput
from rlconform.conformance import strategies as cs
from rlconform.conformance.clauses.advantage import ESTIMATORS
from rlconform.conformance.clauses.loss import _near
from rlconform.conformance.compare import assert_rows_close, assert_scalar_close
from rlconform.conformance.context import Observer
from rlconform.conformance.errors import ClauseMismatch, TargetError
from rlconform.conformance.features import allows
from rlconform.conformance.harness import pad_right, unpad_right
from rlconform.conformance.registry import clause
from rlconform.conformance.trainer_config import TrainerConfig, declared
from rlconform.oracle import step as oracle
from rlconform.oracle.errors import ContractError

STEP_FEATURES = (
    "mask_holes",
    "hole_reward",
    "padding_finite",
    "unequal_groups",
    "uneven_shards",
    "extra_padding",
    "empty_response",
    "actionless_sample",
    "singleton_group",
    "equal_scores",
    "empty_shard",
    "empty_batch",
    "extreme_log_ratio",
    "padding_nonfinite",
    "overflow",
    "zero_width",
)
UPDATE_CHECKS = (
    "token_rewards",
    "advantages",
    "returns",
    "per_token_loss",
    "loss",
    "gradient",
    "gradient_off_actions",
    "entropy_gradient",
    "value_loss",
    "value_gradient",
)
# The contract operations behind each stage (a finding of one of these ops is judged by it).
_POLICY_OPS = ("ppo_clip_loss", "sapo_loss")
STAGE_OPS: dict[str, tuple[str, ...]] = {
    "token_rewards": ("place_reward_last", "apply_kl_in_reward"),
    "advantages": tuple(f"advantage_{e}" for e in oracle.ESTIMATORS),
    "returns": tuple(f"advantage_{e}" for e in oracle.ESTIMATORS),
    "per_token_loss": (*_POLICY_OPS, "kl_penalty", "actor_loss", "policy_loss_reduced"),
    "loss": ("agg_loss", "agg_batch_info", "actor_loss", "policy_loss_reduced"),
    "gradient": (*_POLICY_OPS, "kl_penalty", "actor_loss", "agg_loss", "policy_loss_reduced"),
    "gradient_off_actions": (
        *_POLICY_OPS,
        "kl_penalty",
        "actor_loss",
        "agg_loss",
        "policy_loss_reduced",
    ),
    "entropy_gradient": ("actor_loss", "agg_loss"),
    "value_loss": ("value_loss", "agg_loss"),
    "value_gradient": ("value_loss", "agg_loss"),
}

# The configs a run certifies (None: every declared one); set by certify --trainer-config.
_SELECTED: contextvars.ContextVar[tuple[str, ...] | None] = contextvars.ContextVar(
    "rlc_trainer_configs", default=None
)


def select_configs(names: Sequence[str] | None) -> contextvars.Token:
    return _SELECTED.set(tuple(names) if names else None)


def reset_configs(token: contextvars.Token) -> None:
    """Undo ``select_configs``."""
    _SELECTED.reset(token)


def active_configs(target: Any) -> list[TrainerConfig]:
    """The target's configs this run certifies."""
    names = _SELECTED.get()
    configs = declared(target)
    return configs if names is None else [c for c in configs if c.name in names]


def _metrics_apply(target: Any) -> str | None:
    if not getattr(target, "step_logs_metrics", True):
        return "the target's step binding reports no logged metrics (step_logs_metrics = False)"
    return _applies(target)


def _state_applies(target: Any) -> str | None:
    reason = _applies(target)
    if reason is None and not any(c.resolved["kl_in_reward"] for c in active_configs(target)):
        return "no trainer config puts KL in the reward: the step carries no state to check"
    return reason


def _applies(target: Any) -> str | None:
    if not callable(getattr(target, "train_step", None)):
        return "not implemented by target (train_step)"
    if not active_configs(target):
        return "the target declares no trainer config (trainer_configs)"
    return None


# --- strategy ---------------------------------------------------------------------------


def _f32(x: float) -> float:
    return struct.unpack("f", struct.pack("f", x))[0]


@st.composite
def step_case(draw: Any) -> dict[str, Any]:
    """A rollout mini-batch with everything a step reads, and its micro-batch split.

    Half the batches are laid out as GRPO-style trainers build them (k prompts with g
    responses each, contiguous, every response at least one token, split into micro-batches
    of one size, half of them without tool tokens: TRL and ROLL's RLVR pipeline can express
    no other), the rest with any grouping, length and split."""
    regular = draw(st.booleans())
    if regular:
        size = draw(st.integers(2, 3))
        labels = [f"g{k}" for k in range(draw(st.integers(1, 2))) for _ in range(size)]
        n, groups = len(labels), labels
    else:
        n = draw(st.integers(cs.fewest_samples(1), 6))
        groups = draw(cs.group_labels(n))
    scores = draw(cs.rewards(n, groups))
    # a regular batch is single-turn half of the time (no tool tokens: RLVR pipelines)
    holes = not regular or draw(st.booleans())
    samples = []
    for i in range(n):
        length = draw(cs.lengths(5, 1 if regular else 0))
        mask = draw(cs.loss_mask(length, holes=holes))
        sample: dict[str, Any] = {
            "uid": f"s{i}",
            "group": groups[i],
            "mask": mask,
            "reward": scores[i],
        }
        rows: dict[str, list[float]] = {
            k: [] for k in ("old", "ref", "logp", "entropy", "values", "vpreds")
        }
        for m in mask:
            if not m:
                for key in rows:
                    rows[key].append(draw(cs.hole_values()))
                continue
            old = draw(cs.finite(-3.0, -0.0625))
            extreme = allows("edge") and draw(st.integers(0, 19)) == 0
            delta = (
                draw(st.sampled_from((-25.0, 22.0))) if extreme else draw(cs.finite(-0.375, 0.375))
            )
            rows["old"].append(old)
            rows["logp"].append(_f32(old + delta))
            rows["ref"].append(_f32(old + draw(cs.finite(-0.5, 0.5))))
            rows["entropy"].append(draw(cs.finite(0.0, 3.0)))
            value = draw(cs.finite(-2.0, 2.0))
            rows["values"].append(value)
            rows["vpreds"].append(_f32(value + draw(cs.finite(-1.0, 1.0))))
        sample.update(rows)
        samples.append(sample)
    if regular:
        size = draw(st.sampled_from([d for d in range(1, n + 1) if n % d == 0 and d <= 3]))
    else:
        size = draw(st.integers(1, 3))
    shards = [min(size, n - start) for start in range(0, n, size)]
    return {
        "samples": samples,
        "shards": shards,
        "pad_value": draw(cs.pad_values()),
        "extra_pad": draw(st.integers(0, 2)),
    }


def _plain(
    n: int, mask: list[int], reward: float, uid: str, group: str, k: float
) -> dict[str, Any]:
    base = [-1.0 - 0.25 * t for t in range(len(mask))]
    return {
        "uid": uid,
        "group": group,
        "mask": mask,
        "reward": reward,
        "old": base,
        "logp": [_f32(b + k * 0.1 * (t + 1)) for t, b in enumerate(base)],
        "ref": [_f32(b - 0.125) for b in base],
        "entropy": [0.5 + 0.25 * t for t in range(len(mask))],
        "values": [0.25 * t for t in range(len(mask))],
        "vpreds": [0.25 * t + 0.375 for t in range(len(mask))],
    }


EXAMPLES = (
    # ordinary: two groups, a tool hole, uneven micro-batches, finite garbage at padding
    {
        "samples": [
            _plain(0, [1, 1, 0, 1], 1.0, "s0", "g0", 1.0),
            _plain(1, [1, 1], 0.0, "s1", "g0", -1.0),
            _plain(2, [1, 1, 1, 1, 1], 0.5, "s2", "g1", 2.0),
            _plain(3, [1], 0.0, "s3", "g1", -3.0),
        ],
        "shards": [3, 1],
        "pad_value": 7.5,
        "extra_pad": 1,
    },
    # edge: a sample without an action token (all its tokens masked), uneven micro-batches
    {
        "samples": [
            _plain(0, [1, 1, 1], 1.0, "s0", "g0", 1.0),
            _plain(1, [0, 0], 0.5, "s1", "g0", -1.0),
            _plain(2, [1, 1], 0.0, "s2", "g0", -2.0),
            _plain(3, [1, 1, 1, 1], 0.25, "s3", "g1", 2.0),
            _plain(4, [1], 0.75, "s4", "g1", -1.0),
        ],
        "shards": [2, 2, 1],
        "pad_value": 0.0,
        "extra_pad": 0,
    },
    # edge: a response that ends in a tool observation, its score on that mask-0 token
    {
        "samples": [
            _plain(0, [1, 1, 0, 0], 1.0, "s0", "g0", 1.0),
            _plain(1, [1, 1, 1], 0.0, "s1", "g0", -1.0),
            _plain(2, [1, 0, 1], 0.5, "s2", "g1", 2.0),
            _plain(3, [1, 1], 0.0, "s3", "g1", -2.0),
        ],
        "shards": [2, 2],
        "pad_value": 0.0,
        "extra_pad": 0,
    },
    # edge: a sample without an action token alone in its micro-batch (an empty shard)
    {
        "samples": [
            _plain(0, [1, 1], 1.0, "s0", "g0", 1.0),
            _plain(1, [0], 0.0, "s1", "g0", -1.0),
        ],
        "shards": [1, 1],
        "pad_value": 0.0,
        "extra_pad": 0,
    },
    # edge: a group of one next to a group of three (singleton_group, unequal_groups)
    {
        "samples": [
            _plain(0, [1, 1], 1.0, "s0", "g0", 1.0),
            _plain(1, [1, 1, 1], 0.0, "s1", "g1", -1.0),
            _plain(2, [1], 0.5, "s2", "g1", 2.0),
            _plain(3, [1, 1], 1.0, "s3", "g1", -2.0),
        ],
        "shards": [2, 2],
        "pad_value": 0.0,
        "extra_pad": 0,
    },
    # hardening: NaN where the model computed values for tool tokens (log-prob, reference
    # log-prob, value prediction)
    {
        "samples": [
            {**_plain(0, [1, 0, 1], 1.0, "s0", "g0", 1.0), "logp": [-0.9, math.nan, -1.3]},
            {**_plain(1, [1, 1], 0.0, "s1", "g0", -1.0)},
            {**_plain(2, [1, 0, 1, 1], 0.5, "s2", "g1", 2.0), "ref": [-1.2, math.nan, -1.6, -1.9]},
            {**_plain(3, [0, 1], 0.0, "s3", "g1", -2.0), "vpreds": [math.nan, 0.5]},
        ],
        "shards": [2, 2],
        "pad_value": 0.0,
        "extra_pad": 0,
    },
    # edge: no action token in the whole mini-batch (every sample's tokens masked), split
    # into two micro-batches; appended last, as the builders refer to examples by position
    {
        "samples": [
            _plain(0, [0, 0], 1.0, "s0", "g0", 1.0),
            _plain(1, [0], 0.0, "s1", "g0", -1.0),
        ],
        "shards": [1, 1],
        "pad_value": 0.0,
        "extra_pad": 0,
    },
)


def _masks(case: dict[str, Any]) -> list[list[int]]:
    return [s["mask"] for s in case["samples"]]


def _micro_batches(case: dict[str, Any]) -> list[list[int]]:
    batches, start = [], 0
    for size in case["shards"]:
        batches.append(list(range(start, start + size)))
        start += size
    return batches


def step_features(case: dict[str, Any]) -> set[str]:
    """The §0a features of one step's batch: the generic ones, and ``hole_reward`` where a
    nonzero score lands on a mask-0 token (a response that ends in a tool observation: the
    score is placed on its last token, L_i - 1)."""
    from rlconform.conformance.features import generic_features

    found = set(generic_features(case))
    for s in case["samples"]:
        if s["mask"] and not s["mask"][-1] and s["reward"] != 0:
            found.add("hole_reward")
    return found & set(STEP_FEATURES)


# --- harness: case -> StepBatch, StepOutput -> rows ------------------------------------


def _padded(
    ctx: Any, case: dict[str, Any], key: str, width: int, leaf: bool = False
) -> torch.Tensor:
    rows = [s[key] for s in case["samples"]]
    tensor = pad_right(
        rows, width=width, fill=case["pad_value"], dtype=ctx.dtype, device=ctx.device
    )
    return tensor.requires_grad_(True) if leaf else tensor


def build_batch(ctx: Any, case: dict[str, Any], critic: bool) -> StepBatch:
    """The case laid out as the trainer receives it (fresh leaves on every call)."""
    width = cs.width_of_case(case)
    samples = case["samples"]
    lengths = [len(s["mask"]) for s in samples]
    loss_mask = pad_right(_masks(case), width=width, fill=0, dtype=ctx.dtype, device=ctx.device)
    response = pad_right(
        [[1] * n for n in lengths], width=width, fill=0, dtype=ctx.dtype, device=ctx.device
    )
    return StepBatch(
        uids=[s["uid"] for s in samples],
        index=[s["group"] for s in samples],
        response_mask=response,
        loss_mask=loss_mask,
        scores=torch.tensor([s["reward"] for s in samples], dtype=ctx.dtype, device=ctx.device),
        old_log_probs=_padded(ctx, case, "old", width),
        ref_log_probs=_padded(ctx, case, "ref", width),
        log_probs=_padded(ctx, case, "logp", width, leaf=True),
        entropy=_padded(ctx, case, "entropy", width, leaf=True),
        micro_batches=_micro_batches(case),
        values=_padded(ctx, case, "values", width) if critic else None,
        vpreds=_padded(ctx, case, "vpreds", width, leaf=True) if critic else None,
    )


def _grad(tensor: torch.Tensor | None) -> torch.Tensor | None:
    if tensor is None:
        return None
    return (
        tensor.grad.detach().clone()
        if tensor.grad is not None
        else torch.zeros_like(tensor.detach())
    )


class RefusedByProfile(Exception):
    """The target's step raised on a case its profile's legitimate choices refuse (the
    oracle's chain raises under them too, e.g. ``whiten_degenerate = "raise"`` on a
    mini-batch with one action token): conformant, nothing to compare."""


def _refused(ctx: Any, case: dict[str, Any], config: TrainerConfig) -> bool:
    cfg, profile = config.resolved, ctx.profile.choices()
    try:
        rewards = oracle.token_rewards(case["samples"], cfg, profile, cfg["kl_coef"])
        oracle.advantages(rewards, case["samples"], cfg, profile)
    except ContractError:
        return True
    return False


def run_step(
    ctx: Any, case: dict[str, Any], config: TrainerConfig, state: Any = None
) -> tuple[StepOutput, dict[str, Any]]:
    """Call the target's step on a fresh batch; (its output, the leaves' gradients)."""
    critic = config.resolved["critic"]
    grads: dict[str, Any] = {}

    def build() -> tuple[tuple, dict]:
        batch = build_batch(ctx, case, critic)
        # each call starts from its own copy of the carried state: a trainer's controller
        # updates itself in place, and the determinism check calls the step twice
        carried = copy.deepcopy(state) if state is not None else None
        return (batch, config), ({"state": carried} if carried is not None else {})

    def read(output: Any, args: tuple, kwargs: dict) -> Any:
        batch = args[0]
        grads.update(
            logp=_grad(batch.log_probs), entropy=_grad(batch.entropy), vpreds=_grad(batch.vpreds)
        )
        return output, {k: v for k, v in grads.items() if v is not None}

    try:
        output, read_grads = ctx.call_built("train_step", build, read)
    except TargetError:
        if _refused(ctx, case, config):
            raise RefusedByProfile() from None
        raise
    if not isinstance(output, StepOutput):
        raise ClauseMismatch(
            f"[{ctx.clause_id}] train_step must return a StepOutput, got {type(output).__name__}",
            detail={"what": "return value"},
            check="runs",
        )
    return output, read_grads


# --- the oracle's side ------------------------------------------------------------------


def _rows_of(output: StepOutput, stage: str, case: dict[str, Any]) -> list[list[float]] | None:
    tensor = output.stages.get(stage)
    if tensor is None:
        return None
    return unpad_right(tensor.detach(), [len(m) for m in _masks(case)])


def _on_actions(rows: list[list[float]], masks: list[list[int]]) -> list[list[float]]:
    return [[x for x, m in zip(row, mask) if m] for row, mask in zip(rows, masks)]


def _adv_case(
    case: dict[str, Any], rewards: list[list[float]], cfg: dict[str, Any]
) -> dict[str, Any]:
    return {
        "samples": [
            {
                "uid": s["uid"],
                "group": s["group"],
                "mask": s["mask"],
                "rewards": [float(r) for r in row],
                "values": s["values"],
                "terminated": True,
                "bootstrap": 0.0,
            }
            for s, row in zip(case["samples"], rewards)
        ],
        "params": {
            "gamma": cfg["gamma"],
            "lam": cfg["lam"],
            "norm_by_std": cfg["norm_adv_by_std"],
            "bootstrap": False,
        },
    }


def _token_scale(s: dict[str, Any], adv: list[float], cfg: dict[str, Any]) -> list[float]:
    """Rounding conditioning of one token's actor loss (and of its gradient / weight)."""
    sapo = cfg["policy_loss"] == "sapo"
    out = []
    for t, m in enumerate(s["mask"]):
        if not m:
            out.append(0.0)
            continue
        x = max(-20.0, min(20.0, s["logp"][t] - s["old"][t]))
        d = abs(s["ref"][t] - s["logp"][t])
        kl_scale = math.exp(min(d, 20.0)) * (1 + d) + d + 1 if cfg["kl_loss"] else 0.0
        # loss.sapo's gate is at most 4 / tau (its gradient at most |A| r, as the clip's)
        gate = 4.0 / min(cfg["sapo_tau_pos"], cfg["sapo_tau_neg"]) if sapo else 0.0
        out.append(
            abs(adv[t]) * (math.exp(x) * (1 + abs(x)) + 1 + gate)
            + cfg["entropy_coeff"] * abs(s["entropy"][t])
            + cfg["kl_loss_coef"] * kl_scale
        )
    return out


def _nudged(cfg: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The config with its clip bounds moved by 64 eps(float32) either way (and as given)."""
    yield cfg
    for sign in (-1.0, 1.0):
        step = sign * 64 * 2.0**-23
        nudged = dict(cfg)
        nudged["clip_low"] = cfg["clip_low"] - step
        nudged["clip_high"] = cfg["clip_high"] + step
        if cfg["clip_ratio_c"] is not None:
            nudged["clip_ratio_c"] = cfg["clip_ratio_c"] + step
        if cfg["cliprange_value"] is not None:
            nudged["cliprange_value"] = cfg["cliprange_value"] + step
        yield nudged


def _closest(candidates: list[list[list[float]]], actual: list[list[float]]) -> list[list[float]]:
    """Per token, the candidate expectation nearest to the actual value."""
    best = [list(row) for row in candidates[0]]
    for i, row in enumerate(best):
        for t in range(len(row)):
            a = actual[i][t]
            options = [c[i][t] for c in candidates]
            if len(set(options)) > 1 and min(options) <= a <= max(options):
                best[i][t] = a  # at a clip bound: any subgradient between the sides is right
                continue
            best[i][t] = min(options, key=lambda e: abs(e - a) if math.isfinite(a) else 0.0)
    return best


# --- checks -----------------------------------------------------------------------------


def _fail_for(ctx: Any, config: TrainerConfig) -> Any:
    """Check under ``config``: a failure names the config it happened under, and one the
    baseline declares for it (a crash included) is recorded there and the case goes on to
    the next config, so a declared break under one config cannot hide a new one under
    another; a case the profile refuses is done with under that config."""

    class _Named:
        def __enter__(self) -> None:
            ctx.trainer_config = config.name

        def __exit__(self, kind: Any, exc: Any, tb: Any) -> bool:
            try:
                if isinstance(exc, RefusedByProfile):
                    return True  # both the contract (under the profile) and the target refuse
                if isinstance(exc, ClauseMismatch) and not getattr(exc, "_config_named", False):
                    exc.message = f"under trainer config {config.name!r}: {exc.message}"
                    exc.args = (exc.message,) + exc.args[1:]
                    if isinstance(exc.detail, dict):
                        exc.detail.setdefault("config", config.name)
                    exc._config_named = True
                if isinstance(exc, TargetError) and getattr(exc, "detail", None) is None:
                    # a crash names its config too: a baseline entry scoped to the config
                    # it happens under covers it (and one scoped elsewhere does not)
                    exc.detail = {"config": config.name}
                if isinstance(exc, ClauseMismatch | TargetError) and not _inexpressible(exc):
                    return bool(ctx.observer.tolerate(exc))
                return False
            finally:
                ctx.trainer_config = None

    return _Named()


def _inexpressible(exc: BaseException) -> bool:
    """The target cannot express the case (``Inexpressible``) or does not compute what is
    checked (``Unsupported``), raised directly or wrapped by the context."""
    kinds = Inexpressible | Unsupported
    return isinstance(exc, kinds) or isinstance(getattr(exc, "original", None), kinds)


def under_each_config(ctx: Any, case: dict[str, Any], check: Any) -> None:
    """``check(ctx, case, config)`` under every config this run certifies (``_fail_for``
    each). A config under which the target cannot express the case is done with for this
    case and the others still run, so a target that refuses a case under one config (its
    estimator cannot take unequal groups) still has it checked under the rest; the case is
    a skip only when every config refuses it."""
    refused: BaseException | None = None
    ran = False
    for config in active_configs(ctx.target):
        try:
            with _fail_for(ctx, config):
                check(ctx, case, config)
        except Exception as exc:
            if not _inexpressible(exc):
                raise
            refused = exc
            continue
        ran = True
    if not ran and refused is not None:
        raise refused


def case_under(case: dict[str, Any], config: TrainerConfig) -> dict[str, Any]:
    """The case as the config's step sees it (``oracle.step.as_run``: an on-policy trainer
    keeps no old log-probs, they are the current ones); the target gets the same batch."""
    cfg = config.resolved
    if not cfg["on_policy"]:
        return case
    if "steps" in case:
        return {**case, "steps": [case_under(step, config) for step in case["steps"]]}
    return {**case, "samples": oracle.as_run(case["samples"], cfg)}


def check_update_under(ctx: Any, case: dict[str, Any], config: TrainerConfig) -> None:
    """step.update for one config: stage by stage, then the gradients."""
    case = case_under(case, config)
    cfg = config.resolved
    profile = ctx.profile.choices()
    samples, masks = case["samples"], _masks(case)
    uids = [s["uid"] for s in samples]
    tol = ctx.tolerance
    output, grads = run_step(ctx, case, config)
    clause_id = "step.update"

    rewards = oracle.token_rewards(samples, cfg, profile, cfg["kl_coef"])
    got = _rows_of(output, "token_rewards", case)
    if got is not None:
        scale = [
            [
                abs(r) + (cfg["kl_coef"] * (abs(o) + abs(f) + 1) * 4 if m else 0.0)
                for r, o, f, m in zip(row, s["old"], s["ref"], s["mask"])
            ]
            for row, s in zip(rewards, samples)
        ]
        with ctx.check("token_rewards"):
            assert_rows_close(
                clause_id,
                "token rewards (response tokens)",
                rewards,
                got,
                uids=uids,
                tolerance=tol,
                scale=scale,
            )
        rewards = got
    spec = ESTIMATORS[f"adv.{cfg['estimator']}"]
    try:
        expected = spec.expect(ctx, _adv_case(case, rewards, cfg))
    except ContractError as refusal:
        # the contract refuses the batch under the target's own profile (its whitening
        # raises on it); the trainer's step went on: its advantages are not the contract's
        with ctx.check("advantages"):
            raise ClauseMismatch(
                f"[{clause_id}] the contract refuses this batch under the target's profile "
                f"({refusal}), but the trainer's step ran and produced advantages",
                detail={"what": "advantages"},
                check="advantages",
            ) from None
        return  # declared: nothing later in the chain has a contract value to compare
    want_adv, adv_scale = expected.advantages, expected.advantage_scale
    if not cfg["whiten_advantages"]:  # the config leaves the advantages unwhitened
        want_adv = oracle.unwhitened(cfg["estimator"], expected.returns, samples)
        adv_scale = [
            [r + (abs(v) if cfg["estimator"] == "gae" else 0.0) for r, v in zip(rs, s["values"])]
            for rs, s in zip(expected.return_scale, samples)
        ]
    advantages, returns = want_adv, expected.returns
    for stage, want, scale in (
        ("advantages", want_adv, adv_scale),
        ("returns", expected.returns, expected.return_scale),
    ):
        got = _rows_of(output, stage, case)
        if got is None:
            continue
        with ctx.check(stage):
            assert_rows_close(
                clause_id,
                f"{stage} (action tokens)",
                _on_actions(want, masks),
                _on_actions(got, masks),
                uids=uids,
                tolerance=tol,
                scale=_on_actions(scale, masks),
                k=spec.k,
            )
        if stage == "advantages":
            advantages = got
        else:
            returns = got
    candidates = [oracle.policy_terms(samples, advantages, c, profile) for c in _nudged(cfg)]
    actor = candidates[0]
    token_scales = [_token_scale(s, a, cfg) for s, a in zip(samples, advantages)]
    got = _rows_of(output, "per_token_loss", case)
    per_token = actor["per_token_loss"]
    if got is not None:
        with ctx.check("per_token_loss"):
            assert_rows_close(
                clause_id,
                "per-token loss (action tokens)",
                _on_actions(per_token, masks),
                _on_actions(got, masks),
                uids=uids,
                tolerance=tol,
                scale=_on_actions(token_scales, masks),
            )
    n_tokens = sum(sum(m) for m in masks)
    loss_scale = math.fsum(
        w * (sc + abs(loss) * (n_tokens + 1))
        for wr, sr, lr in zip(actor["weights"], token_scales, per_token)
        for w, sc, loss in zip(wr, sr, lr)
    )
    _loss_then_gradients(
        ctx,
        "loss",
        lambda: assert_scalar_close(
            clause_id,
            "back-propagated loss",
            actor["loss"],
            _scalar(output.loss),
            tolerance=tol,
            scale=loss_scale,
        ),
        lambda: _check_actor_gradients(ctx, case, candidates, grads, actor, token_scales),
        grads,
    )
    if cfg["critic"] and not _at_value_clip_edge(samples, cfg):
        _check_critic(ctx, case, cfg, returns, output, grads, actor["weights"], n_tokens)


GRADIENT_AGREES = " (its gradient is the contract's: only the loss value differs)"


def _loss_then_gradients(
    ctx: Any,
    loss_check: str,
    compare_loss: Any,
    compare_gradients: Any,
    grads: dict[str, Any] | None = None,
) -> None:
    """Compare a back-propagated loss, then its gradients. The loss is the earlier stage,
    so its failure is the one raised; where every gradient check passes the failure is
    marked ``gradient_agrees`` (CONTRACT §0b: the optimizer applies the contract's update,
    only the loss value a trainer logs differs; consequence ``metric``). A NaN or inf loss
    is marked ``nonfinite_loss``, and ``gradient_finite`` when every gradient in ``grads``
    is finite (consequence.loss_value_only)."""
    try:
        with ctx.check(loss_check):
            compare_loss()
    except ClauseMismatch as failure:
        expected, actual = failure.detail.get("expected"), failure.detail.get("actual")
        failure.nonfinite_loss = (
            isinstance(expected, (int, float))
            and isinstance(actual, (int, float))
            and math.isfinite(expected)
            and not math.isfinite(actual)
        )
        failure.gradient_finite = all(
            bool(torch.isfinite(g).all()) for g in (grads or {}).values() if g is not None
        )
        declared, ctx.observer = ctx.observer, Observer()  # a declared gradient break counts
        try:
            compare_gradients()
        except ClauseMismatch:
            raise failure from None
        finally:
            ctx.observer = declared
        failure.gradient_agrees = True
        failure.message += GRADIENT_AGREES
        failure.args = (failure.message,)
        raise failure from None
    compare_gradients()


def _check_actor_gradients(
    ctx: Any,
    case: dict[str, Any],
    candidates: list[dict[str, Any]],
    grads: dict[str, Any],
    actor: dict[str, Any],
    token_scales: list[list[float]],
) -> None:
    for check, what, key, grad in (
        ("gradient", "log-probs", "grad_logp", grads["logp"]),
        ("entropy_gradient", "entropies", "grad_entropy", grads["entropy"]),
    ):
        _check_gradient(
            ctx,
            case,
            check,
            what,
            [c[key] for c in candidates],
            grad,
            actor["weights"],
            token_scales,
        )


def _check_critic(
    ctx: Any,
    case: dict[str, Any],
    cfg: dict[str, Any],
    returns: list[list[float]],
    output: StepOutput,
    grads: dict[str, Any],
    weights: list[list[float]],
    n_tokens: int,
) -> None:
    """The value loss and its gradient with respect to the critic's current values."""
    samples = case["samples"]
    critic = [oracle.value_terms(samples, returns, c) for c in _nudged(cfg)]
    weights = critic[0]["value_weights"]  # the critic's own aggregation (critic_loss_agg_mode)
    v_scale = [
        [
            (abs(v) + abs(r) + abs(o) + 1) ** 2 if m else 0.0
            for v, r, o, m in zip(s["vpreds"], ret, s["values"], s["mask"])
        ]
        for s, ret in zip(samples, returns)
    ]
    _loss_then_gradients(
        ctx,
        "value_loss",
        lambda: assert_scalar_close(
            "step.update",
            "back-propagated value loss",
            critic[0]["value_loss"],
            _scalar(output.value_loss),
            tolerance=ctx.tolerance,
            scale=math.fsum(w * s for wr, sr in zip(weights, v_scale) for w, s in zip(wr, sr))
            * (n_tokens + 1),
        ),
        lambda: _check_gradient(
            ctx,
            case,
            "value_gradient",
            "values",
            [c["grad_vpreds"] for c in critic],
            grads.get("vpreds"),
            weights,
            v_scale,
            off_check="value_gradient",
        ),
        grads,
    )


def _at_value_clip_edge(samples: list[dict[str, Any]], cfg: dict[str, Any]) -> bool:
    """An action token exactly at |v - v_old| = cliprange_value: the value loss is smooth
    there, but autograd's tie rules (torch.maximum / minimum split the gradient between
    equal inputs) make the framework's derivative at that single point a convention (verl:
    3/4 of it). The critic terms are not compared on such a case (the actor's are)."""
    clip = cfg.get("cliprange_value")
    if clip is None:
        return False
    return any(
        m and _near(abs(v - o), clip)
        for s in samples
        for v, o, m in zip(s["vpreds"], s["values"], s["mask"])
    )


def _scalar(value: Any) -> float:
    if isinstance(value, torch.Tensor):
        return float(value.detach().to(torch.float64))
    return float(value) if value is not None else math.nan


def _check_gradient(
    ctx: Any,
    case: dict[str, Any],
    check: str,
    what: str,
    candidates: list[list[list[float]]],
    grad: torch.Tensor | None,
    weights: list[list[float]],
    scales: list[list[float]],
    off_check: str = "gradient_off_actions",
) -> None:
    masks = _masks(case)
    uids = [s["uid"] for s in case["samples"]]
    n = len(masks)
    width = cs.width_of_case(case)
    actual_full = (
        grad.detach().to(torch.float64).tolist()
        if grad is not None
        else [[0.0] * width for _ in range(n)]
    )
    with ctx.check(off_check):
        for i, row in enumerate(actual_full):
            for t, g in enumerate(row):
                action = t < len(masks[i]) and masks[i][t] == 1
                if not action and g != 0.0:
                    where = "padding" if t >= len(masks[i]) else "a tool (mask-0) token"
                    raise ClauseMismatch(
                        f"[step.update] gradient w.r.t. the {what} is {g!r} at {where}: sample "
                        f"uid={uids[i]!r}, token {t} (it must be exactly 0 off action tokens: the "
                        "model would be trained on tokens it did not choose)",
                        detail={
                            "what": f"gradient ({what}) off actions",
                            "uid": uids[i],
                            "token": t,
                            "expected": 0.0,
                            "actual": g,
                        },
                        check=off_check,
                    )
    actual = [row[: len(m)] for row, m in zip(actual_full, masks)]
    expected = _closest(candidates, actual)
    scale = [
        [w * s * 4 + abs(e) * 4 for w, s, e in zip(wr, sr, er)]
        for wr, sr, er in zip(weights, scales, expected)
    ]
    with ctx.check(check):
        assert_rows_close(
            "step.update",
            f"gradient w.r.t. the {what} (action tokens)",
            _on_actions(expected, masks),
            _on_actions(actual, masks),
            uids=uids,
            tolerance=ctx.tolerance,
            scale=_on_actions(scale, masks),
        )


@clause(
    "step.update",
    title="One optimizer step: the update equals the contract's chain",
    statement="""Under each trainer config, the gradient the step applies (summed over
    micro-batches) with respect to the current log-probs, entropies (and values) equals the
    oracle's chain on action tokens and is exactly 0 at every other position; the
    back-propagated loss equals the oracle's; every stage the chain exposes (token rewards,
    advantages, returns, per-token loss) equals the oracle's given the stage before it, so a
    failure names the first diverging stage.""",
    ops=("train_step",),
    strategy=step_case(),
    examples=EXAMPLES,
    applies=_applies,
    checks=UPDATE_CHECKS,
    meets=STEP_FEATURES,
    case_features=step_features,
    max_examples_scale=0.5,
)
def check_update(ctx: Any, case: dict[str, Any]) -> None:
    under_each_config(ctx, case, check_update_under)


# step.metrics ------------------------------------------------------------------------------


def _expected_metrics(
    ctx: Any, case: dict[str, Any], cfg: dict[str, Any], profile: dict[str, Any], output: StepOutput
) -> dict[str, float]:
    """The oracle's metrics of the step, each from the target's own stage before it (as
    step.update compares), so that a metric is judged by its own definition only."""
    samples = case["samples"]
    rewards = _rows_of(output, "token_rewards", case)
    if rewards is None:
        rewards = oracle.token_rewards(samples, cfg, profile, cfg["kl_coef"])
    advantages, returns = oracle.advantages(rewards, samples, cfg, profile)
    advantages = _rows_of(output, "advantages", case) or advantages
    returns = _rows_of(output, "returns", case) or returns
    metrics = oracle.batch_metrics(samples, rewards, advantages, returns)
    metrics.update(oracle.policy_terms(samples, advantages, cfg, profile)["metrics"])
    if cfg["critic"]:
        metrics.update(oracle.value_terms(samples, returns, cfg)["metrics"])
    _, current = oracle.next_state(samples, cfg, profile, cfg["kl_coef"])
    if current is not None:
        metrics["kl_in_reward"] = current
    return metrics


def check_metrics_under(ctx: Any, case: dict[str, Any], config: TrainerConfig) -> None:
    case = case_under(case, config)
    profile = ctx.profile.choices()
    samples = case["samples"]
    cfg = config.resolved
    output, _ = run_step(ctx, case, config)
    expected = _expected_metrics(ctx, case, cfg, profile, output)
    names = dict(getattr(ctx.target, "step_metric_names", {}) or {})
    n_tokens = sum(sum(s["mask"]) for s in samples)
    for name, want in expected.items():
        trainer_name = names.get(name, name)
        if trainer_name is None or trainer_name not in output.metrics:
            continue  # the trainer does not log it: nothing to compare
        got = float(output.metrics[trainer_name])
        scale = (abs(want) + 10.0) * (n_tokens + 1) * 16
        with ctx.check(name):
            assert_scalar_close(
                "step.metrics",
                f"metric {trainer_name!r} (contract: {name})",
                want,
                got,
                tolerance=ctx.tolerance,
                scale=scale,
            )


METRIC_CHECKS = (
    "policy_loss",
    "entropy",
    "entropy/mean",
    "kl_loss",
    "kl_loss/mean",
    "clip_fraction",
    "advantages/mean",
    "advantages/max",
    "advantages/min",
    "returns/mean",
    "returns/max",
    "returns/min",
    "score/mean",
    "reward/mean",
    "response_length/mean",
    "kl_in_reward",
    "value_loss",
    "value_clip_fraction",
)


@clause(
    "step.metrics",
    title="The step's logged metrics equal their contract definitions",
    statement="""Each logged metric with a contract definition (policy loss, KL, entropy, clip
    fraction, advantage / return / score / reward statistics over action tokens, response
    length) equals the oracle's value for the step, under the trainer's name for it.""",
    ops=("train_step",),
    strategy=step_case(),
    examples=EXAMPLES,
    applies=_metrics_apply,
    checks=METRIC_CHECKS,
    meets=STEP_FEATURES,
    case_features=step_features,
    max_examples_scale=0.3,
)
def check_metrics(ctx: Any, case: dict[str, Any]) -> None:
    under_each_config(ctx, case, check_metrics_under)


# step.state --------------------------------------------------------------------------------


def _actionless(case: dict[str, Any]) -> dict[str, Any]:
    """The case with every token a hole: a batch with no action token (edge)."""
    samples = [{**s, "mask": [0] * len(s["mask"])} for s in case["samples"]]
    return {**case, "samples": samples}


@st.composite
def state_case(draw: Any) -> dict[str, Any]:
    """Three consecutive steps; in the edge domain the middle one may have no action token."""
    first, third = draw(step_case()), draw(step_case())
    middle = draw(step_case())
    if allows("edge") and draw(st.booleans()):
        middle = _actionless(middle)
    return {"steps": [first, middle, third]}


# nominal: three steps on groups of two and three (unequal_groups), the controller updated
# after each
def _state_step() -> dict[str, Any]:
    return {
        "samples": [
            _plain(0, [1, 1], 1.0, "s0", "g0", 1.0),
            _plain(1, [1, 1, 1], 0.0, "s1", "g0", -1.0),
            _plain(2, [1, 1], 0.5, "s2", "g1", 2.0),
            _plain(3, [1], 0.0, "s3", "g1", -2.0),
            _plain(4, [1, 1, 1], 1.0, "s4", "g1", 0.5),
        ],
        "shards": [5],
        "pad_value": 0.0,
        "extra_pad": 0,
    }


STATE_EXAMPLES = ({"steps": [_state_step() for _ in range(3)]},)


def _state_features(case: dict[str, Any]) -> set[str]:
    found: set[str] = set()
    for step in case["steps"]:
        found |= step_features(step)
    return found


def check_state_under(ctx: Any, case: dict[str, Any], config: TrainerConfig) -> None:
    case = case_under(case, config)
    cfg = config.resolved
    profile = ctx.profile.choices()
    expected_coef = cfg["kl_coef"]
    carry: Any = None
    for k, step in enumerate(case["steps"]):
        output, _ = run_step(ctx, step, config, state=carry)
        expected_coef = oracle.next_state(step["samples"], cfg, profile, expected_coef)[0][
            "kl_coef"
        ]
        if "kl_coef" not in output.state and not cfg["kl_in_reward"]:
            continue  # the trainer carries no KL coefficient (none is in its reward)
        got = output.state.get("kl_coef", math.nan)
        with ctx.check("kl_coef"):
            assert_scalar_close(
                "step.state",
                f"KL coefficient after step {k + 1} of {len(case['steps'])}",
                expected_coef,
                got,
                tolerance=ctx.tolerance,
                scale=abs(expected_coef) * 64 * (k + 1),
            )
        carry = output.carry if output.carry is not None else output.state


@clause(
    "step.state",
    title="State carried across steps follows the contract",
    statement="""Over consecutive steps, the state a trainer carries (the in-reward KL
    coefficient of its controller) equals the oracle's after every step; a step on a batch
    with no action token does not corrupt the next steps.""",
    ops=("train_step",),
    strategy=state_case(),
    examples=STATE_EXAMPLES,
    applies=_state_applies,
    checks=("kl_coef",),
    meets=STEP_FEATURES,
    case_features=_state_features,
    max_examples_scale=0.2,
)
def check_state(ctx: Any, case: dict[str, Any]) -> None:
    under_each_config(ctx, case, check_state_under)

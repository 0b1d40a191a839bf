"""The clauses an audit recomputes with the oracle (CONTRACT §5), one function each.

Each ``audit_*`` function reads the keys it needs from an ``AuditBatch``, asks the oracle
(``rlconform.oracle``, float64 from the recorded values) for what the derived field must
be, and compares it with what was recorded, returning ``ClauseAudit`` results (``skip``
with the reason when a key is missing). Per-sample clauses work through the batch in chunks
of samples and group-local estimators group by group, so memory stays bounded by the
chunk; batch-whitened estimators need the whole batch (their statistics span it).

Check names are the engine's where the clause has them (``reward.place_last/padding_zero``,
``adv.grpo/advantages``, ``adv.invariants/grpo_zero_off_actions``).
"""

from __future__ import annotations

import dataclasses
import math
import types
from collections.abc import Callable, Iterator
from typing import Any

import torch

from rlconform.adapters.base import Profile
from rlconform.audit import compare
from rlconform.audit.batch import AuditBatch
from rlconform.audit.features import batch_features, sample_features
from rlconform.audit.results import ClauseAudit, Violation
from rlconform.conformance.clauses.advantage import ESTIMATORS, Expected
from rlconform.conformance.compare import tolerance_for
from rlconform.oracle import advantage as adv_oracle
from rlconform.oracle import aggregate as agg_oracle
from rlconform.oracle import kl as kl_oracle
from rlconform.oracle import layout as layout_oracle
from rlconform.oracle import mask as mask_oracle
from rlconform.oracle import offpolicy as offpolicy_oracle
from rlconform.oracle import reward as reward_oracle
from rlconform.oracle.errors import ContractError

Progress = Callable[[int], None]

# Samples per chunk of the per-sample clauses: bounded memory at any batch size.
CHUNK_TOKENS = 1 << 18
# Roundoff multiplier of a sum of n rounded terms: typical (not worst-case) growth,
# 16 + 4 sqrt(n), so honest float32 sums pass and a wrong denominator still fails.
SUM_K_BASE = 16.0

GROUPED = frozenset(
    {
        "adv.grpo",
        "adv.rloo",
        "adv.reinforce_pp_baseline",
        "adv.opo",
        "adv.grpo_passk",
        "adv.gpg",
        "adv.optimal_token_baseline",
        "adv.gdpo",
    }
)
# Estimators whose returns are computed per sample (before any batch whitening).
PER_SAMPLE_RETURNS = frozenset(
    {"adv.gae", "adv.reinforce_pp", "adv.remax", "adv.optimal_token_baseline"}
)
LOSS_PAIRS = (("pg_losses", "pg_loss"), ("loss_mat", "loss"))
GAP_METRICS = ("train_rollout_logprob_abs_diff",)


def chunks(batch: AuditBatch) -> Iterator[tuple[int, int]]:
    """(start, stop) sample ranges of about CHUNK_TOKENS padded tokens each."""
    per_chunk = max(1, CHUNK_TOKENS // max(batch.width, 1))
    for start in range(0, batch.size, per_chunk):
        yield start, min(batch.size, start + per_chunk)


def _rows(start: int, stop: int) -> list[int]:
    return list(range(start, stop))


# ---------------------------------------------------------------------------------------
# layout.pad, mask.response_from_attention


def audit_layout(batch: AuditBatch, profile: Profile, progress: Progress) -> list[ClauseAudit]:
    """mask.response_from_attention (attention rows conform, response_mask inside the
    response) and layout.pad (input_ids = prompts ++ responses, position ids)."""
    masks = ClauseAudit("mask.response_from_attention")
    pad = ClauseAudit("layout.pad")
    if "attention_mask" not in batch.fields:
        pad.status, pad.detail = "skip", "no attention_mask recorded"
        if batch.lengths_from != "response_length" or "response_mask" not in batch.fields:
            masks.status, masks.detail = "skip", "no attention_mask recorded"
            return [masks, pad]
        masks.detail = "response_mask 1 only inside the response (L_i from response_length)"
        masks.samples = batch.size
        masks.add(_mask_inside(batch, masks.clause, sample_features(batch)))
        progress(batch.size)
        return [masks, pad]
    features = sample_features(batch)
    attention = batch.fields["attention_mask"]
    prompt_width = attention.shape[1] - batch.width
    masks.samples = pad.samples = batch.size
    for i, row in enumerate(attention.to(torch.int8).tolist()):
        try:
            mask_oracle.response_mask_from_attention(row, batch.width)
        except ContractError as reason:
            masks.add([_note(masks.clause, "layout", i, batch, "attention_mask", reason, features)])
    if "response_mask" in batch.fields:
        masks.detail = "attention rows conform; response_mask 1 only inside the response"
        masks.add(_mask_inside(batch, masks.clause, features))
    else:
        masks.detail = "attention rows conform (no response_mask recorded)"
    progress(batch.size)
    pad_checks = _pad_checks(batch, prompt_width, features)
    if pad_checks is None:
        pad.status, pad.detail = "skip", "no input_ids or 2-D position_ids recorded"
        return [masks, pad]
    pad.detail, found = pad_checks
    pad.add(found)
    return [masks, pad]


def _mask_inside(batch: AuditBatch, clause: str, features: list[frozenset[str]]) -> list[Violation]:
    """response_mask is 0 at every padding position (t >= L_i)."""
    recorded = batch.fields["response_mask"].to(torch.float64)
    return compare.exact(
        batch,
        clause,
        "response_mask",
        "response_mask",
        torch.zeros_like(recorded),
        recorded,
        ~batch.response,
        features=features,
        note="an action token at padding (t >= L_i)",
    )


def _pad_checks(
    batch: AuditBatch, prompt_width: int, features: list[frozenset[str]]
) -> tuple[str, list[Violation]] | None:
    found: list[Violation] = []
    done = []
    attention = batch.fields["attention_mask"]
    if batch.has("input_ids", "prompts", "responses"):
        done.append("input_ids = prompts ++ responses")
        expected = torch.cat([batch.fields["prompts"], batch.fields["responses"]], dim=1)
        found += compare.exact(
            batch,
            "layout.pad",
            "input_ids",
            "input_ids",
            expected.to(torch.float64),
            batch.fields["input_ids"],
            torch.ones_like(attention),
            features=features,
        )
    positions = batch.fields.get("position_ids")
    if positions is not None and positions.dim() == 2:
        done.append("position ids at real tokens")
        prompt_lengths = attention[:, :prompt_width].sum(dim=1).tolist()
        canonical = layout_oracle.pad_batch(
            [[0] * n for n in prompt_lengths],
            [[0] * n for n in batch.lengths],
            pad_token_id=0,
            prompt_width=prompt_width,
            response_width=batch.width,
        )
        expected = torch.tensor(canonical["position_ids"], dtype=torch.float64)
        found += compare.exact(
            batch,
            "layout.pad",
            "position_ids",
            "position_ids",
            expected,
            positions,
            attention,
            features=features,
        )
    if not done:
        return None
    return "; ".join(done), found


def _note(
    clause: str,
    check: str,
    row: int | None,
    batch: AuditBatch,
    what: str,
    reason: Any,
    features: list[frozenset[str]] | frozenset[str],
) -> Violation:
    """A violation described by a sentence (a ContractError, a missing error)."""
    text = str(reason)
    text = text.split("] ", 1)[1] if text.startswith("[") and "] " in text else text
    mine = features[row] if row is not None else features
    return Violation(
        clause=clause,
        check=check,
        row=row,
        sample=batch.name(row) if row is not None else "batch",
        what=what,
        token=None,
        expected=None,
        recorded=None,
        allowed=None,
        mismatched=1,
        positions=1,
        features=frozenset(mine),
        note=text,
    )


# ---------------------------------------------------------------------------------------
# reward.place_*


def audit_placement(batch: AuditBatch, profile: Profile, progress: Progress) -> list[ClauseAudit]:
    """reward.place_last (or the configured placement) of token_level_scores."""
    placement = batch.config.reward_placement
    clause_id = f"reward.place_{placement}"
    result = ClauseAudit(clause_id)
    if placement == "none":
        return [ClauseAudit("reward.place_last", "skip", "config reward_placement = none")]
    if "token_level_scores" not in batch.fields:
        result.status, result.detail = "skip", "no token_level_scores recorded"
        return [result]
    recorded = batch.fields["token_level_scores"]
    tail = profile.reward_nonaction_tail
    source = "recorded scores" if "scores" in batch.fields else "row sums of token_level_scores"
    result.detail = f"scalar reward from the {source}"
    if placement == "last":
        result.detail += f"; nonaction_tail = {tail}"
    features = sample_features(batch)
    tolerance = tolerance_for(batch.dtype_of("token_level_scores"))
    for start, stop in chunks(batch):
        block = recorded[start:stop].to(torch.float64)
        if "scores" in batch.fields:
            scalars = batch.fields["scores"][start:stop].to(torch.float64).tolist()
        else:
            scalars = [math.fsum(row) for row in block.tolist()]
        masks = batch.masks(start, stop)
        expected_rows = []
        for scalar, mask in zip(scalars, masks):
            if placement == "last":
                expected_rows.append(
                    reward_oracle.place_reward_last(scalar, mask, nonaction_tail=tail)[0]
                )
            elif placement == "uniform":
                expected_rows.append(reward_oracle.place_reward_uniform(scalar, mask))
            else:
                expected_rows.append(
                    reward_oracle.place_reward_discounted(scalar, mask, batch.config.reward_gamma)
                )
        expected = compare.padded(batch, expected_rows, start)
        rows = _rows(start, stop)
        response = batch.response[start:stop]
        result.add(
            compare.exact(
                batch,
                clause_id,
                "padding_zero",
                "token_level_scores",
                expected,
                block,
                ~response,
                features=features,
                rows=rows,
                note="a reward in padding (t >= L_i)",
            )
        )
        scale = torch.tensor(scalars, dtype=torch.float64).unsqueeze(1).expand_as(expected)
        result.add(
            compare.close(
                batch,
                clause_id,
                "values",
                "token_level_scores",
                expected,
                block,
                response,
                tolerance=tolerance,
                scale=scale.nan_to_num(),
                k=16.0,
                features=features,
                rows=rows,
            )
        )
        progress(stop - start)
    result.samples = batch.size
    return [result]


# ---------------------------------------------------------------------------------------
# kl.in_reward


def _clamps(profile: Profile) -> dict[str, float | None]:
    return {
        "ref_clamp": profile.get("kl_ref_clamp", 20.0),
        "value_clamp": profile.get("k3_value_clamp", 10.0),
    }


def audit_kl_in_reward(
    batch: AuditBatch, profile: Profile, progress: Progress
) -> list[ClauseAudit]:
    """kl.in_reward: token_level_rewards = token_level_scores - beta kl(old, ref) mask
    (equality when the KL is not in the reward)."""
    result = ClauseAudit("kl.in_reward")
    if not batch.has("token_level_scores", "token_level_rewards"):
        result.status, result.detail = "skip", "needs token_level_scores and token_level_rewards"
        return [result]
    scores, rewards = batch.fields["token_level_scores"], batch.fields["token_level_rewards"]
    config = batch.config
    features = sample_features(
        batch, rewards=("token_level_scores",), logprobs=("old_log_probs", "ref_log_prob")
    )
    everywhere = torch.ones_like(batch.response)
    if not config.use_kl_in_reward:
        result.detail = "use_kl_in_reward off: token_level_rewards == token_level_scores"
        result.add(
            compare.exact(
                batch,
                result.clause,
                "equality",
                "token_level_rewards",
                scores.to(torch.float64),
                rewards,
                everywhere,
                features=features,
            )
        )
        result.samples = batch.size
        progress(batch.size)
        return [result]
    beta = batch.metrics.get("actor/reward_kl_penalty_coeff", config.kl_coef)
    if not batch.has("old_log_probs", "ref_log_prob") or beta is None:
        result.status = "skip"
        result.detail = "use_kl_in_reward needs old_log_probs, ref_log_prob and kl_coef"
        return [result]
    beta = float(beta)
    mode = config.kl_penalty
    estimator, _ = kl_oracle.split_mode(mode, "kl.in_reward")
    clamps = _clamps(profile)
    result.detail = f"kl_penalty {mode!r}, beta {beta!r}"
    tolerance = tolerance_for(batch.dtype_of("token_level_rewards"))
    olds, refs, masks = [], [], []
    size_total = 0.0
    for start, stop in chunks(batch):
        score_rows = batch.rows("token_level_scores", start, stop)
        old_rows, ref_rows = (
            batch.rows("old_log_probs", start, stop),
            batch.rows("ref_log_prob", start, stop),
        )
        mask_rows = batch.masks(start, stop)
        expected_rows = [
            kl_oracle.kl_in_reward(s, od, rf, m, beta=beta, mode=mode, **clamps)
            for s, od, rf, m in zip(score_rows, old_rows, ref_rows, mask_rows)
        ]
        sizes = kl_sizes(
            estimator,
            batch.fields["old_log_probs"][start:stop],
            batch.fields["ref_log_prob"][start:stop],
            **clamps,
        )
        actions = batch.action[start:stop]
        size_total += float(torch.where(actions, sizes, 0.0).sum())
        expected = compare.padded(batch, expected_rows, start)
        block = scores[start:stop].to(torch.float64)
        padding = ~batch.response[start:stop]
        expected = torch.where(padding, block, expected)
        rows = _rows(start, stop)
        result.add(
            compare.close(
                batch,
                result.clause,
                "values",
                "token_level_rewards",
                expected,
                rewards[start:stop],
                torch.ones_like(padding),
                tolerance=tolerance,
                scale=torch.where(actions, block.abs() + beta * sizes, block.abs()),
                k=16.0,
                features=features,
                rows=rows,
            )
        )
        olds += old_rows
        refs += ref_rows
        masks += mask_rows
        progress(stop - start)
    result.samples = batch.size
    if "actor/reward_kl_penalty" in batch.metrics:
        reduction = profile.get("kl_metric_reduction", "token_mean")
        result.detail += f"; metric actor/reward_kl_penalty ({reduction})"
        expected_metric = kl_oracle.kl_in_reward_metric(
            olds, refs, masks, mode=mode, reduction=reduction, **clamps
        )
        result.add(
            _scalar(
                batch,
                result.clause,
                "metric",
                f"actor/reward_kl_penalty ({reduction})",
                expected_metric,
                batch.metrics["actor/reward_kl_penalty"],
                tolerance_for(batch.dtype_of("old_log_probs")),
                size_total,
                16.0,
                batch_features(features),
            )
        )
    return [result]


def kl_sizes(
    estimator: str,
    old: torch.Tensor,
    ref: torch.Tensor,
    *,
    ref_clamp: float | None,
    value_clamp: float | None,
) -> torch.Tensor:
    """|kl| plus its rounding scale per token, for the tolerance only (the expected values
    come from the oracle): the bound of ``conformance.clauses.kl.estimator_conditioning``,
    vectorised over (B, R) so a million tokens cost milliseconds."""
    old, ref = old.to(torch.float64), ref.to(torch.float64)
    diff = (old - ref).abs()
    if estimator in ("k1", "abs"):
        return 2.0 * diff
    if estimator == "k2":
        return 1.5 * diff * diff
    x = ref - old
    if ref_clamp is not None:
        x = x.clamp(-ref_clamp, ref_clamp)
    e = torch.exp(x)
    value = e - x - 1.0
    scale = e * (1.0 + x.abs()) + x.abs() + 1.0
    if value_clamp is None:
        return value.abs() + scale
    clamped = value.abs() > value_clamp
    return torch.where(clamped, torch.full_like(value, value_clamp), value.abs() + scale)


def _scalar(
    batch: AuditBatch,
    clause: str,
    check: str,
    what: str,
    expected: float,
    recorded: Any,
    tolerance: Any,
    scale: float,
    k: float,
    features: frozenset[str],
) -> list[Violation]:
    """One recorded scalar (a loss, a metric) against the oracle's value."""
    if isinstance(recorded, torch.Tensor):
        recorded = recorded.detach().to(torch.float64).item()
    if isinstance(recorded, bool) or not isinstance(recorded, (int, float)):
        return [
            _note(
                clause, check, None, batch, what, f"recorded {recorded!r} is not a number", features
            )
        ]
    e, a = float(expected), float(recorded)
    allowed = tolerance.atol + tolerance.rtol * abs(e) + k * tolerance.eps * abs(scale)
    same = (math.isnan(e) and math.isnan(a)) or (math.isinf(e) and e == a)
    if same or abs(e - a) <= allowed:
        return []
    return [
        Violation(
            clause=clause,
            check=check,
            row=None,
            sample="batch",
            what=what,
            token=None,
            expected=e,
            recorded=a,
            allowed=allowed,
            mismatched=1,
            positions=1,
            features=features,
        )
    ]


# ---------------------------------------------------------------------------------------
# adv.<estimator>, adv.invariants


def _rewards_key(batch: AuditBatch) -> str | None:
    for key in ("token_level_rewards", "token_level_scores"):
        if key in batch.fields:
            return key
    return None


def _placed_scores(batch: AuditBatch, profile: Profile) -> list[list[float]]:
    """Token rewards from per-sample ``scores`` placed by the oracle (no token rewards recorded)."""
    tail = profile.reward_nonaction_tail
    scores = batch.fields["scores"].to(torch.float64).tolist()
    return [
        reward_oracle.place_reward_last(s, m, nonaction_tail=tail)[0]
        for s, m in zip(scores, batch.masks())
    ]


def _estimator_needs(clause_id: str, batch: AuditBatch) -> str | None:
    """The reason the estimator cannot be recomputed from the recorded keys, if any."""
    needs = {
        "adv.gae": ("values",),
        "adv.remax": ("reward_baselines",),
        "adv.optimal_token_baseline": ("old_log_probs", "sum_pi_squared"),
    }.get(clause_id, ())
    missing = [k for k in needs if k not in batch.fields]
    if clause_id in GROUPED and batch.groups is None:
        missing.append("uid (group labels)")
    if clause_id == "adv.gdpo":
        keys = batch.config.gdpo_reward_keys
        if not keys:
            missing.append("config gdpo_reward_keys")
        missing += [k for k in keys if k not in batch.fields and k not in batch.per_sample]
    return f"{clause_id} needs {', '.join(missing)}" if missing else None


def _case(
    batch: AuditBatch, members: list[int], rewards: list[list[float]], clause_id: str
) -> dict[str, Any]:
    """The estimator clause's case (its documented conventions) for the samples ``members``."""
    config = batch.config
    samples = []
    per_token = {
        "values": "values",
        "old_logprobs": "old_log_probs",
        "sum_pi_squared": "sum_pi_squared",
        "is_weights": "rollout_is_weights",
    }
    loaded = {
        name: {i: row for i, row in zip(members, _member_rows(batch, key, members))}
        for name, key in per_token.items()
        if key in batch.fields
    }
    terminated = _terminated(batch)
    bootstrap = (
        batch.fields["bootstrap_value"].to(torch.float64).tolist()
        if "bootstrap_value" in batch.fields
        else [0.0] * batch.size
    )
    masks = batch.action.to(torch.int8)
    for i in members:
        sample: dict[str, Any] = {
            "uid": batch.name(i),
            "group": batch.groups[i] if batch.groups is not None else i,
            "mask": masks[i, : batch.lengths[i]].tolist(),
            "rewards": rewards[i],
            "terminated": terminated[i],
            "bootstrap": bootstrap[i],
        }
        for name, rows in loaded.items():
            sample[name] = rows[i]
        if "reward_baselines" in batch.fields:
            sample["baseline"] = float(batch.fields["reward_baselines"][i])
        if clause_id == "adv.gdpo":
            sample["components"] = [_component(batch, key, i) for key in config.gdpo_reward_keys]
        samples.append(sample)
    weights = list(config.gdpo_reward_weights or [1.0] * len(config.gdpo_reward_keys))
    params = {
        "gamma": config.gamma,
        "lam": config.lam,
        "bootstrap": "terminated" in batch.fields or "truncated" in batch.fields,
        "norm_by_std": config.norm_by_std,
        "f_norm": config.f_norm,
        "is_weights": "rollout_is_weights" in batch.fields,
        "weights": weights,
    }
    return {"samples": samples, "params": params, "pad_value": 0.0, "extra_pad": 0}


def _member_rows(batch: AuditBatch, key: str, members: list[int]) -> list[list[float]]:
    if members == list(range(members[0], members[-1] + 1)):
        return batch.rows(key, members[0], members[-1] + 1)
    values = batch.fields[key][members].to(torch.float64).tolist()
    return [row[: batch.lengths[i]] for i, row in zip(members, values)]


def _component(batch: AuditBatch, key: str, i: int) -> float:
    value = batch.fields[key][i] if key in batch.fields else batch.per_sample[key][i]
    return float(value)


def _terminated(batch: AuditBatch) -> list[bool]:
    if "terminated" in batch.fields:
        return batch.fields["terminated"].tolist()
    if "truncated" in batch.fields:
        return (~batch.fields["truncated"]).tolist()
    return [True] * batch.size


def audit_advantages(batch: AuditBatch, profile: Profile, progress: Progress) -> list[ClauseAudit]:
    """adv.<estimator> (advantages and returns on action tokens) and adv.invariants
    (exactly 0 at every mask-0 position)."""
    config = batch.config
    clause_id = config.estimator
    outputs = [k for k in ("advantages", "returns") if k in batch.fields]
    if clause_id is None:
        if not outputs:
            return []
        why = (
            f"adv_estimator {config.estimator_name!r} has no contract clause"
            if config.estimator_name
            else "config names no adv_estimator"
        )
        invariants = ClauseAudit("adv.invariants")
        _zero_off_actions(batch, None, outputs, invariants, progress)
        return [ClauseAudit("adv.*", "skip", why), invariants]
    result = ClauseAudit(clause_id)
    invariants = ClauseAudit("adv.invariants")
    if not outputs:
        result.status = invariants.status = "skip"
        result.detail = invariants.detail = "no advantages or returns recorded"
        return [result, invariants]
    key = _rewards_key(batch)
    if key is None and "scores" not in batch.fields:
        result.status = "skip"
        result.detail = "no token_level_rewards, token_level_scores or scores recorded"
    missing = _estimator_needs(clause_id, batch)
    if missing and result.status != "skip":
        result.status, result.detail = "skip", missing
    if result.status == "skip":
        _zero_off_actions(batch, clause_id, outputs, invariants, progress)
        return [result, invariants]
    if key is not None:
        rewards = batch.rows(key)
        source = key
    else:
        rewards = _placed_scores(batch, profile)
        source = f"scores placed by the oracle (nonaction_tail {profile.reward_nonaction_tail})"
    scores = [adv_oracle.sample_score(r, m) for r, m in zip(rewards, batch.masks())]
    reward_keys = (key,) if key else ()
    features = sample_features(
        batch,
        rewards=reward_keys,
        values=("values",) if clause_id == "adv.gae" else (),
        logprobs=("old_log_probs",) if clause_id == "adv.optimal_token_baseline" else (),
        groups=clause_id in GROUPED,
        scores=scores,
    )
    result.detail = _estimator_detail(batch, clause_id, source)
    spec = ESTIMATORS[clause_id]
    context = types.SimpleNamespace(profile=profile)
    expected = {
        name: torch.zeros(batch.size, batch.width, dtype=torch.float64)
        for name in ("advantages", "returns", "advantage_scale", "return_scale")
    }
    parts = _coupled_parts(batch, clause_id)
    coupled = _coupled_features(features, parts)
    # group by group where the estimator is group-local (bounded memory), else in one call
    grouped = clause_id in GROUPED and spec.group_local
    for members in parts if grouped else [list(range(batch.size))]:
        case = _case(batch, members, rewards, clause_id)
        try:
            got: Expected = spec.expect(context, case)
        except ContractError as reason:
            where = members[0] if len(members) < batch.size else None
            mine = coupled if where is not None else batch_features(features)
            result.add(
                [
                    _note(
                        clause_id,
                        "raises",
                        where,
                        batch,
                        "advantages",
                        f"the contract requires an error here: {reason}",
                        mine,
                    )
                ]
            )
            progress(len(members))
            continue
        index = torch.tensor(members)
        for name, rows in (
            ("advantages", got.advantages),
            ("returns", got.returns),
            ("advantage_scale", got.advantage_scale),
            ("return_scale", got.return_scale),
        ):
            block = torch.zeros(len(members), batch.width, dtype=torch.float64)
            for j, row in enumerate(rows):
                if len(row):
                    block[j, : len(row)] = torch.tensor(row, dtype=torch.float64)
            expected[name][index] = block
        progress(len(members))
    for name, scale in (("advantages", "advantage_scale"), ("returns", "return_scale")):
        if name in batch.fields:
            per_sample = name == "returns" and clause_id in PER_SAMPLE_RETURNS
            result.add(
                compare.close(
                    batch,
                    clause_id,
                    name,
                    name,
                    expected[name],
                    batch.fields[name],
                    batch.action,
                    tolerance=tolerance_for(batch.dtype_of(name)),
                    scale=expected[scale],
                    k=spec.k,
                    features=features if per_sample else coupled,
                )
            )
    _mark_split_groups(batch, result)
    result.samples = batch.size
    _zero_off_actions(
        batch, clause_id, outputs, invariants, progress=lambda n: None, features=features
    )
    return [result, invariants]


def _coupled_parts(batch: AuditBatch, clause_id: str) -> list[list[int]]:
    """The samples whose inputs each output depends on: its group (group statistics), the
    whole batch (batch whitening, GPG's alpha), or the sample alone (ReMax)."""
    if clause_id in GROUPED and ESTIMATORS[clause_id].group_local:
        return list(adv_oracle.group_members(batch.groups).values())
    if not ESTIMATORS[clause_id].group_local:
        return [list(range(batch.size))]
    return [[i] for i in range(batch.size)]


def _coupled_features(
    features: list[frozenset[str]], parts: list[list[int]]
) -> list[frozenset[str]]:
    """Each sample's features as the union over its part: the case an output belongs to."""
    out = list(features)
    for members in parts:
        union = batch_features([features[i] for i in members])
        for i in members:
            out[i] = union
    return out


def _estimator_detail(batch: AuditBatch, clause_id: str, source: str) -> str:
    c = batch.config
    parts = [f"adv_estimator {c.estimator_name!r}", f"rewards from {source}"]
    if clause_id in ("adv.gae", "adv.reinforce_pp"):
        parts.append(f"gamma {c.gamma!r}")
    if clause_id == "adv.gae":
        parts.append(f"lam {c.lam!r}")
    if clause_id in ("adv.grpo", "adv.grpo_passk", "adv.gdpo"):
        parts.append(f"norm_by_std {c.norm_by_std}")
    return "; ".join(parts)


def _mark_split_groups(batch: AuditBatch, result: ClauseAudit) -> None:
    """Samples of a group smaller than rollout_n: the rest of it is in another dump, so
    their group statistics cannot be recomputed here (a warning, not a violation)."""
    n = batch.config.rollout_n
    if n is None or batch.groups is None or result.clause not in GROUPED:
        return
    members = adv_oracle.group_members(batch.groups)
    split = {label for label, rows in members.items() if len(rows) < n}
    if not split:
        return
    result.warnings.append(
        f"{len(split)} group(s) have fewer than rollout_n = {n} samples in this dump (split "
        "across dumps?): their violations are warnings"
    )
    kept = []
    for v in result.violations:
        if v.row is not None and batch.groups[v.row] in split:
            v = dataclasses.replace(v, split_group=True)
        kept.append(v)
    result.violations = kept
    result.status = "fail" if result.counted else "pass"


def _zero_off_actions(
    batch: AuditBatch,
    clause_id: str | None,
    outputs: list[str],
    invariants: ClauseAudit,
    progress: Progress,
    features: list[frozenset[str]] | None = None,
) -> None:
    features = features if features is not None else sample_features(batch)
    check = f"{clause_id.split('.', 1)[1]}_zero_off_actions" if clause_id else "zero_off_actions"
    invariants.detail = f"{', '.join(outputs)} exactly 0 at mask-0 positions (holes, padding)"
    off = ~batch.action
    for name in outputs:
        recorded = batch.fields[name]
        invariants.add(
            compare.exact(
                batch,
                "adv.invariants",
                check,
                name,
                torch.zeros(recorded.shape, dtype=torch.float64),
                recorded,
                off,
                features=features,
                note="a nonzero value at a mask-0 position",
            )
        )
    invariants.samples = batch.size
    progress(batch.size)


# ---------------------------------------------------------------------------------------
# agg.<mode>


def audit_aggregation(batch: AuditBatch, profile: Profile, progress: Progress) -> list[ClauseAudit]:
    """agg.<loss_agg_mode>: the recorded scalar loss is the aggregate of the per-token losses."""
    config = batch.config
    mode = config.loss_agg_mode
    clause_id = "agg." + mode.replace("-", "_")
    pairs = [(m, s) for m, s in LOSS_PAIRS if m in batch.fields and s in batch.scalars]
    if not pairs:
        return [
            ClauseAudit(
                clause_id,
                "skip",
                "no per-token losses with their scalar (pg_losses + pg_loss, or loss_mat + loss)",
            )
        ]
    norm = config.loss_scale_factor
    if norm is None:
        norm = profile.get("agg_norm_length")
    if mode == "seq-mean-token-sum-norm" and norm is None:
        return [ClauseAudit(clause_id, "skip", "seq-mean-token-sum-norm needs loss_scale_factor")]
    result = ClauseAudit(clause_id, samples=batch.size)
    settings = {
        "dp_size": config.dp_size,
        "num_tokens": config.batch_num_tokens,
        "num_sequences": config.global_batch_size,
        "norm_length": norm,
    }
    result.detail = f"loss_agg_mode {mode!r}, " + ", ".join(
        f"{k} {v!r}" for k, v in settings.items() if v is not None
    )
    masks = batch.masks()
    for matrix, scalar in pairs:
        features = sample_features(batch, values=(matrix,))
        losses = batch.rows(matrix)
        try:
            expected = agg_oracle.aggregate(losses, masks, mode, **settings)
        except ContractError as reason:
            result.status, result.detail = "error", str(reason)
            return [result]
        scale = agg_oracle.aggregate(
            [[abs(x) for x in row] for row in losses], masks, mode, **settings
        )
        n = agg_oracle.action_token_count(masks)
        result.add(
            _scalar(
                batch,
                clause_id,
                "value",
                f"{scalar} = agg({matrix})",
                expected,
                batch.scalars[scalar],
                tolerance_for(batch.dtype_of(matrix)),
                scale,
                SUM_K_BASE + 4.0 * math.sqrt(n),
                batch_features(features),
            )
        )
        progress(batch.size)
    return [result]


# ---------------------------------------------------------------------------------------
# offpolicy.logprob_gap, offpolicy.is_correction


def audit_offpolicy(batch: AuditBatch, profile: Profile, progress: Progress) -> list[ClauseAudit]:
    """offpolicy.logprob_gap (a recorded gap metric) and offpolicy.is_correction (recorded
    rollout_is_weights)."""
    if not batch.has("old_log_probs", "rollout_log_probs"):
        return [
            ClauseAudit(
                "offpolicy.logprob_gap", "skip", "needs old_log_probs and rollout_log_probs"
            )
        ]
    features = sample_features(batch, logprobs=("old_log_probs", "rollout_log_probs"))
    olds, rollouts, masks = (
        batch.rows("old_log_probs"),
        batch.rows("rollout_log_probs"),
        batch.masks(),
    )
    reduction = profile.get("logprob_gap_reduction", "token_mean")
    gap = offpolicy_oracle.logprob_gap(olds, rollouts, masks, reduction=reduction)
    results = []
    metric = next((k for k in GAP_METRICS if k in batch.metrics), None)
    gap_audit = ClauseAudit("offpolicy.logprob_gap", samples=batch.size)
    if metric is None:
        gap_audit.status = "skip"
        gap_audit.detail = (
            f"no {GAP_METRICS[0]} metric recorded; the oracle's value is {gap:.6g} ({reduction})"
        )
    else:
        gap_audit.detail = f"{metric} ({reduction})"
        scale = math.fsum(
            abs(o - r)
            for od, ro, m in zip(olds, rollouts, masks)
            for o, r, mt in zip(od, ro, m)
            if mt
        )
        gap_audit.add(
            _scalar(
                batch,
                gap_audit.clause,
                "value",
                metric,
                gap,
                batch.metrics[metric],
                tolerance_for(batch.dtype_of("old_log_probs")),
                scale,
                16.0,
                batch_features(features),
            )
        )
    results.append(gap_audit)
    if "rollout_is_weights" in batch.fields:
        results.append(_is_weights(batch, profile, olds, rollouts, masks, features))
    progress(batch.size)
    return results


def _is_weights(
    batch: AuditBatch,
    profile: Profile,
    olds: list[list[float]],
    rollouts: list[list[float]],
    masks: list[list[int]],
    features: list[frozenset[str]],
) -> ClauseAudit:
    config = batch.config
    result = ClauseAudit("offpolicy.is_correction", samples=batch.size)
    if config.rollout_is is None:
        result.status, result.detail = (
            "skip",
            "rollout_is_weights recorded, config rollout_is unset",
        )
        return result
    mode = f"{config.rollout_is}_{config.rollout_is_mode}"
    seq = profile.get("is_sequence_log_ratio", "sum")
    result.detail = (
        f"mode {mode}, bounds [{config.rollout_is_threshold_lower}, "
        f"{config.rollout_is_threshold}], sequence_log_ratio {seq}"
    )
    expected_rows, scale_rows, log_ratios = [], [], []
    for od, ro, m in zip(olds, rollouts, masks):
        weights = offpolicy_oracle.is_correction_weights(
            od,
            ro,
            m,
            mode=mode,
            clip_min=config.rollout_is_threshold_lower,
            clip_max=config.rollout_is_threshold,
            sequence_log_ratio=seq,
            log_ratio_clamp=profile.get("is_log_ratio_clamp"),
        )
        expected_rows.append(weights)
        if config.rollout_is == "sequence":
            x = math.fsum(abs(a - b) for a, b, mt in zip(od, ro, m) if mt)
            scale_rows.append([abs(w) * (1.0 + x) for w in weights])
            total = math.fsum(a - b for a, b, mt in zip(od, ro, m) if mt)
            log_ratios.append([total] * len(m))
        else:
            scale_rows.append([abs(w) * (1.0 + abs(a - b)) for w, a, b in zip(weights, od, ro)])
            log_ratios.append([a - b for a, b in zip(od, ro)])
    positions = batch.action
    if config.rollout_is_mode == "mask":
        positions = positions & ~_near_a_bound(batch, compare.padded(batch, log_ratios), config)
    result.add(
        compare.close(
            batch,
            result.clause,
            "weights",
            "rollout_is_weights",
            compare.padded(batch, expected_rows),
            batch.fields["rollout_is_weights"],
            positions,
            tolerance=tolerance_for(batch.dtype_of("rollout_is_weights")),
            scale=compare.padded(batch, scale_rows),
            k=16.0,
            features=features,
        )
    )
    return result


def _near_a_bound(batch: AuditBatch, log_ratio: torch.Tensor, config: Any) -> torch.Tensor:
    """Tokens whose ratio lies within rounding of a rejection bound: keeping or rejecting
    them may go either way in the recorded dtype, so the mask modes do not judge them."""
    eps = tolerance_for(batch.dtype_of("rollout_is_weights", "old_log_probs")).eps
    slack = 16.0 * eps * (1.0 + log_ratio.abs())
    near = torch.zeros_like(log_ratio, dtype=torch.bool)
    for bound in (config.rollout_is_threshold, config.rollout_is_threshold_lower):
        if bound is not None and bound > 0:
            near |= (log_ratio - math.log(bound)).abs() <= slack
    return near


AUDITS = (
    audit_layout,
    audit_placement,
    audit_kl_in_reward,
    audit_advantages,
    audit_aggregation,
    audit_offpolicy,
)

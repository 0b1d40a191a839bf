"""Oracle for the CONTRACT area `adv`: advantage estimators (standard library only, float64).

Every estimator takes per-sample lists of equal length: a sample's response positions
(t < L_i; trailing zero-reward positions are harmless) and a 0/1 action mask. Outputs are
written at action tokens only, 0 elsewhere. Each estimator returns ``(advantages,
returns)`` as ragged rows.

Reward credit (CONTRACT "adv"): every estimator reads the same rewards, the sample's
token rewards over its whole response, mask holes included. The outcome estimators use
score_i = their sum; the return-based ones (GAE, REINFORCE++, ReMax, and the returns of
the optimal token baseline) first credit a reward sitting on a mask-0 position to the
nearest preceding action token (the first action token if none precedes), so a reward at
L_i - 1 on a response that ends in a tool observation is never dropped. Discount steps are
action tokens; with ``discount_at_holes`` every position is a step. Values, log-probs and
other per-token inputs at mask-0 positions are never read.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from rlconform.oracle.errors import ContractError, require_same_length

WHITEN_EPS = 1e-8

Rows = list[list[float]]


def _check_rows(
    clause: str, masks: Sequence[Sequence[int]], uids: Sequence[object] | None, **fields: Sequence
) -> list:
    """Validate per-sample fields against the masks; return the uids to name samples by."""
    uids = list(uids) if uids is not None else list(range(len(masks)))
    for name, rows in fields.items():
        if len(rows) != len(masks):
            raise ContractError(
                clause, f"{len(rows)} rows of {name!r} for {len(masks)} samples", field=name
            )
    for i, mask in enumerate(masks):
        if any(m not in (0, 1) for m in mask):
            raise ContractError(clause, "mask values must be 0 or 1", uid=uids[i], field="mask")
        per_token = {
            name: rows[i] for name, rows in fields.items() if isinstance(rows[i], (list, tuple))
        }
        require_same_length(
            clause, uids[i], mask=list(mask), **{k: list(v) for k, v in per_token.items()}
        )
    return uids


def sample_score(rewards: Sequence[float], mask: Sequence[int]) -> float:
    """score_i = sum of the sample's token rewards over its response (holes included)."""
    return math.fsum(rewards)


def credited_rewards(rewards: Sequence[float], mask: Sequence[int]) -> list[float]:
    """Token rewards with each reward at a mask-0 position moved onto the nearest preceding
    action token (the first action token when none precedes); 0 at mask-0 positions. A
    sample without an action token has nowhere to carry a reward: all zeros."""
    actions = [t for t, m in enumerate(mask) if m]
    credited = [0.0] * len(mask)
    if not actions:
        return credited
    carrier = actions[0]
    for t, reward in enumerate(rewards):
        if mask[t]:
            carrier = t
        credited[carrier] += reward
    return credited


def _steps(t: int, following: int | None, discount_at_holes: bool) -> int:
    """Discount steps from action token ``t`` to the next action token ``following``: 1
    when holes are not steps, else the number of positions in between and including it.
    From the last action token to what follows the response (None) it is one step."""
    return following - t if discount_at_holes and following is not None else 1


def group_members(labels: Sequence[object]) -> dict[object, list[int]]:
    """Sample indices of each group, groups in order of first appearance."""
    members: dict[object, list[int]] = {}
    for i, label in enumerate(labels):
        members.setdefault(label, []).append(i)
    return members


def broadcast(values: Sequence[float], masks: Sequence[Sequence[int]]) -> Rows:
    """One value per sample written on each of its action tokens, 0 elsewhere."""
    return [[float(v) if m else 0.0 for m in mask] for v, mask in zip(values, masks)]


def whiten(
    rows: Rows,
    masks: Sequence[Sequence[int]],
    *,
    degenerate: str,
    clause: str,
    std_eps: float | None = None,
) -> Rows:
    """(x - mean) / sqrt(var + 1e-8) over every action token of the batch.

    Masked mean and unbiased masked variance. With at most one action token in the
    batch there is no spread to estimate: ``degenerate="zeros"`` (contract default)
    gives zeros, ``"raise"`` raises a ContractError. ``std_eps`` (profile
    ``whiten_std_eps``): the stabiliser added to the std instead, (x - mean) /
    (sqrt(var) + std_eps) (AReaL's ``Normalization``).
    """
    if degenerate not in ("zeros", "raise"):
        raise ContractError(clause, f"unknown whiten_degenerate {degenerate!r}")
    xs = [x for row, mask in zip(rows, masks) for x, m in zip(row, mask) if m]
    n = len(xs)
    if n <= 1:
        if degenerate == "raise":
            raise ContractError(
                clause, f"whitening needs at least 2 action tokens in the batch, got {n}"
            )
        return [[0.0] * len(row) for row in rows]
    mean = math.fsum(xs) / n
    var = math.fsum((x - mean) ** 2 for x in xs) / (n - 1)
    if std_eps is None:
        inv_std = 1.0 / math.sqrt(var + WHITEN_EPS)
    else:
        inv_std = 1.0 / (math.sqrt(var) + std_eps)
    return [
        [(x - mean) * inv_std if m else 0.0 for x, m in zip(row, mask)]
        for row, mask in zip(rows, masks)
    ]


def _group_baseline(scores: list[float], members: list[int], singleton: str, clause: str) -> float:
    """Group mean; a group of one uses 0 (``singleton="zero"``) or its own score (``"self"``)."""
    if len(members) > 1:
        return math.fsum(scores[j] for j in members) / len(members)
    if singleton == "zero":
        return 0.0
    if singleton == "self":
        return scores[members[0]]
    raise ContractError(clause, f"unknown singleton_baseline {singleton!r}")


def group_normalized(
    scores: list[float],
    labels: Sequence[object],
    *,
    epsilon: float,
    norm_by_std: bool,
    std_ddof: int,
    singleton: str,
    clause: str = "adv.grpo",
) -> list[float]:
    """Per group: (s - mean) / (std + epsilon), or s - mean without std normalisation.

    std uses ``std_ddof`` (verl 1). A group of one: ``"mean0_std1"`` (verl) treats it as
    mean 0, std 1; ``"zero"`` gives it advantage 0.
    """
    if singleton not in ("mean0_std1", "zero"):
        raise ContractError(clause, f"unknown grpo_singleton {singleton!r}")
    advantages = [0.0] * len(scores)
    for members in group_members(labels).values():
        group = [scores[i] for i in members]
        if len(group) == 1:
            if singleton == "zero":
                continue
            mean, std = 0.0, 1.0
        else:
            mean = math.fsum(group) / len(group)
            std = math.sqrt(math.fsum((s - mean) ** 2 for s in group) / (len(group) - std_ddof))
        for i in members:
            advantages[i] = (
                (scores[i] - mean) / (std + epsilon) if norm_by_std else scores[i] - mean
            )
    return advantages


def gae(
    rewards: Rows,
    values: Rows,
    masks: Sequence[Sequence[int]],
    terminated: Sequence[bool],
    bootstrap: Sequence[float],
    *,
    gamma: float,
    lam: float,
    whiten_degenerate: str = "zeros",
    whiten_std_eps: float | None = None,
    discount_at_holes: bool = False,
    uids: Sequence[object] | None = None,
) -> tuple[Rows, Rows]:
    """adv.gae: delta_t = r_t + gamma V_next - V_t; A_t = delta_t + gamma lam A_next.

    r are the credited rewards (a hole's reward moves to the preceding action token).
    Backwards over action tokens only: a mask-0 position is skipped, so V_next and
    A_next are those of the next action token (with ``discount_at_holes`` gamma and
    gamma lam are raised to the number of positions in between). After the last action
    token V_next is 0 for a terminated sample and ``bootstrap[i]`` for a truncated one,
    and A_next is 0. returns = A + V (before whitening); advantages are then whitened over
    the batch.
    """
    _check_rows(
        "adv.gae",
        masks,
        uids,
        rewards=rewards,
        values=values,
        terminated=terminated,
        bootstrap=bootstrap,
    )
    raw, returns = [], []
    for rewards_i, v, mask, done, boot in zip(rewards, values, masks, terminated, bootstrap):
        r = credited_rewards(rewards_i, mask)
        adv, ret = [0.0] * len(mask), [0.0] * len(mask)
        next_value = 0.0 if done else float(boot)
        next_adv, following = 0.0, None
        for t in reversed(range(len(mask))):
            if not mask[t]:
                continue
            steps = _steps(t, following, discount_at_holes)
            delta = r[t] + gamma**steps * next_value - v[t]
            adv[t] = delta + (gamma * lam) ** steps * next_adv
            ret[t] = adv[t] + v[t]
            next_value, next_adv, following = v[t], adv[t], t
        raw.append(adv)
        returns.append(ret)
    advantages = whiten(
        raw, masks, degenerate=whiten_degenerate, clause="adv.gae", std_eps=whiten_std_eps
    )
    return advantages, returns


def grpo(
    rewards: Rows,
    masks: Sequence[Sequence[int]],
    groups: Sequence[object],
    *,
    epsilon: float = 1e-6,
    norm_by_std: bool = True,
    std_ddof: int = 1,
    singleton: str = "mean0_std1",
    uids: Sequence[object] | None = None,
) -> tuple[Rows, Rows]:
    """adv.grpo: A_i = (score_i - mean_g) / (std_g + eps), or score_i - mean_g (Dr. GRPO).

    Broadcast to the sample's action tokens; returns == advantages.
    """
    _check_rows("adv.grpo", masks, uids, rewards=rewards, groups=groups)
    scores = [sample_score(r, m) for r, m in zip(rewards, masks)]
    per_sample = group_normalized(
        scores,
        groups,
        epsilon=epsilon,
        norm_by_std=norm_by_std,
        std_ddof=std_ddof,
        singleton=singleton,
    )
    advantages = broadcast(per_sample, masks)
    return advantages, [list(row) for row in advantages]


def rloo(
    rewards: Rows,
    masks: Sequence[Sequence[int]],
    groups: Sequence[object],
    *,
    singleton: str = "score",
    uids: Sequence[object] | None = None,
) -> tuple[Rows, Rows]:
    """adv.rloo: A_i = score_i - mean of the *other* samples of the group.

    A group of one: ``"score"`` (verl) gives A = score, ``"zero"`` gives 0.
    Broadcast to action tokens; returns == advantages.
    """
    _check_rows("adv.rloo", masks, uids, rewards=rewards, groups=groups)
    if singleton not in ("score", "zero"):
        raise ContractError("adv.rloo", f"unknown rloo_singleton {singleton!r}")
    scores = [sample_score(r, m) for r, m in zip(rewards, masks)]
    per_sample = [0.0] * len(scores)
    for members in group_members(groups).values():
        for i in members:
            others = [scores[j] for j in members if j != i]
            if others:
                per_sample[i] = scores[i] - math.fsum(others) / len(others)
            elif singleton == "score":
                per_sample[i] = scores[i]
    advantages = broadcast(per_sample, masks)
    return advantages, [list(row) for row in advantages]


def reinforce_pp(
    rewards: Rows,
    masks: Sequence[Sequence[int]],
    *,
    gamma: float,
    whiten_degenerate: str = "zeros",
    whiten_std_eps: float | None = None,
    discount_at_holes: bool = False,
    uids: Sequence[object] | None = None,
) -> tuple[Rows, Rows]:
    """adv.reinforce_pp: G_t = r_t + gamma G_next over action tokens, then batch-whitened.

    r are the credited rewards. A mask-0 position neither ends the episode nor counts as
    a step (unless ``discount_at_holes``): G_next is the return at the next action token.
    returns = G (not whitened).
    """
    _check_rows("adv.reinforce_pp", masks, uids, rewards=rewards)
    returns = []
    for rewards_i, mask in zip(rewards, masks):
        r = credited_rewards(rewards_i, mask)
        ret = [0.0] * len(mask)
        running, following = 0.0, None
        for t in reversed(range(len(mask))):
            if mask[t]:
                running = r[t] + gamma ** _steps(t, following, discount_at_holes) * running
                ret[t] = running
                following = t
        returns.append(ret)
    advantages = whiten(
        returns,
        masks,
        degenerate=whiten_degenerate,
        clause="adv.reinforce_pp",
        std_eps=whiten_std_eps,
    )
    return advantages, returns


def reinforce_pp_baseline(
    rewards: Rows,
    masks: Sequence[Sequence[int]],
    groups: Sequence[object],
    *,
    singleton_baseline: str = "zero",
    whiten_degenerate: str = "zeros",
    whiten_std_eps: float | None = None,
    uids: Sequence[object] | None = None,
) -> tuple[Rows, Rows]:
    """adv.reinforce_pp_baseline: score_i - group mean, broadcast, then batch-whitened.

    The whitening statistics are token-weighted (every action token counts once).
    returns == advantages.
    """
    _check_rows("adv.reinforce_pp_baseline", masks, uids, rewards=rewards, groups=groups)
    scores = [sample_score(r, m) for r, m in zip(rewards, masks)]
    centred = [0.0] * len(scores)
    for members in group_members(groups).values():
        baseline = _group_baseline(scores, members, singleton_baseline, "adv.reinforce_pp_baseline")
        for i in members:
            centred[i] = scores[i] - baseline
    advantages = whiten(
        broadcast(centred, masks),
        masks,
        degenerate=whiten_degenerate,
        clause="adv.reinforce_pp_baseline",
        std_eps=whiten_std_eps,
    )
    return advantages, [list(row) for row in advantages]


def remax(
    rewards: Rows,
    masks: Sequence[Sequence[int]],
    baselines: Sequence[float],
    *,
    uids: Sequence[object] | None = None,
) -> tuple[Rows, Rows]:
    """adv.remax: returns G_t = sum of credited rewards at action tokens >= t; A_t = G_t - b_i.

    b_i is the reward of the greedy (baseline) response for the same prompt.
    """
    _check_rows("adv.remax", masks, uids, rewards=rewards, baselines=baselines)
    advantages, returns = [], []
    for rewards_i, mask, baseline in zip(rewards, masks, baselines):
        r = credited_rewards(rewards_i, mask)
        ret = [0.0] * len(mask)
        for t in range(len(mask)):
            if mask[t]:
                ret[t] = math.fsum(r[u] for u in range(t, len(mask)) if mask[u])
        returns.append(ret)
        advantages.append([g - baseline if m else 0.0 for g, m in zip(ret, mask)])
    return advantages, returns


def opo(
    rewards: Rows,
    masks: Sequence[Sequence[int]],
    groups: Sequence[object],
    *,
    singleton_baseline: str = "zero",
    uids: Sequence[object] | None = None,
) -> tuple[Rows, Rows]:
    """adv.opo: b_g = sum_j L_j score_j / sum_j L_j; A_i = score_i - b_g.

    L_j = the number of action tokens of sample j. A group of one uses baseline 0
    (``singleton_baseline="zero"``, verl) or the formula, i.e. its own score
    (``"self"``). A group whose samples have no action token has nothing to write.
    Broadcast to action tokens; returns == advantages.
    """
    _check_rows("adv.opo", masks, uids, rewards=rewards, groups=groups)
    if singleton_baseline not in ("zero", "self"):
        raise ContractError("adv.opo", f"unknown singleton_baseline {singleton_baseline!r}")
    scores = [sample_score(r, m) for r, m in zip(rewards, masks)]
    lengths = [sum(mask) for mask in masks]
    per_sample = [0.0] * len(scores)
    for members in group_members(groups).values():
        total_length = sum(lengths[j] for j in members)
        if total_length == 0:
            continue
        if len(members) == 1 and singleton_baseline == "zero":
            baseline = 0.0
        else:
            baseline = math.fsum(lengths[j] * scores[j] for j in members) / total_length
        for i in members:
            per_sample[i] = scores[i] - baseline
    advantages = broadcast(per_sample, masks)
    return advantages, [list(row) for row in advantages]


def grpo_passk(
    rewards: Rows,
    masks: Sequence[Sequence[int]],
    groups: Sequence[object],
    *,
    epsilon: float = 1e-6,
    norm_by_std: bool = True,
    std_ddof: int = 1,
    uids: Sequence[object] | None = None,
) -> tuple[Rows, Rows]:
    """adv.grpo_passk: only the best sample of each group gets s_max - s_second.

    Divided by (std_g + eps) when ``norm_by_std``. The best sample is the first with the
    maximal score; ties at the top therefore give 0. Every group needs >= 2 samples
    (a group of one has nothing to compare with): otherwise a ContractError.
    Broadcast to action tokens; returns == advantages.
    """
    uids = _check_rows("adv.grpo_passk", masks, uids, rewards=rewards, groups=groups)
    scores = [sample_score(r, m) for r, m in zip(rewards, masks)]
    per_sample = [0.0] * len(scores)
    for label, members in group_members(groups).items():
        if len(members) < 2:
            raise ContractError(
                "adv.grpo_passk",
                f"group {label!r} has {len(members)} sample; pass@k needs at least 2",
                uid=uids[members[0]],
                field="index",
            )
        group = [scores[i] for i in members]
        best = members[group.index(max(group))]
        second = max(scores[j] for j in members if j != best)
        value = scores[best] - second
        if norm_by_std:
            mean = math.fsum(group) / len(group)
            std = math.sqrt(math.fsum((s - mean) ** 2 for s in group) / (len(group) - std_ddof))
            value = value / (std + epsilon)
        per_sample[best] = value
    advantages = broadcast(per_sample, masks)
    return advantages, [list(row) for row in advantages]


def gpg_alpha(scores: Sequence[float], groups: Sequence[object], alpha_rule: str) -> float:
    """adv.gpg: alpha = B / max(B_valid, 1), B the batch size, B_valid by ``alpha_rule``:
    ``"informative"`` (GPG paper) the samples of groups with at least two distinct
    scores; ``"nonzero_score"`` (verl) the samples whose score is not 0; ``"one"``
    gives alpha = 1."""
    if alpha_rule == "informative":
        members_of = group_members(groups).values()
        valid = sum(len(ms) for ms in members_of if len({scores[j] for j in ms}) > 1)
    elif alpha_rule == "nonzero_score":
        valid = sum(1 for s in scores if s != 0)
    elif alpha_rule == "one":
        valid = len(scores)
    else:
        raise ContractError("adv.gpg", f"unknown gpg_alpha {alpha_rule!r}")
    return len(scores) / max(valid, 1)


def gpg(
    rewards: Rows,
    masks: Sequence[Sequence[int]],
    groups: Sequence[object],
    *,
    f_norm: float = 1.0,
    alpha_rule: str = "informative",
    singleton_baseline: str = "zero",
    uids: Sequence[object] | None = None,
) -> tuple[Rows, Rows]:
    """adv.gpg: A_i = alpha (score_i - mean_g) / f_norm, alpha from ``gpg_alpha``.

    A group of one uses ``singleton_baseline`` (as adv.reinforce_pp_baseline).
    Broadcast to action tokens; returns == advantages.
    """
    _check_rows("adv.gpg", masks, uids, rewards=rewards, groups=groups)
    scores = [sample_score(r, m) for r, m in zip(rewards, masks)]
    alpha = gpg_alpha(scores, groups, alpha_rule)
    per_sample = [0.0] * len(scores)
    for members in group_members(groups).values():
        baseline = _group_baseline(scores, members, singleton_baseline, "adv.gpg")
        for i in members:
            per_sample[i] = alpha * (scores[i] - baseline) / f_norm
    advantages = broadcast(per_sample, masks)
    return advantages, [list(row) for row in advantages]


def optimal_token_baseline(
    rewards: Rows,
    masks: Sequence[Sequence[int]],
    groups: Sequence[object],
    old_logprobs: Rows,
    sum_pi_squared: Rows,
    is_weights: Rows | None = None,
    *,
    epsilon: float = 1e-8,
    uids: Sequence[object] | None = None,
) -> tuple[Rows, Rows]:
    """adv.optimal_token_baseline: A_t = G_t - B_{g,t}, a per-position group baseline.

    G_t = sum of credited rewards at action tokens >= t. Per action token, w_t = 1 - 2 pi_t +
    sum_pi_squared_t with pi_t = exp(old_logprob_t), times is_weight_t^2 when given;
    W_t = sum of w over the sample's action tokens <= t. At column t of group g,
    B = sum_i G_i,t W_i,t / (sum_i W_i,t + eps) over the samples with an action token
    there; with fewer than two such samples B = 0 (a lone sample is no baseline for
    itself; groups of one therefore get B = 0). returns = G.
    """
    fields = {
        "rewards": rewards,
        "groups": groups,
        "old_logprobs": old_logprobs,
        "sum_pi_squared": sum_pi_squared,
    }
    if is_weights is not None:
        fields["is_weights"] = is_weights
    _check_rows("adv.optimal_token_baseline", masks, uids, **fields)
    returns, weights = [], []
    for i, mask in enumerate(masks):
        credited = credited_rewards(rewards[i], mask)
        ret, cum = [0.0] * len(mask), [0.0] * len(mask)
        running = 0.0
        for t in reversed(range(len(mask))):
            if mask[t]:
                running += credited[t]
                ret[t] = running
        total = 0.0
        for t in range(len(mask)):
            if mask[t]:
                w = 1.0 - 2.0 * math.exp(old_logprobs[i][t]) + sum_pi_squared[i][t]
                if is_weights is not None:
                    w *= is_weights[i][t] ** 2
                total += w
                cum[t] = total
        returns.append(ret)
        weights.append(cum)
    advantages = [[0.0] * len(mask) for mask in masks]
    for members in group_members(groups).values():
        width = max(len(masks[i]) for i in members)
        for t in range(width):
            active = [i for i in members if t < len(masks[i]) and masks[i][t]]
            baseline = 0.0
            if len(active) >= 2:
                numerator = math.fsum(returns[i][t] * weights[i][t] for i in active)
                baseline = numerator / (math.fsum(weights[i][t] for i in active) + epsilon)
            for i in active:
                advantages[i][t] = returns[i][t] - baseline
    return advantages, returns


def gdpo(
    components: Sequence[Sequence[float]],
    masks: Sequence[Sequence[int]],
    groups: Sequence[object],
    weights: Sequence[float],
    *,
    epsilon: float = 1e-6,
    norm_by_std: bool = True,
    std_ddof: int = 1,
    singleton: str = "mean0_std1",
    whiten_degenerate: str = "zeros",
    whiten_std_eps: float | None = None,
    uids: Sequence[object] | None = None,
) -> tuple[Rows, Rows]:
    """adv.gdpo: each reward component is group-normalised as in GRPO, the components are
    summed with ``weights``, broadcast to action tokens and batch-whitened.

    ``components[i][k]`` is sample i's scalar reward for component k. returns == advantages.
    """
    uids = _check_rows("adv.gdpo", masks, uids, groups=groups)
    if len(components) != len(masks):
        raise ContractError(
            "adv.gdpo",
            f"{len(components)} component rows for {len(masks)} samples",
            field="components",
        )
    for i, row in enumerate(components):
        if len(row) != len(weights):
            raise ContractError(
                "adv.gdpo",
                f"{len(row)} components, {len(weights)} weights",
                uid=uids[i],
                field="components",
            )
    per_component = []
    for k in range(len(weights)):
        per_component.append(
            group_normalized(
                [float(row[k]) for row in components],
                groups,
                epsilon=epsilon,
                norm_by_std=norm_by_std,
                std_ddof=std_ddof,
                singleton=singleton,
                clause="adv.gdpo",
            )
        )
    total = [
        math.fsum(weights[k] * per_component[k][i] for k in range(len(weights)))
        for i in range(len(masks))
    ]
    advantages = whiten(
        broadcast(total, masks),
        masks,
        degenerate=whiten_degenerate,
        clause="adv.gdpo",
        std_eps=whiten_std_eps,
    )
    return advantages, [list(row) for row in advantages]

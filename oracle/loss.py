"""Oracle for the CONTRACT area `loss` (standard library only, ragged lists, float64).

Each loss works on one sample: per-token lists (``old`` = old log-prob, ``logp`` = current
log-prob, ``adv`` = advantage) and ``mask`` (1 = action token). It returns the per-token
loss, 0.0 on non-action tokens (the contract ignores those positions), and per-token
``clipped`` flags. The matching ``*_grad`` function gives the analytic gradient
``g_s = d(sum_t w_t * l_t) / d logp_s`` for per-token weights ``w`` (a vector-Jacobian
product; the token-mean scalar uses ``w_t = mask_t / N``). Non-action tokens are never
read, so padding garbage cannot reach any result.
"""

from __future__ import annotations

import math

from rlconform.oracle.errors import ContractError, require_same_length

LOG_RATIO_CLAMP = 20.0
"""|logp - old| is clamped to this before exp (loss.ppo_clip); the gradient is 0 beyond it."""


def _exp(x: float) -> float:
    return math.exp(x) if x < 709.0 else math.inf


def _clamp(x: float, low: float | None, high: float | None) -> float:
    if low is not None and x < low:
        return low
    if high is not None and x > high:
        return high
    return x


def _inside(x: float, low: float | None, high: float | None) -> float:
    """Slope of ``_clamp`` at x: 1 inside the closed interval, 0 outside (as torch.clamp)."""
    return 1.0 if (low is None or x >= low) and (high is None or x <= high) else 0.0


def clamped_log_ratio(logp: float, old: float) -> float:
    """clamp(logp - old, -20, 20)."""
    return _clamp(logp - old, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)


def _sample_length(clause: str, uid: object, **fields: list) -> int:
    length = require_same_length(clause, uid, **fields)
    if any(m not in (0, 1) for m in fields.get("mask", ())):
        raise ContractError(clause, "mask values must be 0 or 1", uid=uid, field="mask")
    return length


def action_token_mean(rows: list[list[float]], masks: list[list[int]]) -> float:
    """sum over action tokens of the batch / number of action tokens (0.0 when there are none)."""
    values = [
        v
        for row, mask in zip(rows, masks, strict=True)
        for v, m in zip(row, mask, strict=True)
        if m
    ]
    return math.fsum(values) / len(values) if values else 0.0


def clip_fraction(flags: list[list[bool]], masks: list[list[int]]) -> float:
    """Share of the batch's action tokens whose flag is set (0.0 when there are none)."""
    return action_token_mean([[1.0 if f else 0.0 for f in row] for row in flags], masks)


# loss.ppo_clip, loss.dual_clip ----------------------------------------------------------


def _ppo_token(adv: float, ratio: float, clip_low: float, clip_high: float) -> tuple[float, bool]:
    """(max(-A r, -A clamp(r, 1 - clip_low, 1 + clip_high)), clipped term strictly larger)."""
    unclipped = -adv * ratio
    clipped = -adv * _clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    return max(unclipped, clipped), clipped > unclipped


def ppo_clip_loss(
    old: list[float],
    logp: list[float],
    adv: list[float],
    mask: list[int],
    *,
    clip_low: float,
    clip_high: float,
    dual_clip: float | None = None,
    uid: object = None,
) -> tuple[list[float], list[bool]]:
    """loss.ppo_clip (and loss.dual_clip when ``dual_clip`` = c is given).

    x = clamp(logp - old, -20, 20); r = exp(x)
    l = max(-A r, -A clamp(r, 1 - clip_low, 1 + clip_high))
    dual clip, A < 0 only: l = min(l, -A c)
    clipped = the clipped term is strictly larger (not counting the dual-clip bound).
    """
    _sample_length("loss.ppo_clip", uid, old=old, logp=logp, adv=adv, mask=mask)
    losses, flags = [], []
    for o, lp, a, m in zip(old, logp, adv, mask, strict=True):
        if not m:
            losses.append(0.0)
            flags.append(False)
            continue
        loss, clipped = _ppo_token(a, _exp(clamped_log_ratio(lp, o)), clip_low, clip_high)
        if dual_clip is not None and a < 0:
            loss = min(loss, -a * dual_clip)
        losses.append(loss)
        flags.append(clipped)
    return losses, flags


def ppo_clip_grad(
    old: list[float],
    logp: list[float],
    adv: list[float],
    mask: list[int],
    weights: list[float],
    *,
    clip_low: float,
    clip_high: float,
    dual_clip: float | None = None,
    uid: object = None,
) -> list[float]:
    """Gradient of sum_t w_t l_t (loss.ppo_clip / loss.dual_clip) w.r.t. logp.

    d l_t / d logp_t = -A r [|logp - old| <= 20] where the unclipped term is the max;
    0 where the clipped term is strictly larger or the dual-clip bound -A c is strictly lower.
    """
    _sample_length("loss.ppo_clip", uid, old=old, logp=logp, adv=adv, mask=mask, weights=weights)
    grads = []
    for o, lp, a, m, w in zip(old, logp, adv, mask, weights, strict=True):
        if not m:
            grads.append(0.0)
            continue
        ratio = _exp(clamped_log_ratio(lp, o))
        loss, clipped = _ppo_token(a, ratio, clip_low, clip_high)
        if clipped or (dual_clip is not None and a < 0 and -a * dual_clip < loss):
            grads.append(0.0)
            continue
        slope = _inside(lp - o, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
        grads.append(w * -a * ratio * slope)
    return grads


# loss.gspo ------------------------------------------------------------------------------


def gspo_sequence_log_ratio(old: list[float], logp: list[float], mask: list[int]) -> float:
    """s = sum over action tokens of (logp - old) / max(number of action tokens, 1)."""
    terms = [lp - o for o, lp, m in zip(old, logp, mask, strict=True) if m]
    return math.fsum(terms) / max(len(terms), 1)


def gspo_loss(
    old: list[float],
    logp: list[float],
    adv: list[float],
    mask: list[int],
    *,
    clip_low: float,
    clip_high: float,
    log_ratio_max: float | None = 10.0,
    uid: object = None,
) -> tuple[list[float], list[bool]]:
    """loss.gspo (group sequence policy optimisation, token form as in verl `gspo`).

    s = mean over action tokens of (logp - old); rho = exp(min(s, log_ratio_max))
    (profile ``gspo_log_ratio_max``, verl 10; None = no clamp)
    l_t = max(-A_t rho, -A_t clamp(rho, 1 - clip_low, 1 + clip_high)) on action tokens;
    no dual clip; clipped_t = the clipped term is strictly larger.
    """
    _sample_length("loss.gspo", uid, old=old, logp=logp, adv=adv, mask=mask)
    rho = _exp(_clamp(gspo_sequence_log_ratio(old, logp, mask), None, log_ratio_max))
    losses, flags = [], []
    for a, m in zip(adv, mask, strict=True):
        if not m:
            losses.append(0.0)
            flags.append(False)
            continue
        loss, clipped = _ppo_token(a, rho, clip_low, clip_high)
        losses.append(loss)
        flags.append(clipped)
    return losses, flags


def gspo_grad(
    old: list[float],
    logp: list[float],
    adv: list[float],
    mask: list[int],
    weights: list[float],
    *,
    clip_low: float,
    clip_high: float,
    log_ratio_max: float | None = 10.0,
    uid: object = None,
) -> list[float]:
    """Gradient of sum_t w_t l_t (loss.gspo) w.r.t. logp.

    Token t's ratio is exp(logp_t - sg(logp_t) + sg(s)): its value is rho and its
    derivative is rho w.r.t. its own logp_t only (no cross-token terms):
    d l_t / d logp_t = -A_t rho [s <= log_ratio_max], 0 where the clipped term is strictly larger.
    """
    _sample_length("loss.gspo", uid, old=old, logp=logp, adv=adv, mask=mask, weights=weights)
    s = gspo_sequence_log_ratio(old, logp, mask)
    rho = _exp(_clamp(s, None, log_ratio_max))
    slope = _inside(s, None, log_ratio_max)
    grads = []
    for a, m, w in zip(adv, mask, weights, strict=True):
        if not m or _ppo_token(a, rho, clip_low, clip_high)[1]:
            grads.append(0.0)
            continue
        grads.append(w * -a * rho * slope)
    return grads


# loss.gmpo ------------------------------------------------------------------------------


def _gmpo_token_log_ratio(
    logp: float, old: float, adv: float, clip_low: float, clip_high: float, clamp: float | None
) -> tuple[float, float, bool]:
    """(y, dy/dlogp, clipped): x = clamp(logp - old, +-clamp); y = min(x, clip_high) if A > 0,
    max(x, -clip_low) if A < 0, 0 if A = 0."""
    low = -clamp if clamp is not None else None
    x = _clamp(logp - old, low, clamp)
    slope = _inside(logp - old, low, clamp)
    if adv > 0:
        return min(x, clip_high), slope * _inside(x, None, clip_high), x > clip_high
    if adv < 0:
        return max(x, -clip_low), slope * _inside(x, -clip_low, None), x < -clip_low
    return 0.0, 0.0, False


def _gmpo_sequence(
    old: list[float],
    logp: list[float],
    adv: list[float],
    mask: list[int],
    clip_low: float,
    clip_high: float,
    clamp: float | None,
) -> tuple[float, float, list[float], list[bool]]:
    """(rho, A_bar, dy/dlogp per token, clipped per token) of one sample."""
    ys, slopes, flags, advs = [], [], [], []
    for o, lp, a, m in zip(old, logp, adv, mask, strict=True):
        if not m:
            slopes.append(0.0)
            flags.append(False)
            continue
        y, slope, clipped = _gmpo_token_log_ratio(lp, o, a, clip_low, clip_high, clamp)
        ys.append(y)
        advs.append(a)
        slopes.append(slope)
        flags.append(clipped)
    n = max(len(ys), 1)
    return _exp(math.fsum(ys) / n), math.fsum(advs) / n, slopes, flags


def gmpo_sequence(
    old: list[float],
    logp: list[float],
    adv: list[float],
    mask: list[int],
    *,
    clip_low: float,
    clip_high: float,
    log_ratio_clamp: float | None = LOG_RATIO_CLAMP,
) -> tuple[float, float]:
    """(rho, A_bar) of loss.gmpo for one sample (see ``gmpo_loss``)."""
    rho, adv_bar, _, _ = _gmpo_sequence(old, logp, adv, mask, clip_low, clip_high, log_ratio_clamp)
    return rho, adv_bar


def gmpo_loss(
    old: list[float],
    logp: list[float],
    adv: list[float],
    mask: list[int],
    *,
    clip_low: float,
    clip_high: float,
    log_ratio_clamp: float | None = LOG_RATIO_CLAMP,
    uid: object = None,
) -> tuple[list[float], list[bool]]:
    """loss.gmpo (geometric-mean policy optimisation, verl `geo_mean`), a sequence loss.

    x_t = clamp(logp_t - old_t, -20, 20) (profile ``gmpo_log_ratio_clamp``; verl: none)
    sign-aware clip: y_t = min(x_t, clip_high) if A_t > 0; max(x_t, -clip_low) if A_t < 0; 0 if A_t = 0
    rho = exp(mean over action tokens of y_t)   (the geometric mean of the clipped ratios)
    A_bar = mean over action tokens of A_t
    sequence loss -A_bar rho, written on every action token of the sample.
    clipped_t = the sign-aware clip is active (A_t > 0 and x_t > clip_high, or A_t < 0 and
    x_t < -clip_low).
    """
    _sample_length("loss.gmpo", uid, old=old, logp=logp, adv=adv, mask=mask)
    rho, adv_bar, _, flags = _gmpo_sequence(
        old, logp, adv, mask, clip_low, clip_high, log_ratio_clamp
    )
    return [-adv_bar * rho if m else 0.0 for m in mask], flags


def gmpo_grad(
    old: list[float],
    logp: list[float],
    adv: list[float],
    mask: list[int],
    weights: list[float],
    *,
    clip_low: float,
    clip_high: float,
    log_ratio_clamp: float | None = LOG_RATIO_CLAMP,
    uid: object = None,
) -> list[float]:
    """Gradient of sum_t w_t l_t (loss.gmpo) w.r.t. logp.

    Every action token carries the sequence loss, so with W = sum of w over action tokens and
    n action tokens: g_s = W * (-A_bar rho) * (dy_s/dlogp_s) / n, where dy/dlogp is 1 where
    neither the sign-aware clip nor the +-20 clamp is active, else 0.
    """
    _sample_length("loss.gmpo", uid, old=old, logp=logp, adv=adv, mask=mask, weights=weights)
    rho, adv_bar, slopes, _ = _gmpo_sequence(
        old, logp, adv, mask, clip_low, clip_high, log_ratio_clamp
    )
    n = max(sum(mask), 1)
    total_weight = math.fsum(w for w, m in zip(weights, mask, strict=True) if m)
    return [
        total_weight * -adv_bar * rho * slope / n if m else 0.0
        for slope, m in zip(slopes, mask, strict=True)
    ]


# loss.cispo -----------------------------------------------------------------------------


def cispo_loss(
    old: list[float],
    logp: list[float],
    adv: list[float],
    mask: list[int],
    *,
    clip_low: float,
    clip_high: float,
    uid: object = None,
) -> tuple[list[float], list[bool]]:
    """loss.cispo (clipped importance-sampling policy optimisation).

    r = exp(clamp(logp - old, -20, 20)); l_t = -sg(clamp(r, 1 - clip_low, 1 + clip_high)) A_t logp_t
    clipped_t = r outside [1 - clip_low, 1 + clip_high].
    """
    _sample_length("loss.cispo", uid, old=old, logp=logp, adv=adv, mask=mask)
    losses, flags = [], []
    for o, lp, a, m in zip(old, logp, adv, mask, strict=True):
        if not m:
            losses.append(0.0)
            flags.append(False)
            continue
        ratio = _exp(clamped_log_ratio(lp, o))
        weight = _clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
        losses.append(-weight * a * lp)
        flags.append(weight != ratio)
    return losses, flags


def cispo_grad(
    old: list[float],
    logp: list[float],
    adv: list[float],
    mask: list[int],
    weights: list[float],
    *,
    clip_low: float,
    clip_high: float,
    uid: object = None,
) -> list[float]:
    """Gradient of sum_t w_t l_t (loss.cispo): the clipped ratio is under stop-gradient, so
    d l_t / d logp_t = -clamp(r_t, 1 - clip_low, 1 + clip_high) A_t."""
    _sample_length("loss.cispo", uid, old=old, logp=logp, adv=adv, mask=mask, weights=weights)
    grads = []
    for o, lp, a, m, w in zip(old, logp, adv, mask, weights, strict=True):
        if not m:
            grads.append(0.0)
            continue
        ratio = _exp(clamped_log_ratio(lp, o))
        grads.append(w * -_clamp(ratio, 1.0 - clip_low, 1.0 + clip_high) * a)
    return grads


# loss.dppo_tv ---------------------------------------------------------------------------


def _dppo_tv_token(
    logp: float, old: float, adv: float, clip_low: float, clip_high: float, ratio_cap: float
) -> tuple[float, bool]:
    """(min(r, ratio_cap), inside the total-variation trust region)."""
    gap = _exp(logp) - _exp(old)
    inside = gap <= clip_high if adv > 0 else gap >= -clip_low
    return min(_exp(clamped_log_ratio(logp, old)), ratio_cap), inside


def dppo_tv_loss(
    old: list[float],
    logp: list[float],
    adv: list[float],
    mask: list[int],
    *,
    clip_low: float,
    clip_high: float,
    ratio_cap: float,
    uid: object = None,
) -> tuple[list[float], list[bool]]:
    """loss.dppo_tv (divergence PPO with the total-variation trust region, verl `dppo_tv`).

    p = exp(logp), p_old = exp(old), r = exp(clamp(logp - old, -20, 20))
    inside_t = (p - p_old <= clip_high) if A_t > 0, else (p - p_old >= -clip_low)
    l_t = -A_t sg(min(r, ratio_cap)) logp_t if inside_t, else 0
    clipped_t = not inside_t (the token left the trust region and is masked out).
    """
    _sample_length("loss.dppo_tv", uid, old=old, logp=logp, adv=adv, mask=mask)
    losses, flags = [], []
    for o, lp, a, m in zip(old, logp, adv, mask, strict=True):
        if not m:
            losses.append(0.0)
            flags.append(False)
            continue
        weight, inside = _dppo_tv_token(lp, o, a, clip_low, clip_high, ratio_cap)
        losses.append(-a * weight * lp if inside else 0.0)
        flags.append(not inside)
    return losses, flags


def dppo_tv_grad(
    old: list[float],
    logp: list[float],
    adv: list[float],
    mask: list[int],
    weights: list[float],
    *,
    clip_low: float,
    clip_high: float,
    ratio_cap: float,
    uid: object = None,
) -> list[float]:
    """Gradient of sum_t w_t l_t (loss.dppo_tv): the ratio weight and the trust-region mask
    are under stop-gradient, so d l_t / d logp_t = -A_t min(r_t, ratio_cap) inside, else 0."""
    _sample_length("loss.dppo_tv", uid, old=old, logp=logp, adv=adv, mask=mask, weights=weights)
    grads = []
    for o, lp, a, m, w in zip(old, logp, adv, mask, weights, strict=True):
        if not m:
            grads.append(0.0)
            continue
        weight, inside = _dppo_tv_token(lp, o, a, clip_low, clip_high, ratio_cap)
        grads.append(w * -a * weight if inside else 0.0)
    return grads


# loss.sapo ------------------------------------------------------------------------------


def _sigmoid(z: float) -> float:
    if z >= 0:
        return 1.0 / (1.0 + math.exp(-z))
    e = math.exp(z)
    return e / (1.0 + e)


def sigmoid_slope(z: float) -> float:
    """sigma(z) (1 - sigma(z)), without the cancellation of 1 - sigma for large z."""
    e = math.exp(-abs(z))
    return e / (1.0 + e) ** 2


def sapo_temperature(adv: float, tau_pos: float, tau_neg: float) -> float:
    """tau_pos where A > 0, else tau_neg (A = 0 included: its loss is 0 either way)."""
    return tau_pos if adv > 0 else tau_neg


def sapo_loss(
    old: list[float],
    logp: list[float],
    adv: list[float],
    mask: list[int],
    *,
    tau_pos: float,
    tau_neg: float,
    uid: object = None,
) -> tuple[list[float], list[bool]]:
    """loss.sapo (soft adaptive policy optimisation: a sigmoid gate instead of a clip).

    r = exp(clamp(logp - old, -20, 20)); tau = tau_pos if A_t > 0 else tau_neg
    l_t = -A_t (4 / tau) sigmoid(tau (r - 1))
    SAPO clips nothing: every ``clipped`` flag is False.
    """
    _sample_length("loss.sapo", uid, old=old, logp=logp, adv=adv, mask=mask)
    losses = []
    for o, lp, a, m in zip(old, logp, adv, mask, strict=True):
        if not m:
            losses.append(0.0)
            continue
        tau = sapo_temperature(a, tau_pos, tau_neg)
        ratio = _exp(clamped_log_ratio(lp, o))
        losses.append(-a * (4.0 / tau) * _sigmoid(tau * (ratio - 1.0)))
    return losses, [False] * len(mask)


def sapo_grad(
    old: list[float],
    logp: list[float],
    adv: list[float],
    mask: list[int],
    weights: list[float],
    *,
    tau_pos: float,
    tau_neg: float,
    uid: object = None,
) -> list[float]:
    """Gradient of sum_t w_t l_t (loss.sapo): the gate is differentiated through the ratio,
    d l_t / d logp_t = -4 A_t sigmoid'(tau (r - 1)) r inside the log-ratio clamp (so -A_t at
    r = 1, the plain policy gradient), 0 beyond it."""
    _sample_length("loss.sapo", uid, old=old, logp=logp, adv=adv, mask=mask, weights=weights)
    grads = []
    for o, lp, a, m, w in zip(old, logp, adv, mask, weights, strict=True):
        if not m:
            grads.append(0.0)
            continue
        x = lp - o
        if not _inside(x, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP):
            grads.append(0.0)
            continue
        tau = sapo_temperature(a, tau_pos, tau_neg)
        ratio = _exp(x)
        grads.append(w * -4.0 * a * sigmoid_slope(tau * (ratio - 1.0)) * ratio)
    return grads


# loss.value_clip ------------------------------------------------------------------------


def _value_token(
    v: float, ret: float, v_old: float, clip: float | None
) -> tuple[float, float, bool]:
    """((v - R)^2, (v_clip - R)^2, clipped term strictly larger); ``clip`` None: no value
    clipping (v_clip = v)."""
    if clip is None:
        plain = (v - ret) ** 2
        return plain, plain, False
    v_clip = _clamp(v, v_old - clip, v_old + clip)
    plain, clipped = (v - ret) ** 2, (v_clip - ret) ** 2
    return plain, clipped, clipped > plain


def value_clip_loss(
    vpreds: list[float],
    returns: list[float],
    values: list[float],
    mask: list[int],
    *,
    clip: float | None,
    scale: float = 0.5,
    uid: object = None,
) -> tuple[list[float], list[bool]]:
    """loss.value_clip: v_clip = clamp(v, v_old - c, v_old + c) (c None: v_clip = v);
    l = scale * max((v - R)^2, (v_clip - R)^2) (scale: profile ``value_loss_scale``, 0.5);
    clipped = (v_clip - R)^2 > (v - R)^2 strictly."""
    _sample_length("loss.value_clip", uid, vpreds=vpreds, returns=returns, values=values, mask=mask)
    losses, flags = [], []
    for v, ret, v_old, m in zip(vpreds, returns, values, mask, strict=True):
        if not m:
            losses.append(0.0)
            flags.append(False)
            continue
        plain, clipped, is_clipped = _value_token(v, ret, v_old, clip)
        losses.append(scale * max(plain, clipped))
        flags.append(is_clipped)
    return losses, flags


def value_clip_grad(
    vpreds: list[float],
    returns: list[float],
    values: list[float],
    mask: list[int],
    weights: list[float],
    *,
    clip: float,
    scale: float = 0.5,
    uid: object = None,
) -> list[float]:
    """Gradient of sum_t w_t l_t (loss.value_clip) w.r.t. vpreds: 2 scale (v - R) where the
    unclipped term is the max, 0 where the clipped term is strictly larger (v_clip is constant
    outside the band)."""
    _sample_length(
        "loss.value_clip",
        uid,
        vpreds=vpreds,
        returns=returns,
        values=values,
        mask=mask,
        weights=weights,
    )
    grads = []
    for v, ret, v_old, m, w in zip(vpreds, returns, values, mask, weights, strict=True):
        if not m or _value_token(v, ret, v_old, clip)[2]:
            grads.append(0.0)
            continue
        grads.append(w * 2.0 * scale * (v - ret))
    return grads


# loss.entropy_bonus, loss.total ---------------------------------------------------------


def actor_loss(
    pg: list[float],
    entropy: list[float],
    kl: list[float],
    mask: list[int],
    *,
    entropy_coeff: float,
    kl_coef: float,
    uid: object = None,
) -> list[float]:
    """loss.total: l_t = pg_t - entropy_coeff H_t + kl_coef KL_t on action tokens
    (loss.entropy_bonus: the minus sign rewards entropy). The terms are reported separately
    as action-token means of pg, H and KL (``action_token_mean``)."""
    _sample_length("loss.total", uid, pg=pg, entropy=entropy, kl=kl, mask=mask)
    return [
        p - entropy_coeff * h + kl_coef * k if m else 0.0
        for p, h, k, m in zip(pg, entropy, kl, mask, strict=True)
    ]


def actor_loss_grad(
    mask: list[int], weights: list[float], *, entropy_coeff: float, kl_coef: float
) -> tuple[list[float], list[float], list[float]]:
    """Gradient of sum_t w_t l_t (loss.total) w.r.t. (pg, H, KL): (w, -entropy_coeff w,
    kl_coef w) on action tokens, 0 elsewhere."""
    gate = [w if m else 0.0 for w, m in zip(weights, mask, strict=True)]
    return gate, [-entropy_coeff * g for g in gate], [kl_coef * g for g in gate]

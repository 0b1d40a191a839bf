"""Broken loss implementations must fail on their loss.* clause."""

from __future__ import annotations

import torch

from rlconform.adapters.base import with_overrides
from tests.conftest import assert_caught


def _on_actions(mask, *tensors):
    action = mask.bool()
    return [torch.where(action, t, torch.zeros_like(t)) for t in tensors]


def _ppo(adv, ratio, low, high):
    unclipped = -adv * ratio
    clipped = -adv * torch.clamp(ratio, 1 - low, 1 + high)
    return torch.maximum(unclipped, clipped), clipped > unclipped


def _share(flags, mask):
    action = mask.bool()
    return (flags & action).sum() / action.sum().clamp_min(1)


# loss.ppo_clip --------------------------------------------------------------------------


def ppo_without_log_ratio_clamp(
    target, old, lp, adv, mask, *, clip_ratio_low, clip_ratio_high, clip_ratio_c=None
):
    old, lp, adv = _on_actions(mask, old, lp, adv)
    loss, clipped = _ppo(adv, torch.exp(lp - old), clip_ratio_low, clip_ratio_high)
    return torch.where(mask.bool(), loss, 0.0), {"clipfrac": _share(clipped, mask)}


def clipfrac_counting_padding(
    target, old, lp, adv, mask, *, clip_ratio_low, clip_ratio_high, clip_ratio_c=None
):
    old0, lp0, adv0 = _on_actions(mask, old, lp, adv)
    ratio = torch.exp(torch.clamp(lp0 - old0, -20, 20))
    _, clipped = _ppo(adv0, ratio, clip_ratio_low, clip_ratio_high)
    loss, _ = target.ppo_clip_loss(
        old,
        lp,
        adv,
        mask,
        clip_ratio_low=clip_ratio_low,
        clip_ratio_high=clip_ratio_high,
        clip_ratio_c=clip_ratio_c,
    )
    return loss, {"clipfrac": clipped.float().mean()}


def test_ppo_without_log_ratio_clamp_is_caught(torchref):
    result = assert_caught(
        with_overrides(torchref, ppo_clip_loss=ppo_without_log_ratio_clamp), "loss.ppo_clip"
    )
    assert "uid=" in result.message


def test_clipfrac_counting_padding_is_caught(torchref):
    result = assert_caught(
        with_overrides(torchref, ppo_clip_loss=clipfrac_counting_padding), "loss.ppo_clip"
    )
    assert "clipfrac" in result.message


# loss.dual_clip -------------------------------------------------------------------------


def dual_clip_on_positive_advantages(
    target, old, lp, adv, mask, *, clip_ratio_low, clip_ratio_high, clip_ratio_c=None
):
    loss, metrics = target.ppo_clip_loss(
        old,
        lp,
        adv,
        mask,
        clip_ratio_low=clip_ratio_low,
        clip_ratio_high=clip_ratio_high,
        clip_ratio_c=clip_ratio_c,
    )
    if clip_ratio_c is None:
        return loss, metrics
    (adv0,) = _on_actions(mask, adv)
    return torch.minimum(loss, -adv0 * clip_ratio_c), metrics


def test_dual_clip_on_positive_advantages_is_caught(torchref):
    broken = with_overrides(torchref, ppo_clip_loss=dual_clip_on_positive_advantages)
    assert_caught(broken, "loss.dual_clip")


# loss.gspo ------------------------------------------------------------------------------


def _gspo(old, lp, adv, mask, low, high, denominator, stop_gradient=True):
    old, lp, adv = _on_actions(mask, old, lp, adv)
    sequence = (lp - old).sum(-1, keepdim=True) / denominator
    log_ratio = lp - lp.detach() + sequence.detach() if stop_gradient else sequence.expand_as(lp)
    loss, clipped = _ppo(adv, torch.exp(torch.clamp(log_ratio, max=10.0)), low, high)
    return torch.where(mask.bool(), loss, 0.0), {"clipfrac": _share(clipped, mask)}


def gspo_mean_over_padding(target, old, lp, adv, mask, *, clip_ratio_low, clip_ratio_high):
    return _gspo(old, lp, adv, mask, clip_ratio_low, clip_ratio_high, max(mask.shape[-1], 1))


def gspo_without_stop_gradient(target, old, lp, adv, mask, *, clip_ratio_low, clip_ratio_high):
    count = mask.sum(-1, keepdim=True).clamp_min(1)
    return _gspo(old, lp, adv, mask, clip_ratio_low, clip_ratio_high, count, stop_gradient=False)


def gspo_mask_by_multiplying(target, old, lp, adv, mask, *, clip_ratio_low, clip_ratio_high):
    """Sequence sum as sum((lp - old) * mask): NaN padding times 0 is NaN and leaks."""
    count = mask.sum(-1, keepdim=True).clamp_min(1)
    sequence = ((lp - old) * mask).sum(-1, keepdim=True) / count
    log_ratio = lp - lp.detach() + sequence.detach()
    (adv0,) = _on_actions(mask, adv)
    loss, clipped = _ppo(
        adv0, torch.exp(torch.clamp(log_ratio, max=10.0)), clip_ratio_low, clip_ratio_high
    )
    return torch.where(mask.bool(), loss, 0.0), {"clipfrac": _share(clipped, mask)}


def test_gspo_mean_over_padding_is_caught(torchref):
    assert_caught(with_overrides(torchref, gspo_loss=gspo_mean_over_padding), "loss.gspo")


def test_gspo_without_stop_gradient_is_caught(torchref):
    result = assert_caught(
        with_overrides(torchref, gspo_loss=gspo_without_stop_gradient), "loss.gspo"
    )
    assert "d(token-mean loss)/d log_prob" in result.message


def test_gspo_padding_leak_is_caught(torchref):
    result = assert_caught(
        with_overrides(torchref, gspo_loss=gspo_mask_by_multiplying), "loss.gspo"
    )
    assert "nan" in result.message


# loss.gmpo ------------------------------------------------------------------------------


def gmpo_symmetric_clip(target, old, lp, adv, mask, *, clip_ratio_low, clip_ratio_high):
    """Clips every log-ratio to [-low, high] whatever the sign of A."""
    old, lp, adv = _on_actions(mask, old, lp, adv)
    clipped_log_ratio = torch.clamp(
        torch.clamp(lp - old, -20, 20), -clip_ratio_low, clip_ratio_high
    )
    count = mask.sum(-1, keepdim=True).clamp_min(1)
    ratio = torch.exp(
        torch.where(mask.bool(), clipped_log_ratio, 0.0).sum(-1, keepdim=True) / count
    )
    loss = torch.where(mask.bool(), -(adv.sum(-1, keepdim=True) / count) * ratio, 0.0)
    _, metrics = target.gmpo_loss(
        old, lp, adv, mask, clip_ratio_low=clip_ratio_low, clip_ratio_high=clip_ratio_high
    )
    return loss, metrics


def test_gmpo_symmetric_clip_is_caught(torchref):
    assert_caught(with_overrides(torchref, gmpo_loss=gmpo_symmetric_clip), "loss.gmpo")


# loss.cispo -----------------------------------------------------------------------------


def cispo_without_stop_gradient(target, old, lp, adv, mask, *, clip_ratio_low, clip_ratio_high):
    """Forward-identical to CISPO, but the clipped ratio keeps its gradient."""
    old0, lp0, adv0 = _on_actions(mask, old, lp, adv)
    ratio = torch.exp(torch.clamp(lp0 - old0, -20, 20))
    weight = torch.clamp(ratio, 1 - clip_ratio_low, 1 + clip_ratio_high)
    loss = torch.where(mask.bool(), -weight * adv0 * lp0, 0.0)
    _, metrics = target.cispo_loss(
        old, lp, adv, mask, clip_ratio_low=clip_ratio_low, clip_ratio_high=clip_ratio_high
    )
    return loss, metrics


def cispo_reads_padding(target, old, lp, adv, mask, *, clip_ratio_low, clip_ratio_high):
    """Masks only the output: d/dlp at padding is 0 * (-w A) = NaN when A is NaN there."""
    ratio = torch.exp(torch.clamp(lp - old, -20, 20)).detach()
    weight = torch.clamp(ratio, 1 - clip_ratio_low, 1 + clip_ratio_high)
    loss = torch.where(mask.bool(), -weight * adv * lp, 0.0)
    return loss, {"clipfrac": _share(weight != ratio, mask)}


def test_cispo_without_stop_gradient_is_caught(torchref):
    result = assert_caught(
        with_overrides(torchref, cispo_loss=cispo_without_stop_gradient), "loss.cispo"
    )
    assert "d(token-mean loss)/d log_prob" in result.message


def test_cispo_reading_padding_is_caught(torchref):
    result = assert_caught(with_overrides(torchref, cispo_loss=cispo_reads_padding), "loss.cispo")
    assert "padding" in result.message


# loss.sapo ------------------------------------------------------------------------------


def _sapo(lp0, old0, adv0, tau_pos, tau_neg, *, clamp=True, detach_ratio=False):
    log_ratio = torch.clamp(lp0 - old0, -20, 20) if clamp else lp0 - old0
    ratio = torch.exp(log_ratio)
    if detach_ratio:
        ratio = ratio.detach()
    tau = torch.where(adv0 > 0, tau_pos, tau_neg).to(lp0.dtype)
    return -adv0 * (4.0 / tau) * torch.sigmoid(tau * (ratio - 1.0))


def sapo_one_temperature(target, old, lp, adv, mask, *, tau_pos, tau_neg):
    """tau_pos on every token: the negative-advantage gate keeps the wrong temperature."""
    old0, lp0, adv0 = _on_actions(mask, old, lp, adv)
    return torch.where(mask.bool(), _sapo(lp0, old0, adv0, tau_pos, tau_pos), 0.0), {}


def sapo_without_log_ratio_clamp(target, old, lp, adv, mask, *, tau_pos, tau_neg):
    """exp(logp - old) unclamped (as AReaL's and TRL's SAPO): at a log-ratio beyond exp's
    range r = inf, the gate saturates to the same loss and its gradient is 0 * inf = NaN."""
    old0, lp0, adv0 = _on_actions(mask, old, lp, adv)
    loss = _sapo(lp0, old0, adv0, tau_pos, tau_neg, clamp=False)
    return torch.where(mask.bool(), loss, 0.0), {}


def sapo_gate_under_stop_gradient(target, old, lp, adv, mask, *, tau_pos, tau_neg):
    """The gate as a stop-gradient weight on log_prob (CISPO's construction), corrected to
    the same forward value: the gradient is -A (4 / tau) sigmoid, not the gate's slope."""
    old0, lp0, adv0 = _on_actions(mask, old, lp, adv)
    loss = _sapo(lp0, old0, adv0, tau_pos, tau_neg, detach_ratio=True)
    weighted = loss.detach() * lp0 - (loss.detach() * lp0).detach() + loss.detach()
    return torch.where(mask.bool(), weighted, 0.0), {}


def sapo_sequence_loss(target, old, lp, adv, mask, *, tau_pos, tau_neg):
    """One loss per sequence (B, 1) where the contract's op returns the per-token loss."""
    loss, metrics = target.sapo_loss(old, lp, adv, mask, tau_pos=tau_pos, tau_neg=tau_neg)
    return loss.sum(dim=1, keepdim=True), metrics


def sapo_detached_loss(target, old, lp, adv, mask, *, tau_pos, tau_neg):
    loss, metrics = target.sapo_loss(old, lp, adv, mask, tau_pos=tau_pos, tau_neg=tau_neg)
    return loss.detach(), metrics


def _sapo_fails(torchref, mutant, check):
    result = assert_caught(with_overrides(torchref, sapo_loss=mutant), "loss.sapo")
    assert result.check == check, result.message
    return result


def test_sapo_with_one_temperature_is_caught(torchref):
    _sapo_fails(torchref, sapo_one_temperature, "loss")


def test_sapo_without_the_log_ratio_clamp_is_caught(torchref):
    result = _sapo_fails(torchref, sapo_without_log_ratio_clamp, "grad")
    assert "d(token-mean loss)/d log_prob" in result.message


def test_sapo_with_the_gate_under_stop_gradient_is_caught(torchref):
    _sapo_fails(torchref, sapo_gate_under_stop_gradient, "grad")


def test_sapo_returning_a_loss_per_sequence_is_caught(torchref):
    _sapo_fails(torchref, sapo_sequence_loss, "shape")


def test_sapo_without_a_graph_is_caught(torchref):
    _sapo_fails(torchref, sapo_detached_loss, "differentiable")


# loss.dppo_tv ---------------------------------------------------------------------------


def dppo_trust_region_on_ratio(
    target, old, lp, adv, mask, *, clip_ratio_low, clip_ratio_high, clip_ratio_c
):
    """Uses the PPO ratio band instead of the probability gap p - p_old."""
    old, lp, adv = _on_actions(mask, old, lp, adv)
    ratio = torch.exp(torch.clamp(lp - old, -20, 20))
    inside = torch.where(adv > 0, ratio - 1 <= clip_ratio_high, ratio - 1 >= -clip_ratio_low)
    loss = torch.where(
        mask.bool() & inside, -adv * torch.clamp(ratio, max=clip_ratio_c).detach() * lp, 0.0
    )
    return loss, {"clipfrac": _share(~inside, mask)}


def test_dppo_trust_region_on_ratio_is_caught(torchref):
    assert_caught(with_overrides(torchref, dppo_tv_loss=dppo_trust_region_on_ratio), "loss.dppo_tv")


# loss.value_clip ------------------------------------------------------------------------


def value_clip_takes_min(target, vpreds, returns, values, mask, *, cliprange_value):
    v, ret, v_old = _on_actions(mask, vpreds, returns, values)
    v_clip = torch.clamp(v, v_old - cliprange_value, v_old + cliprange_value)
    plain, clipped = (v - ret) ** 2, (v_clip - ret) ** 2
    loss = torch.where(mask.bool(), 0.5 * torch.minimum(plain, clipped), 0.0)
    return loss, {"vf_clipfrac": _share(clipped > plain, mask)}


def test_value_clip_taking_min_is_caught(torchref):
    assert_caught(with_overrides(torchref, value_loss=value_clip_takes_min), "loss.value_clip")


# loss.entropy_bonus, loss.total ---------------------------------------------------------


def entropy_bonus_wrong_sign(target, pg, entropy, kl, mask, *, entropy_coeff, kl_coef):
    return target.actor_loss(pg, entropy, kl, mask, entropy_coeff=-entropy_coeff, kl_coef=kl_coef)


def kl_term_detached(target, pg, entropy, kl, mask, *, entropy_coeff, kl_coef):
    return target.actor_loss(
        pg, entropy, kl.detach(), mask, entropy_coeff=entropy_coeff, kl_coef=kl_coef
    )


def test_entropy_bonus_wrong_sign_is_caught(torchref):
    assert_caught(
        with_overrides(torchref, actor_loss=entropy_bonus_wrong_sign), "loss.entropy_bonus"
    )


def test_kl_term_detached_is_caught(torchref):
    result = assert_caught(with_overrides(torchref, actor_loss=kl_term_detached), "loss.total")
    assert "d kl" in result.message


def value_loss_without_clipfrac(self, vpreds, returns, values, mask, *, cliprange_value):
    loss, _ = self.value_loss(vpreds, returns, values, mask, cliprange_value=cliprange_value)
    return loss, {"vf_clipfrac": None}


def test_a_metric_the_framework_does_not_compute_is_not_a_break():
    """loss.value_clip: vf_clipfrac None (OpenRLHF computes none) skips the clipfrac check
    only; the loss checks still run (a wrong loss still fails)."""
    from rlconform.adapters.torchref import TorchRef
    from tests.conftest import certify_one

    plain = with_overrides(TorchRef(), "no-vf-clipfrac", value_loss=value_loss_without_clipfrac)
    assert certify_one(plain, "loss.value_clip").status == "pass"

    def doubled(self, *args, **kwargs):
        loss, metrics = value_loss_without_clipfrac(self, *args, **kwargs)
        return loss * 2, metrics

    broken = with_overrides(TorchRef(), "no-vf-clipfrac-doubled", value_loss=doubled)
    result = certify_one(broken, "loss.value_clip")
    assert result.status == "fail" and result.check == "loss", result.message

"""Broken OpenRLHF functions, planted into the module the adapter calls, must fail the
clause they break: on the stand-in always, and on the real OpenRLHF when it is importable
(with its shipped baseline in force, so a plant is caught as a new failure)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from rlconform.adapters.registry import load_target
from rlconform.conformance.profiles import get_run_profile
from rlconform.conformance.registry import get
from rlconform.conformance.runner import run_clause

STANDIN = Path(__file__).parent / "standin"


def _real_installed() -> bool:
    try:
        return importlib.util.find_spec("openrlhf") is not None
    except (ImportError, ValueError):
        return False


TARGETS = ["standin"] + (
    ["real"]
    if _real_installed()
    else [pytest.param("real", marks=pytest.mark.skip(reason="OpenRLHF is not installed"))]
)


@pytest.fixture(params=TARGETS)
def target(request):
    if request.param == "standin":
        loaded = load_target("openrlhf", framework_path=str(STANDIN))
        loaded.deviations = {}
        return loaded
    return load_target("openrlhf")


def _status(target, clause_id: str) -> tuple[str, str]:
    result = run_clause(get(clause_id), target, get_run_profile("ci"))
    return result.status, result.message


def _broken_reward_last_column(r, kl_coef, kl, action_mask=None, reward_clip_range=None):
    """compute_reward that writes r into the last column of the padded tensor (the
    action mask ignored): the reward lands in padding for every shorter response."""
    out = torch.zeros_like(kl)
    out[:, -1:] = r.to(kl.dtype).unsqueeze(-1)
    return out - max(kl_coef, 0.0) * kl


def _broken_token_mean_over_padding(
    loss, loss_mask, token_level_loss=True, dp_size=1, batch_num_tokens=None, global_batch_size=None
):
    """aggregate_loss whose token mean divides by every element of the padded tensor."""
    keep = loss_mask.bool()
    total = torch.where(keep, loss, torch.zeros_like(loss)).sum()
    return total / max(loss_mask.numel(), 1) * dp_size


class _UnclippedAdaptiveKL:
    """AdaptiveKLController without the +-0.2 clip of the proportional error."""

    def __init__(self, init_kl_coef, target, horizon):
        self.value, self.target, self.horizon = init_kl_coef, target, horizon

    def update(self, current, n_steps):
        self.value *= 1 + (current / self.target - 1) * n_steps / self.horizon


def _broken_k3_sign(
    log_probs, log_probs_base, log_probs_old=None, kl_estimator="k1", unbiased_gradient=False
):
    """compute_approx_kl whose k3 uses logp - ref where ref - logp belongs."""
    x = log_probs.float() - log_probs_base.float()
    if kl_estimator == "k3":
        return (x.clamp(max=10).exp() - 1 - x).clamp(-10, 10)
    return x.clamp(-10, 10) if kl_estimator == "k1" else (x * x / 2).clamp(-10, 10)


def _entropy_without_the_expectation(logits):
    """compute_entropy that forgets the sum(softmax(x) * x) term (logsumexp alone)."""
    return torch.logsumexp(logits, dim=-1)


PLANTS = [
    ("utils", "compute_reward", _broken_reward_last_column, "reward.place_last"),
    ("loss", "aggregate_loss", _broken_token_mean_over_padding, "agg.token_mean"),
    ("kl_controller", "AdaptiveKLController", _UnclippedAdaptiveKL, "kl.adaptive_controller"),
    ("utils", "compute_entropy", _entropy_without_the_expectation, "entropy.from_logits"),
]


@pytest.mark.parametrize("module, name, broken, clause_id", PLANTS, ids=[p[3] for p in PLANTS])
def test_planted_break_fails_its_clause(target, monkeypatch, module, name, broken, clause_id):
    before = _status(target, clause_id)
    assert before[0] in ("pass", "deviation"), before
    monkeypatch.setattr(getattr(target.runtime, module), name, broken)
    status, message = _status(target, clause_id)
    assert status == "fail", (clause_id, status, message)


def test_planted_k3_sign_fails_estimators_on_standin(monkeypatch):
    standin = load_target("openrlhf", framework_path=str(STANDIN))
    standin.deviations = {}
    assert _status(standin, "kl.estimators")[0] == "pass"
    monkeypatch.setattr(standin.runtime.utils, "compute_approx_kl", _broken_k3_sign)
    assert _status(standin, "kl.estimators")[0] == "fail"

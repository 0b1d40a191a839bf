"""``UnslothGRPOConfig``'s resolution of the fields a user sets (``adapters/unsloth/config.py``),
read off ``unsloth/models/rl.py`` 2026.10.9; pure, so it runs without unsloth installed."""

from __future__ import annotations

from rlconform.adapters.unsloth.config import resolve


def test_unset_loss_type_is_dapo_without_the_dapo_rewrites():
    out = resolve({})
    assert out["loss_type"] == "dapo" and out["beta"] == 0.0
    assert out["mask_truncated_completions"] is False and "epsilon_high" not in out
    assert out["vllm_importance_sampling_correction"] is False


def test_beta_defaults_to_a_kl_term_outside_dapo_and_dr_grpo():
    assert resolve({"loss_type": "bnpo"})["beta"] == 0.001
    assert resolve({"loss_type": "grpo"})["beta"] == 0.001
    assert resolve({"loss_type": "dr_grpo"})["beta"] == 0.0
    assert resolve({"loss_type": "grpo", "beta": 0.04})["beta"] == 0.04


def test_dr_grpo_turns_group_scaling_off_but_keeps_an_explicit_none():
    assert resolve({"loss_type": "dr_grpo"})["scale_rewards"] == "none"
    assert resolve({"loss_type": "dr_grpo", "scale_rewards": "group"})["scale_rewards"] == "none"
    assert resolve({"loss_type": "dr_grpo", "scale_rewards": "batch"})["scale_rewards"] == "batch"


def test_explicit_dapo_masks_truncated_completions_and_raises_epsilon_high():
    out = resolve({"loss_type": "DAPO"})
    assert out["loss_type"] == "dapo"
    assert out["mask_truncated_completions"] is True and out["epsilon_high"] == 0.28
    kept = resolve({"loss_type": "dapo", "epsilon_high": 0.2, "mask_truncated_completions": False})
    assert kept["epsilon_high"] == 0.2 and kept["mask_truncated_completions"] is False


def test_cispo_caps_at_five_unless_set():
    assert resolve({"loss_type": "cispo"})["epsilon_high"] == 5.0
    assert resolve({"loss_type": "cispo", "epsilon_high": 4.0})["epsilon_high"] == 4.0


def test_the_fields_given_are_not_mutated():
    fields = {"loss_type": "dapo"}
    resolve(fields)
    assert fields == {"loss_type": "dapo"}

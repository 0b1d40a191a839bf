"""verl's training step (CONTRACT step): configs read from verl's own file, and each finding
the shipped baseline declares for the step reproduced by hand through the v1 trainer's real
code, next to the oracle (which torchref matches: tests/step)."""

from __future__ import annotations

import json
import os

import pytest
import torch

pytest.importorskip("verl")

from rlconform.adapters.base import SetupError  # noqa: E402
from rlconform.adapters.registry import load_target  # noqa: E402
from rlconform.adapters.verl import step as verl_step  # noqa: E402
from rlconform.conformance.clauses import step as step_clauses  # noqa: E402
from rlconform.conformance.cli import main  # noqa: E402
from rlconform.oracle import step as oracle  # noqa: E402
from tests.step import by_hand as h  # noqa: E402

V1 = load_target("verl").release.line == "0.9"
pytestmark = pytest.mark.skipif(not V1, reason="the step is bound on the 0.9.x v1 trainer")


class _Layout:
    dtype = torch.float32
    device = "cpu"


@pytest.fixture(scope="module")
def verl():
    return load_target("verl")


def _configs(target):
    return {c.name: c for c in target.trainer_configs()}


def _sample(uid, group, mask, reward, delta=0.0):
    return h.sample(uid, mask, reward, group, delta=delta, entropy=[0.5] * len(mask))


def _case(samples, shards):
    return {"samples": samples, "shards": shards, "pad_value": 0.0, "extra_pad": 0}


def _run(target, config, case):
    batch = step_clauses.build_batch(_Layout, case, config.resolved["critic"])
    return target.train_step(batch, config), batch


def test_default_config_is_verls_shipped_file(verl):
    import verl as verl_package
    from omegaconf import OmegaConf

    path = os.path.join(
        os.path.dirname(verl_package.__file__), "trainer", "config", "_generated_ppo_trainer.yaml"
    )
    shipped = OmegaConf.load(path)
    settings = _configs(verl)["default"].resolved
    actor = shipped.actor_rollout_ref.actor
    assert settings["estimator"] == shipped.algorithm.adv_estimator == "gae"
    assert settings["critic"] is True  # need_critic: critic.enable unset, estimator gae
    assert settings["clip_ratio_c"] == actor.clip_ratio_c
    assert settings["loss_agg_mode"] == actor.loss_agg_mode
    assert settings["kl_loss"] is bool(actor.use_kl_loss)
    assert settings["cliprange_value"] == shipped.critic.cliprange_value


def test_an_override_of_a_key_verl_lacks_is_a_setup_error():
    with pytest.raises(SetupError, match="no key 'algorithm.no_such_option'"):
        verl_step._with({"algorithm.no_such_option": 1})


def test_gae_drops_a_score_placed_on_a_trailing_tool_token(verl):
    """Declared (step.update advantages/returns, hole_reward): AgentLoopOutput.as_dict puts
    the score on the last response token; GAE skips mask-0 tokens, so it is lost."""
    case = _case([_sample("s0", "g0", [1, 1], 0.0), _sample("s1", "g0", [1, 0], 1.0)], [2])
    config = _configs(verl)["default"]
    output, _ = _run(verl, config, case)
    assert output.stages["token_rewards"][1].tolist() == [0.0, 1.0]
    assert output.stages["returns"][1, 0].item() == 0.0
    rewards = oracle.token_rewards(case["samples"], config.resolved, {}, 0.0)
    _, returns = oracle.advantages(rewards, case["samples"], config.resolved, {})
    assert returns[1][0] == 1.0


def test_seq_mean_counts_a_sample_without_an_action_token(verl):
    """Declared (step.update loss, actionless_sample): the engine's global_batch_size is every
    row, so one actionless sample of four scales the seq-mean loss by 3/4."""
    samples = [_sample(f"s{i}", "g0", [1], float(i % 2)) for i in range(3)]
    samples.append(_sample("s3", "g0", [0], 0.0))
    case = _case(samples, [4])
    config = _configs(verl)["reinforce_pp_baseline_token_sum"]
    output, batch = _run(verl, config, case)
    advantage = output.stages["advantages"][0, 0].item()
    assert advantage != 0.0
    # ratio 1 at delta 0: d loss / d logp = -A / (number of sequences)
    gradient = batch.log_probs.grad[0, 0].item()
    assert gradient == pytest.approx(-advantage / 4, rel=1e-5)
    assert gradient != pytest.approx(-advantage / 3, rel=1e-3)


def test_dr_grpo_divides_by_each_micro_batchs_own_width(verl):
    """Declared (step.update loss under dr_grpo): without loss_scale_factor the constant is
    loss_mask.shape[-1] of each micro-batch, so the same batch split differently trains
    differently."""
    samples = [
        _sample("s0", "g0", [1], 1.0, delta=0.1),
        _sample("s1", "g0", [1, 1, 1], 0.0, delta=0.1),
    ]
    config = _configs(verl)["dr_grpo"]
    whole, _ = _run(verl, config, _case(samples, [2]))
    split, _ = _run(verl, config, _case(samples, [1, 1]))
    assert whole.loss != pytest.approx(split.loss, rel=1e-3)


def test_logged_clip_fraction_is_a_mean_over_micro_batches(verl):
    """Declared (step.metrics clip_fraction, uneven_shards): actor/pg_clipfrac averages the
    micro-batches' own fractions instead of counting tokens over the mini-batch."""
    samples = [
        _sample("s0", "g0", [1, 1, 1], 1.0, delta=0.5),  # ratio e^0.5: clipped (A > 0)
        _sample("s1", "g0", [1], 0.0, delta=0.0),  # ratio 1: not clipped
    ]
    config = _configs(verl)["grpo_kl_loss"]
    output, _ = _run(verl, config, _case(samples, [1, 1]))
    assert output.metrics["actor/pg_clipfrac"] == pytest.approx(0.5)  # (1 + 0) / 2
    assert 3 / 4 != pytest.approx(0.5)  # the token count over the mini-batch: 3 of 4


@pytest.fixture
def local_token_mean(monkeypatch):
    """A plant in real verl: ppo_loss normalises by its micro-batch's own token count (the
    classic local-denominator bug), which only the chain shows."""
    from verl.workers.utils import losses

    original = losses.ppo_loss

    def local(config, model_output, data, dp_group=None):
        from verl.utils import tensordict_utils as tu

        tu.assign_non_tensor(data, batch_num_tokens=int(data["response_mask"].values().sum()))
        return original(config, model_output, data, dp_group)

    monkeypatch.setattr(losses, "ppo_loss", local)


def test_a_local_token_mean_in_verl_fails_the_step(local_token_mean, tmp_path):
    out = tmp_path / "r.json"
    code = main(
        [
            "certify",
            "verl",
            "--only",
            "step.update",
            "--trainer-config",
            "default",
            "--json",
            str(out),
        ]
    )
    result = json.loads(out.read_text())["clauses"][0]
    assert code == 1, result
    assert result["status"] == "fail" and result["check"] in ("loss", "gradient"), result
    assert result["failure_consequence"] == "update"


def test_operations_run_under_options_no_step_config_covers_are_unbound_not_unreached(verl):
    """The v1 trainer runs GSPO, REMAX, rollout correction, ... under named options the step
    configs do not set: those operations are the target's ``step_unbound_ops`` (findings
    unmeasured, not unreached); an operation bound on the v0 trainer path is not."""
    unbound = verl.step_unbound_ops
    assert unbound["gspo_loss"].endswith("loss_mode=gspo")
    assert unbound["advantage_remax"] == "algorithm.adv_estimator=remax"
    assert "rollout_correction" in unbound["tis_weights"]
    for op in unbound:
        assert verl.bindings[op]["path"].split()[0] == "v1", (op, verl.bindings[op]["path"])
    configured = set().union(*(c.ops for c in verl.trainer_configs()))
    assert not set(unbound) & configured, set(unbound) & configured

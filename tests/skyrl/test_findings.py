"""Every published SkyRL finding, reproduced by hand against SkyRL's real functions (in
SkyRL's own right-aligned layout, the tensors the trainer holds) and through the adapter;
the correct value is worked out in the comments and is what the oracle gives on the same
case."""

from __future__ import annotations

import math

import pytest
import torch

from rlconform.oracle import advantage as oracle
from tests.skyrl.conftest import needs_skyrl

pytestmark = needs_skyrl


def test_whitening_counts_tool_tokens(skyrl):
    """adv.reinforce_pp / adv.gae, mask_holes. Samples s0 [a] and s1 [a] scored 0, s2
    [tool, a] scored 1, gamma 1. Returns: 0, 0 and 1 at both of s2's tokens (the return
    passes through the tool token). Over the action tokens {0, 0, 1}: mean 1/3, unbiased
    variance 1/3, so s0's advantage is (0 - 1/3) / sqrt(1/3) = -0.5774. SkyRL whitens over
    response_mask, which counts s2's tool token: {0, 0, 1, 1}, mean 1/2, variance 1/3,
    (0 - 1/2) / sqrt(1/3) = -0.8660."""
    ppo = skyrl.runtime.ppo_utils
    rewards = torch.tensor([[0.0, 0.0], [0.0, 0.0], [0.0, 1.0]])  # right-aligned
    response_mask = torch.tensor([[0, 1], [0, 1], [1, 1]])  # 1 on the tool token
    advantages, _ = ppo.compute_reinforce_plus_plus_outcome_advantage(
        rewards, response_mask, gamma=1.0
    )
    assert advantages[0, 1].item() == pytest.approx(-0.5 / math.sqrt(1 / 3), abs=1e-5)
    through, _ = skyrl.advantage_reinforce_pp(
        torch.tensor([[0.0, 0.0], [0.0, 0.0], [0.0, 1.0]]),
        torch.tensor([[1, 0], [1, 0], [0, 1]]),
        gamma=1.0,
    )
    assert through[0, 0].item() == pytest.approx(-0.8660, abs=1e-4)
    expected, _ = oracle.reinforce_pp(
        [[0.0], [0.0], [0.0, 1.0]], [[1], [1], [0, 1]], gamma=1.0, whiten_degenerate="raise"
    )
    assert expected[0][0] == pytest.approx(
        -(1 / 3) / math.sqrt(1 / 3), abs=1e-6
    )  # -0.5774 (eps 1e-8)


def test_gae_steps_on_the_tool_tokens_own_value(skyrl):
    """adv.gae, mask_holes. One sample [a, tool, a], values [0, 5, 0], reward 1 at the
    end, gamma 1, lambda 0.5. Skipping the tool token (the contract, discount_at_holes):
    A_2 = 1; A_0 = (0 + V_2 - V_0) + (gamma lambda)^2 A_2 = 0.25, return_0 = 0.25. SkyRL
    steps on the tool token with its own (untrained) value: A_1 = (0 + 0 - 5) + 0.5 = -4.5,
    A_0 = (0 + 5 - 0) + 0.5 * -4.5 = 2.75, return_0 = 2.75."""
    ppo = skyrl.runtime.ppo_utils
    _, returns = ppo.compute_gae_advantage_return(
        torch.tensor([[0.0, 0.0, 1.0]]),
        torch.tensor([[0.0, 5.0, 0.0]]),
        torch.tensor([[1, 1, 1]]),
        gamma=1.0,
        lambd=0.5,
    )
    assert returns[0, 0].item() == pytest.approx(2.75)
    _, expected = oracle.gae(
        [[0.0, 0.0, 1.0]],
        [[0.0, 5.0, 0.0]],
        [[1, 0, 1]],
        [True],
        [0.0],
        gamma=1.0,
        lam=0.5,
        discount_at_holes=True,
    )
    assert expected[0][0] == pytest.approx(0.25)


def test_cispo_raises_on_a_micro_batch_without_tokens(skyrl):
    """loss.cispo, no_samples: the ratio_max metric is ratio.max() over no element."""
    empty = torch.zeros((0, 0))
    with pytest.raises(RuntimeError, match="numel"):
        skyrl.cispo_loss(
            empty, empty, empty, empty.long(), clip_ratio_low=0.2, clip_ratio_high=0.28
        )


def test_kl_in_reward_raises_on_an_empty_batch(skyrl):
    """kl.in_reward, no_samples / zero_width: torch.max(kl.abs(), dim=-1) of the kl_max
    metric over a dimension of size 0."""
    empty = torch.zeros((0, 0))
    with pytest.raises(IndexError, match="non-zero size"):
        skyrl.apply_kl_in_reward(empty, empty, empty, empty.long(), 0.1, "kl")


def test_gspo_sequence_ratio_takes_nan_from_padding(skyrl):
    """loss.gspo, padding_nonfinite: one sample [a] with log-ratio 0 and a NaN log-prob
    in its padding column. Its sequence log-ratio is 0, so its loss is -A = -1; SkyRL's
    masked_mean (sum(x * mask) / n) carries 0 * NaN = NaN into it."""
    nan = float("nan")
    loss, _ = skyrl.gspo_loss(
        torch.tensor([[-1.0, nan]]),
        torch.tensor([[-1.0, nan]]),
        torch.tensor([[1.0, 0.0]]),
        torch.tensor([[1, 0]]),
        clip_ratio_low=0.2,
        clip_ratio_high=0.2,
    )
    assert math.isnan(loss[0, 0].item())


def test_critic_gradient_takes_nan_from_padding(skyrl):
    """loss.value_clip, padding_nonfinite: ppo_critic_loss masks by multiplication, so a
    NaN prediction in padding has gradient 0 * NaN = NaN (0 in the contract)."""
    nan = float("nan")
    vpreds = torch.tensor([[1.0, nan]], requires_grad=True)
    loss, _ = skyrl.value_loss(
        vpreds,
        torch.tensor([[1.5, nan]]),
        torch.tensor([[1.0, nan]]),
        torch.tensor([[1, 0]]),
        cliprange_value=0.2,
    )
    (loss * torch.tensor([[1.0, 0.0]])).sum().backward()
    assert math.isnan(vpreds.grad[0, 1].item())


def test_sequence_mean_counts_rows_without_loss_tokens(skyrl):
    """agg.seq_mean_token_mean / seq_mean_token_sum_norm, actionless_sample. Rows [1, 2, 3]
    and [5, 6] and a fully masked row: the per-sequence means are 2 and 5.5, so the
    sequence mean over the two sequences with tokens is 3.75 (token sums 6 and 11: the
    Dr. GRPO form with length 10 is 17 / 20 = 0.85). SkyRL's pre-scaling divides by the
    mini-batch's 3 rows: 2.5 and 17 / 30."""
    ppo = skyrl.runtime.ppo_utils
    losses = torch.tensor([[1.0, 2.0, 3.0], [0.0, 5.0, 6.0], [0.0, 0.0, 0.0]])  # right-aligned
    mask = torch.tensor([[1.0, 1.0, 1.0], [0.0, 1.0, 1.0], [0.0, 0.0, 0.0]])
    for reduction, expected in (("sequence_mean", 2.5), ("seq_mean_token_sum_norm", 17 / 30)):
        scale = ppo.apply_loss_reduction_to_advantages_minibatch(
            torch.ones_like(losses), mask, reduction, micro_batch_size=3, max_seq_len=10
        )
        assert (losses * scale * mask).sum().item() == pytest.approx(expected, rel=1e-6)
    canonical = torch.tensor([[1.0, 2.0, 3.0], [5.0, 6.0, 0.0], [7.0, 7.0, 7.0]])
    action = torch.tensor([[1, 1, 1], [1, 1, 0], [0, 0, 0]])
    got = skyrl.agg_loss(canonical, action, "seq-mean-token-mean")
    assert got.item() == pytest.approx(2.5, rel=1e-6)
    from rlconform.oracle import aggregate

    rows = [[1.0, 2.0, 3.0], [5.0, 6.0], [7.0]]
    assert aggregate.aggregate(rows, [[1, 1, 1], [1, 1], [0]], "seq-mean-token-mean") == 3.75

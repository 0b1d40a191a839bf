"""The offpolicy oracle against hand-computed numbers (CONTRACT offpolicy.*)."""

from __future__ import annotations

import pytest

from rlconform.oracle import offpolicy as op
from rlconform.oracle.errors import ContractError

# old - rollout = [1.0, -2.75, 0.0, (hole) 99.5]: ratios e, 0.0639, 1, (ignored).
OLD = [-0.5, -3.0, -1.0, -0.5]
ROLLOUT = [-1.5, -0.25, -1.0, -100.0]
MASK = [1, 1, 1, 0]


def test_tis_clamps():
    weights = op.tis_weights(OLD, ROLLOUT, MASK, low=0.0, high=2.0)
    assert weights == pytest.approx([2.0, 0.0639279, 1.0, 0.0])
    assert op.tis_weights(OLD, ROLLOUT, MASK, low=0.5, high=None)[:2] == pytest.approx(
        [2.7182818, 0.5]
    )


def test_icepop_rejects_outside_the_band():
    assert op.icepop_weights(OLD, ROLLOUT, MASK, low=0.5, high=2.0) == [0.0, 0.0, 1.0, 0.0]
    assert op.icepop_weights(OLD, ROLLOUT, MASK, low=0.05, high=3.0) == pytest.approx(
        [2.7182818, 0.0639279, 1.0, 0.0]
    )
    # Inclusive bounds: [1, 1] keeps a ratio of exactly 1.
    assert op.icepop_weights(OLD, ROLLOUT, MASK, low=1.0, high=1.0) == [0.0, 0.0, 1.0, 0.0]


def test_opsm():
    logp, old = [-2.0, -1.0, -0.5], [-1.0, -0.5, -0.5]  # seq_kl = 1.5 / 3 = 0.5
    assert op.opsm_keep(logp, old, [1, 1, 1], -1.0, delta=0.4) == [0, 0, 0]
    assert op.opsm_keep(logp, old, [1, 1, 1], -1.0, delta=0.5) == [1, 1, 1]  # not > delta
    assert op.opsm_keep(logp, old, [1, 1, 1], 0.0, delta=0.0) == [1, 1, 1]  # A >= 0
    # The hole's old - logp = 99.5 does not count: seq_kl = (0.5 - 0.5) / 2 = 0 -> kept.
    assert op.opsm_keep([-1.0, -100.0, -0.5], [-0.5, -0.5, -1.0], [1, 0, 1], -1.0, delta=0.0) == [
        1,
        0,
        1,
    ]
    assert op.opsm_keep([], [], [], -1.0, delta=0.0) == []


def test_is_correction_modes():
    old, rollout, mask = [-1.0, -0.5, -2.0], [-1.125, -9.0, -2.125], [1, 0, 1]
    # Sequence log-ratio 0.125 + 0.125 = 0.25 (the hole does not count).
    assert op.is_correction_weights(old, rollout, mask, mode="sequence_mask") == pytest.approx(
        [1.2840254, 0.0, 1.2840254]
    )
    assert op.is_correction_weights(
        old, rollout, mask, mode="sequence_mask", sequence_log_ratio="mean"
    ) == pytest.approx([1.1331485, 0.0, 1.1331485])
    # token ratios e^1.5 = 4.48 and e^-1 = 0.37 against [0.5, 3].
    old, rollout, mask = [-0.5, -2.0], [-2.0, -1.0], [1, 1]
    kwargs = {"clip_min": 0.5, "clip_max": 3.0}
    assert op.is_correction_weights(old, rollout, mask, mode="token_truncate", **kwargs) == [
        3.0,
        0.5,
    ]
    assert op.is_correction_weights(old, rollout, mask, mode="token_mask", **kwargs) == [0.0, 0.0]
    # Sequence: e^0.5 = 1.6487 is inside the band, for both tokens.
    assert op.is_correction_weights(old, rollout, mask, mode="sequence_mask", **kwargs) == (
        pytest.approx([1.6487213, 1.6487213])
    )
    with pytest.raises(ContractError):
        op.is_correction_weights(old, rollout, mask, mode="geometric")


def test_logprob_gap_reductions():
    olds = [[-0.5, -1.0, -4.0], [-1.0], [-2.0, -2.0]]
    rollouts = [[-1.0, -1.5, -99.0], [-1.0], [-1.0, -3.0]]
    masks = [[1, 1, 0], [0], [1, 1]]
    # Action gaps: [0.5, 0.5], none, [1.0, 1.0].
    assert op.logprob_gap(olds, rollouts, masks) == pytest.approx(3.0 / 4)
    assert op.logprob_gap(olds, rollouts, masks, reduction="sample_mean") == pytest.approx(1.5 / 3)
    assert op.logprob_gap([], [], []) == 0.0

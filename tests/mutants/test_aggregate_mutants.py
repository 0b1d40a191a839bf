"""Broken loss aggregations must fail on their agg.* clause.

The replacement functions are module-level so that the gloo workers of
agg.shard_invariance can unpickle the mutant target.
"""

from __future__ import annotations

import pytest
import torch

from rlconform.adapters.base import with_overrides
from rlconform.conformance.context import CheckContext
from rlconform.conformance.errors import ClauseMismatch
from rlconform.conformance.registry import get
from tests.conftest import assert_caught


def _masked(loss_mat, loss_mask):
    return torch.where(loss_mask.bool(), loss_mat, torch.zeros_like(loss_mat))


def token_mean_local_denominator(self, loss_mat, loss_mask, mode, dp_size=1, **kwargs):
    """Ignores batch_num_tokens: every micro-batch / rank divides by its own token count."""
    if mode == "token-mean":
        return _masked(loss_mat, loss_mask).sum() / loss_mask.sum().clamp(min=1) * dp_size
    return self.agg_loss(loss_mat, loss_mask, mode, dp_size=dp_size, **kwargs)


def token_mean_over_all_positions(self, loss_mat, loss_mask, mode, dp_size=1, **kwargs):
    """Divides by every position (padding and mask holes included): 28/20 instead of 28/9."""
    if mode == "token-mean":
        return _masked(loss_mat, loss_mask).sum() / max(loss_mat.numel(), 1) * dp_size
    return self.agg_loss(loss_mat, loss_mask, mode, dp_size=dp_size, **kwargs)


def token_sum_without_dp_size(self, loss_mat, loss_mask, mode, dp_size=1, **kwargs):
    if mode == "token-sum":
        return _masked(loss_mat, loss_mask).sum()
    return self.agg_loss(loss_mat, loss_mask, mode, dp_size=dp_size, **kwargs)


def token_sum_gradient_without_dp_size(self, loss_mat, loss_mask, mode, dp_size=1, **kwargs):
    """Right value, wrong gradient: the dp_size factor sits behind a detach."""
    if mode == "token-sum":
        total = _masked(loss_mat, loss_mask).sum()
        return total + (dp_size - 1) * total.detach()
    return self.agg_loss(loss_mat, loss_mask, mode, dp_size=dp_size, **kwargs)


def seq_mean_counts_empty_rows(self, loss_mat, loss_mask, mode, global_batch_size=None, **kwargs):
    """The local default counts fully masked rows as sequences."""
    if mode.startswith("seq-mean") and global_batch_size is None:
        global_batch_size = loss_mat.shape[0]
    return self.agg_loss(loss_mat, loss_mask, mode, global_batch_size=global_batch_size, **kwargs)


def batch_info_counts_every_row(self, loss_mask):
    """verl's engine convention: global_batch_size counts fully masked rows too."""
    return {"batch_num_tokens": int(loss_mask.sum()), "global_batch_size": int(loss_mask.shape[0])}


def seq_mean_token_mean_over_width(
    self, loss_mat, loss_mask, mode, dp_size=1, global_batch_size=None, **kwargs
):
    """Each row's token mean divides by the padded width T, not by the row's action tokens."""
    if mode == "seq-mean-token-mean":
        rows = _masked(loss_mat, loss_mask).sum(-1) / max(loss_mat.shape[-1], 1)
        sequences = (
            global_batch_size if global_batch_size is not None else (loss_mask.sum(-1) > 0).sum()
        )
        return rows.sum() / max(int(sequences), 1) * dp_size
    return self.agg_loss(
        loss_mat, loss_mask, mode, dp_size=dp_size, global_batch_size=global_batch_size, **kwargs
    )


def seq_mean_nan_leak(self, loss_mat, loss_mask, mode, dp_size=1, global_batch_size=None, **kwargs):
    """Multiplies by the mask instead of selecting: NaN * 0 = NaN leaks from padding."""
    if mode == "seq-mean-token-sum":
        rows = (loss_mat * loss_mask).sum(-1)
        sequences = (
            global_batch_size if global_batch_size is not None else (loss_mask.sum(-1) > 0).sum()
        )
        return rows.sum() / max(int(sequences), 1) * dp_size
    return self.agg_loss(
        loss_mat, loss_mask, mode, dp_size=dp_size, global_batch_size=global_batch_size, **kwargs
    )


def norm_by_padded_width(self, loss_mat, loss_mask, mode, loss_scale_factor=None, **kwargs):
    """The Dr. GRPO constant defaults to the padded width, which varies per batch."""
    if mode == "seq-mean-token-sum-norm" and loss_scale_factor is None:
        loss_scale_factor = loss_mat.shape[-1]
    return self.agg_loss(loss_mat, loss_mask, mode, loss_scale_factor=loss_scale_factor, **kwargs)


@pytest.mark.parametrize(
    ("clause_id", "ops"),
    [
        ("agg.token_mean", {"agg_loss": token_mean_over_all_positions}),
        ("agg.token_mean", {"agg_loss": token_mean_local_denominator}),
        ("agg.token_sum", {"agg_loss": token_sum_without_dp_size}),
        ("agg.token_sum", {"agg_loss": token_sum_gradient_without_dp_size}),
        ("agg.seq_mean_token_sum", {"agg_loss": seq_mean_counts_empty_rows}),
        ("agg.seq_mean_token_sum", {"agg_loss": seq_mean_nan_leak}),
        ("agg.seq_mean_token_mean", {"agg_loss": seq_mean_token_mean_over_width}),
        ("agg.seq_mean_token_sum_norm", {"agg_loss": norm_by_padded_width}),
        ("agg.shard_invariance", {"agg_loss": token_mean_local_denominator}),
        ("agg.shard_invariance", {"agg_batch_info": batch_info_counts_every_row}),
    ],
    ids=lambda value: value if isinstance(value, str) else next(iter(value.values())).__name__,
)
def test_broken_aggregation_is_caught(torchref, clause_id, ops):
    result = assert_caught(with_overrides(torchref, **ops), clause_id)
    assert "reproducer" in result.counterexample


def test_dp_size_gradient_mutant_fails_on_the_gradient(torchref):
    result = assert_caught(
        with_overrides(torchref, agg_loss=token_sum_gradient_without_dp_size), "agg.token_sum"
    )
    assert "d agg_loss / d loss_mat" in result.message


def test_empty_row_convention_mismatch_names_the_counts(torchref):
    broken = with_overrides(torchref, agg_batch_info=batch_info_counts_every_row)
    result = assert_caught(broken, "agg.shard_invariance")
    assert "global_batch_size" in result.message


def _gloo_example(world_size):
    return next(
        e for e in get("agg.shard_invariance").examples if e.get("world_size") == world_size
    )


def test_gloo_ranks_catch_the_local_token_mean_denominator(torchref):
    """The gloo half of agg.shard_invariance on its own (in-process shards catch it first)."""
    broken = with_overrides(torchref, agg_loss=token_mean_local_denominator)
    with pytest.raises(ClauseMismatch) as caught:
        get("agg.shard_invariance").check(CheckContext(target=broken), _gloo_example(2))
    assert "2 gloo ranks" in caught.value.message
    assert "'token-mean'" in caught.value.message

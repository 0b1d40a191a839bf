"""Broken log-prob and entropy implementations must fail on their logprob.* / entropy.* clause."""

from __future__ import annotations

import torch

from rlconform.adapters.base import Profile, with_overrides
from rlconform.adapters.torchref import TorchRef
from tests.conftest import assert_caught, assert_graded, certify_one


def logprobs_from_row_p_plus_j(
    self, logits, input_ids, attention_mask, response_width, temperature=1.0
):
    """Off by one: response token j scored by row P + j (the row that predicts token j + 1)."""
    prompt_width = logits.shape[1] - response_width
    rows = logits[:, prompt_width:, :] / temperature
    tokens = input_ids[:, prompt_width:]
    logprobs = torch.log_softmax(rows, dim=-1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    return torch.where(attention_mask[:, prompt_width:].bool(), logprobs, 0.0)


def logprobs_with_unstable_logsumexp(
    self, logits, input_ids, attention_mask, response_width, temperature=1.0
):
    """log(sum(exp(x))) without subtracting the max: overflows for logits near 100 in float32."""
    prompt_width = logits.shape[1] - response_width
    rows = logits[:, prompt_width - 1 : -1, :] / temperature
    tokens = input_ids[:, prompt_width:]
    picked = rows.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    logprobs = picked - rows.exp().sum(-1).log()
    return torch.where(attention_mask[:, prompt_width:].bool(), logprobs, 0.0)


def sampling_logprobs_ignoring_temperature(
    self, logits, responses, response_mask, temperature=1.0, top_k=-1, top_p=1.0
):
    return self.sampling_logprobs(
        logits, responses, response_mask, temperature=1.0, top_k=top_k, top_p=top_p
    )


def sampling_logprobs_ignoring_top_k(
    self, logits, responses, response_mask, temperature=1.0, top_k=-1, top_p=1.0
):
    return self.sampling_logprobs(
        logits, responses, response_mask, temperature=temperature, top_k=-1, top_p=top_p
    )


def sampling_logprobs_ignoring_top_p(
    self, logits, responses, response_mask, temperature=1.0, top_k=-1, top_p=1.0
):
    return self.sampling_logprobs(
        logits, responses, response_mask, temperature=temperature, top_k=top_k, top_p=1.0
    )


def logprobs_over_full_vocabulary(
    self, logits, responses, keep_mask, response_mask, temperature=1.0
):
    """Ignores the keep mask: normalises over the whole vocabulary."""
    return self.logprobs_on_support(
        logits, responses, torch.ones_like(keep_mask), response_mask, temperature=temperature
    )


def entropy_mean_over_padding(self, logits, mask):
    """Averages the per-position entropy over every padded position, not the valid ones."""
    return self.entropy_from_logits(logits).mean()


def entropy_without_max_shift(self, logits):
    """logsumexp as log(sum(exp(x))): inf for logits near 100 in float32."""
    p = torch.softmax(logits, dim=-1)
    return logits.exp().sum(-1).log() - (p * logits).sum(-1)


def test_wrong_logits_row_is_caught(torchref):
    broken = with_overrides(torchref, response_logprobs=logprobs_from_row_p_plus_j)
    result = assert_caught(broken, "logprob.alignment")
    assert "uid=" in result.message


def test_unstable_logsumexp_is_caught(torchref):
    broken = with_overrides(torchref, response_logprobs=logprobs_with_unstable_logsumexp)
    assert_caught(broken, "logprob.alignment")


def test_temperature_ignored_is_caught(torchref):
    broken = with_overrides(torchref, sampling_logprobs=sampling_logprobs_ignoring_temperature)
    assert_caught(broken, "logprob.sampling_distribution")


def test_top_k_ignored_is_caught(torchref):
    broken = with_overrides(torchref, sampling_logprobs=sampling_logprobs_ignoring_top_k)
    assert_caught(broken, "logprob.sampling_distribution")


def test_top_p_ignored_is_caught(torchref):
    broken = with_overrides(torchref, sampling_logprobs=sampling_logprobs_ignoring_top_p)
    assert_caught(broken, "logprob.sampling_distribution")


def test_keep_mask_ignored_is_caught(torchref):
    broken = with_overrides(torchref, logprobs_on_support=logprobs_over_full_vocabulary)
    assert_caught(broken, "logprob.keep_sampling_mask")


def test_entropy_averaged_over_padding_is_caught(torchref):
    broken = with_overrides(torchref, entropy_mean=entropy_mean_over_padding)
    assert_caught(broken, "entropy.from_logits")


def test_entropy_without_max_shift_is_caught(torchref):
    broken = with_overrides(torchref, entropy_from_logits=entropy_without_max_shift)
    assert_caught(broken, "entropy.from_logits")


def test_top_k_ties_profile_decides_the_tie_example():
    """Under the profile key top_k_ties="exact", an implementation that keeps ties must fail."""
    exact_profile = Profile(name="torchref-exact-k", dtype="float32", extra={"top_k_ties": "exact"})
    exact = TorchRef()
    exact.profile = exact_profile
    assert certify_one(exact, "logprob.sampling_distribution").status == "pass"
    keeps_ties = TorchRef()

    def sampling_logprobs_keeping_ties(self, *args, **kwargs):
        return keeps_ties.sampling_logprobs(*args, **kwargs)

    broken = with_overrides(exact, sampling_logprobs=sampling_logprobs_keeping_ties)
    assert_caught(broken, "logprob.sampling_distribution")


def entropy_mean_dividing_by_the_valid_count(self, logits, mask):
    """token-mean without a guard: no valid position gives 0 / 0 = NaN instead of 0."""
    valid = mask.bool()
    per_token = torch.where(valid, self.entropy_from_logits(logits), 0.0)
    return per_token.sum() / valid.sum()


def test_entropy_mean_of_no_valid_position_must_be_zero(torchref):
    broken = with_overrides(torchref, entropy_mean=entropy_mean_dividing_by_the_valid_count)
    result = assert_graded(broken, "entropy.from_logits")
    assert result.check == "empty_mean" and result.severity == "edge", result.message


def sampling_logprobs_unmasked(
    self, logits, responses, response_mask, temperature=1.0, top_k=-1, top_p=1.0
):
    """Log-probs of whatever token id sits in the padding, not zeroed there."""
    ones = torch.ones_like(response_mask)
    return self.sampling_logprobs(logits, responses, ones, temperature, top_k, top_p)


def test_padding_not_zeroed_is_caught(torchref):
    broken = with_overrides(torchref, sampling_logprobs=sampling_logprobs_unmasked)
    result = assert_graded(broken, "logprob.sampling_distribution")
    assert result.check == "padding_zero" and result.severity == "nominal", result.message


def sampling_logprobs_keeping_the_tied_token(
    self, logits, responses, response_mask, temperature=1.0, top_k=-1, top_p=1.0
):
    """SGLang's boundary: keep a token while the mass before it is <= top_p (not <)."""
    return self.sampling_logprobs(
        logits, responses, response_mask, temperature, top_k, min(1.0, top_p * (1 + 1e-6))
    )


def test_top_p_exact_ties_are_out_of_contract(torchref):
    """Generated thresholds stay clear of every cumulative mass: moving top_p by a relative
    1e-6 (what decides an exact tie) never changes a generated case's support."""
    variant = with_overrides(torchref, sampling_logprobs=sampling_logprobs_keeping_the_tied_token)
    assert certify_one(variant, "logprob.sampling_distribution").status == "pass"


def test_generated_top_p_stays_clear_of_every_cumulative_mass():
    from hypothesis import given, settings

    from rlconform.conformance.clauses import logprob as clauses

    @settings(max_examples=60, derandomize=True, database=None, deadline=None)
    @given(clauses._sampling_case())
    def clear(case):
        for sample in case["samples"]:
            for row in sample["logits"]:
                margin = clauses._top_p_margin(
                    row, case["temperature"], case["top_k"], case["top_p"]
                )
                assert margin >= clauses._TOP_P_MARGIN

    clear()

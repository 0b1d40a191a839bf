"""Oracle for the CONTRACT area `logprob` and `entropy.from_logits` (stdlib, ragged, float64).

A logits row is a list of V floats; one row per position. Sampling conventions (applied in
this order, as vLLM, SGLang and HF generate do): logits / temperature, then top-k, then
top-p on the top-k-renormalised probabilities, then renormalise over what is kept.
"""

from __future__ import annotations

import math

from rlconform.oracle.errors import ContractError, require_same_length


def log_softmax(row: list[float], *, support: list[int] | None = None) -> list[float]:
    """log p_v = x_v - log(sum_{u in support} exp(x_u)); -inf outside ``support``.

    Computed on x - max(x), which changes nothing mathematically and keeps a common offset
    of the logits (x ~ 1000) from costing float64 digits.
    """
    kept = range(len(row)) if support is None else support
    peak = max(row[v] for v in kept)
    log_norm = math.log(math.fsum(math.exp(row[v] - peak) for v in kept))
    inside = set(kept)
    return [(row[v] - peak) - log_norm if v in inside else -math.inf for v in range(len(row))]


def response_logprobs(
    logits: list[list[float]],
    token_ids: list[int],
    prompt_length: int,
    *,
    temperature: float = 1.0,
    uid: object = None,
) -> list[float]:
    """logprob.alignment: response token j uses logits row P + j - 1 (position p from row p-1).

    ``logits`` and ``token_ids`` cover the real sequence (prompt then response, no padding),
    one logits row per position. Returns one log-prob per response token:
    log_softmax(logits[P + j - 1] / temperature)[token_ids[P + j]].
    """
    if len(logits) != len(token_ids):
        raise ContractError(
            "logprob.alignment",
            f"{len(logits)} logits rows for {len(token_ids)} tokens",
            uid=uid,
            field="logits",
        )
    response_length = len(token_ids) - prompt_length
    if response_length > 0 and prompt_length < 1:
        raise ContractError(
            "logprob.alignment",
            "the first response token needs a preceding position (prompt length 0)",
            uid=uid,
            field="prompt_ids",
        )
    out = []
    for j in range(response_length):
        row = [x / temperature for x in logits[prompt_length + j - 1]]
        out.append(log_softmax(row)[token_ids[prompt_length + j]])
    return out


def sampling_support(
    row: list[float],
    *,
    temperature: float = 1.0,
    top_k: int = -1,
    top_p: float = 1.0,
    top_k_ties: str = "keep",
) -> list[int]:
    """logprob.sampling_distribution: the token ids the sampler could draw at one position.

    top_k <= 0 and top_p >= 1 disable the restriction. top-k ``"keep"``: every token whose
    logit is >= the k-th largest stays (ties at the boundary all kept; vLLM, HF); ``"exact"``:
    exactly k tokens (SGLang); which of several tied tokens stays is then unobservable in the
    kept mass, so the ids returned for ``"exact"`` break ties by id. top-p: in decreasing
    probability, a token stays while the mass strictly before it is < top_p (the token that
    crosses top_p stays).
    """
    if top_k_ties not in ("keep", "exact"):
        raise ContractError("logprob.sampling_distribution", f"unknown top_k_ties {top_k_ties!r}")
    if not 0.0 < top_p:
        raise ContractError("logprob.sampling_distribution", f"top_p must be > 0, got {top_p!r}")
    scaled = [x / temperature for x in row]
    ranked = sorted(range(len(row)), key=lambda v: (-scaled[v], v))
    if 0 < top_k < len(row):
        if top_k_ties == "keep":
            kth = scaled[ranked[top_k - 1]]
            ranked = [v for v in ranked if scaled[v] >= kth]
        else:
            ranked = ranked[:top_k]
    if top_p < 1.0:
        probs = log_softmax(scaled, support=ranked)
        kept: list[int] = []
        for v in ranked:
            if math.fsum(math.exp(probs[u]) for u in kept) >= top_p:
                break
            kept.append(v)
        ranked = kept
    return sorted(ranked)


def sampling_logprob(
    row: list[float],
    token: int,
    *,
    temperature: float = 1.0,
    top_k: int = -1,
    top_p: float = 1.0,
    top_k_ties: str = "keep",
    uid: object = None,
) -> float:
    """logprob.sampling_distribution: log-prob of ``token`` under the distribution sampled.

    log_softmax over the support of (logits / temperature) restricted by top-k / top-p.
    Worked: p = [0.8, 0.2], temperature 2 -> [2/3, 1/3].
    """
    support = sampling_support(
        row, temperature=temperature, top_k=top_k, top_p=top_p, top_k_ties=top_k_ties
    )
    if token not in support:
        raise ContractError(
            "logprob.sampling_distribution",
            f"token {token} is outside the sampling support {support}: it cannot have been sampled",
            uid=uid,
        )
    return log_softmax([x / temperature for x in row], support=support)[token]


def support_logprob(
    row: list[float],
    token: int,
    kept: list[int],
    *,
    temperature: float = 1.0,
    uid: object = None,
) -> float:
    """logprob.keep_sampling_mask: log_softmax(logits / temperature) over the kept ids only."""
    if token not in kept:
        raise ContractError(
            "logprob.keep_sampling_mask",
            f"token {token} is outside the kept set {sorted(kept)}: it cannot have been sampled",
            uid=uid,
        )
    return log_softmax([x / temperature for x in row], support=sorted(set(kept)))[token]


def entropy(row: list[float]) -> float:
    """entropy.from_logits: H = logsumexp(x) - sum_v softmax(x)_v * x_v at one position.

    Evaluated on x - max(x) (H is shift invariant), so a large common offset cannot cancel.
    """
    peak = max(row)
    shifted = [x - peak for x in row]
    log_total = math.log(math.fsum(math.exp(y) for y in shifted))
    return log_total - math.fsum(math.exp(y - log_total) * y for y in shifted)


def entropy_mean(
    logits: list[list[list[float]]], masks: list[list[int]], *, uids: list[object] | None = None
) -> float:
    """entropy.from_logits: mean of H over valid positions only (mask 1); 0.0 when none."""
    uids = uids if uids is not None else list(range(len(masks)))
    values = []
    for sample_rows, mask, uid in zip(logits, masks, uids, strict=True):
        require_same_length("entropy.from_logits", uid, logits=sample_rows, mask=mask)
        values.extend(entropy(row) for row, valid in zip(sample_rows, mask, strict=True) if valid)
    if not values:
        return 0.0
    return math.fsum(values) / len(values)

"""Stand-in ``compute_metrics_from_samples``: slime's keys, the contract's statistics."""

from slime.utils.types import Sample


def compute_metrics_from_samples(args, samples):
    lengths = [sample.effective_response_length for sample in samples]
    truncated = [s.status == Sample.Status.TRUNCATED for s in samples]
    return {
        "response_len/mean": sum(lengths) / len(lengths),
        "response_len/max": max(lengths),
        "response_len/min": min(lengths),
        "truncated_ratio": sum(truncated) / len(truncated),
    }

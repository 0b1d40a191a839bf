"""torchref operations for the CONTRACT area `metrics` (vectorized torch, any device)."""

from __future__ import annotations

from typing import Any

import torch

N_BOOTSTRAP = 1000


def _bootstrap_ns(size: int) -> list[int]:
    """Subset sizes reported per uid: 2, 4, 8, ... below N, then N itself (none for N = 1)."""
    if size < 2:
        return []
    ns, n = [], 2
    while n < size:
        ns.append(n)
        n *= 2
    return ns + [size]


def _majority_values(codes: torch.Tensor, values: torch.Tensor, n_codes: int) -> torch.Tensor:
    """Per row of ``codes`` (D, n): the value at the first occurrence of the most frequent
    code, ties going to the code that appears first in the row (``first_seen``)."""
    draws, n = codes.shape
    onehot = torch.nn.functional.one_hot(codes, n_codes)
    counts = onehot.sum(dim=1)
    positions = torch.arange(n, device=codes.device).view(1, n, 1).expand(draws, n, n_codes)
    first_pos = torch.where(onehot.bool(), positions, n).amin(dim=1)
    is_top = counts == counts.amax(dim=1, keepdim=True)
    winner_pos = torch.where(is_top, first_pos, n).amin(dim=1)
    return values.gather(1, winner_pos.unsqueeze(1)).squeeze(1)


class MetricsOps:
    """Vectorized `metrics` operations in the canonical padded layout."""

    def response_length_metrics(self, response_mask: torch.Tensor) -> dict[str, float]:
        """metrics.response_length: L_i = row sums of the (B, T) response mask; max length T."""
        lengths = response_mask.sum(dim=-1).to(torch.float64)
        width = response_mask.shape[-1]
        kept = lengths[lengths > 0]
        out = {
            "response_length/mean": lengths.mean().item(),
            "response_length/max": lengths.max().item(),
            "response_length/min": lengths.min().item(),
            "response_length/clip_ratio": (lengths == width).to(torch.float64).mean().item(),
            "response/aborted_ratio": (lengths == 0).to(torch.float64).mean().item(),
        }
        if kept.numel():
            out["response_length_non_aborted/mean"] = kept.mean().item()
            out["response_length_non_aborted/max"] = kept.max().item()
            out["response_length_non_aborted/min"] = kept.min().item()
            out["response_length_non_aborted/clip_ratio"] = (
                (kept == width).to(torch.float64).mean().item()
            )
        return out

    def validation_metrics(
        self, uids: list[Any], values: torch.Tensor, preds: list[Any] | None, seed: int
    ) -> dict[Any, dict[str, float]]:
        """metrics.validation_at_n: per uid mean@N, std@N (ddof 0, N > 1) and seeded
        bootstrap best@n / worst@n / maj@n (n draws with replacement, 1000 bootstraps)."""
        groups: dict[Any, list[int]] = {}
        for i, uid in enumerate(uids):
            groups.setdefault(uid, []).append(i)
        out: dict[Any, dict[str, float]] = {}
        for uid, members in groups.items():
            index = torch.tensor(members, device=values.device)
            group = values.index_select(0, index)
            size = len(members)
            stats = {f"mean@{size}": group.mean().item()}
            if size > 1:
                stats[f"std@{size}"] = group.std(correction=0).item()
            codes = None
            if preds is not None:
                seen: dict[Any, int] = {}
                codes = torch.tensor(
                    [seen.setdefault(preds[i], len(seen)) for i in members], device=values.device
                )
            for n in _bootstrap_ns(size):
                generator = torch.Generator().manual_seed(seed)
                draws = torch.randint(size, (N_BOOTSTRAP, n), generator=generator).to(values.device)
                picked = group[draws]
                for name, stat in (("best", picked.amax(-1)), ("worst", picked.amin(-1))):
                    stats[f"{name}@{n}/mean"] = stat.mean().item()
                    stats[f"{name}@{n}/std"] = stat.std(correction=0).item()
                if codes is not None:
                    maj = _majority_values(codes[draws], picked, len(seen))
                    stats[f"maj@{n}/mean"] = maj.mean().item()
                    stats[f"maj@{n}/std"] = maj.std(correction=0).item()
            out[uid] = stats
        return out

    def reduce_metrics(self, metrics: dict[str, list[float]]) -> dict[str, float]:
        """metrics.reduce: "max" in key -> max, else "min" in key -> min, else mean."""
        out = {}
        for key, values in metrics.items():
            column = torch.as_tensor(values, dtype=torch.float64)
            if "max" in key:
                out[key] = column.amax().item()
            elif "min" in key:
                out[key] = column.amin().item()
            else:
                out[key] = column.mean().item()
        return out

    def token_accounting(
        self, response_lengths: torch.Tensor, keep: torch.Tensor
    ) -> dict[str, int]:
        """metrics.token_accounting: generated, kept and discarded response tokens."""
        lengths = response_lengths.to(torch.int64)
        generated = int(lengths.sum())
        kept = int(lengths[keep.bool()].sum())
        return {"generated": generated, "kept": kept, "discarded": generated - kept}

"""The hand-written notes appended to the published trl-liger report (docs/certification).

``python -m rlconform.adapters.trl_liger.notes REPORT.json >> REPORT.md`` after
``rlconform certify trl-liger --json REPORT.json --markdown REPORT.md``: how the branch is
bound, and the declared breaks (from the shipped baseline and the run's statuses, so the
table cannot drift), each marked as the plain path's own or the Liger branch's; the
minimal cases are those of ``tests/trl_liger`` (run on real TRL 1.12 + Liger 0.8.5).
"""

from __future__ import annotations

import json
import sys
from typing import Any

from rlconform.adapters.trl_liger.manifest import baseline_path
from rlconform.adapters.trl_liger.releases import BRANCHES, LIGER_RELEASES

BINDING = """\
## How the Liger branch is bound

- **Where it runs**: with `use_liger_kernel=True`, `GRPOTrainer.compute_loss` (TRL 1.9.0 .. 1.12.0)
  calls `compute_liger_loss`, which hands the completion's last hidden state, the LM head and the
  loss mask `completion_mask * tool_mask` to `LigerFusedLinearGRPOLoss` (built in `__init__` with
  the config's loss type, clip range, beta, delta, IS level, bias correction) and divides its
  loss by the accumulation steps. TRL 1.13.0 removed this branch (there `use_liger_kernel` only
  applies Liger's layer kernels; `rlconform certify trl` covers the loss): later releases exit 2.
- **The scoring path** (rewards -> advantages, `num_items_in_batch`, the shuffle and split) is
  plain TRL's, certified in [trl-1.16.0](trl-1.16.0.md); it runs here inside the step.
- **The model is outside**: a two-token LM head (identity weight) and hidden states that are the
  two-token logits of the case's log-prob leaf (`adapters/logits_from_logprobs.py`), so the fused
  kernel recomputes the case's log-probs in float32 and its hand-written backward returns the
  gradient to the leaf. Cases the construction cannot carry are skipped and counted: a log-prob
  of probability 1 at an action token (no gradient through a saturated softmax), advantages that
  vary along a sequence (Liger takes one per completion), more than one rank for dapo (Liger reads
  `torch.distributed`'s world size).
- **compiled=False**: the trainer's loss math is `torch.compile`d (Liger's default); on CPU the
  adapter runs the same function eagerly (`RLCONFORM_LIGER_COMPILED=1` keeps it compiled).
- **Per-token operations** (`ppo_clip_loss`, `gspo_loss`, `cispo_loss`, `sapo_loss`, the KL, `agg_loss`) run
  `compute_liger_loss` with the fused function's per-chunk math (`_compute_loss_from_logps` with
  `ppo_loss_fn`) on the micro-batch as one chunk, reading `per_token_loss` / `kl_div` back;
  `policy_loss_reduced` and the step run the fused loss itself.
- **Configs**: plain TRL's with `use_liger_kernel=True` (`entropy_bonus` left out: TRL refuses an
  entropy bonus with Liger), plus `luspo`, whose aggregation Liger implements on its own.
"""

# (clause, first feature or "") of the entries that are the Liger branch's own
OWN = {("agg.seq_mean_token_sum", "extra_padding"), ("agg.seq_mean_token_sum", "")}
OWN_STEP = "luspo"

LUSPO = (
    "by hand on `ppo_loss_fn` (loss_type luspo, token-level IS, on-policy): one completion of 2 "
    "tokens in a micro-batch 3 columns wide, A = 1: loss -2.0 (as the contract), gradient "
    "[-2/3, -2/3, -2/3] where the contract (and TRL's own `_compute_loss`) gives [-1, -1, 0]; "
    "in the step (`test_luspo_weights_every_column_by_the_completion_length`) the padding column "
    "of a short completion gets a gradient of A L_i / (B T)"
)


def notes(report: dict[str, Any]) -> str:
    import tomllib

    version = report["target"]["version"]
    with open(baseline_path(version), "rb") as handle:
        entries = tomllib.load(handle)["deviation"]
    status = {c["id"]: c["status"] for c in report["clauses"]}
    lines = [
        "",
        "# Notes (hand-written)",
        "",
        f"- **Certified releases**: `trl=={version}` with `liger-kernel=="
        f"{', '.join(LIGER_RELEASES)}` (`pip install 'rlconform[trl-liger]'`), CPU, torch 2.13, "
        "float32. Release table: "
        + "; ".join(f"`{b.name}`: {b.span}" for b in BRANCHES)
        + " (1.9.0 .. 1.10.0 pass no `num_items_in_batch`: dapo falls back to the micro-batch's "
        "own token count; not certified here).",
        "",
        BINDING,
        "## Declared breaks",
        "",
        "| clause | checks | features | configs | whose | status |",
        "|---|---|---|---|---|---|",
    ]
    for e in entries:
        first = e["features"][0] if e["features"] else ""
        configs = e.get("configs", [])
        own = (e["clause"], first) in OWN or configs == [OWN_STEP]
        whose = "**Liger branch**" if own else "as plain TRL"
        lines.append(
            f"| `{e['clause']}` | {', '.join(e['checks'])} | {', '.join(e['features']) or 'any'}"
            f" | {', '.join(configs) or 'any'} | {whose} | {status.get(e['clause'], '?')} |"
        )
    lines += [
        "",
        "## The Liger branch's own finding: luspo",
        "",
        "Liger 0.8.5's `ppo_loss_fn` aggregates loss_type `luspo` as "
        "`(per_token_loss * attention_mask.sum(1)).sum() / (B * T)`: every column is summed, masked "
        "or not, and weighted by the completion's length, where TRL's own `_compute_loss` (1.12) "
        "masks first (`(per_token_loss * mask).sum(-1).mean()`, the contract's seq-mean-token-sum). "
        "With the default token-level IS the per-token loss is (B, T), so padding and tool tokens "
        "enter the loss and get a gradient, and a completion shorter than the micro-batch's widest "
        "is weighted L_i / T of its due (severity nominal; consequence update under "
        "`loss_type='luspo'`, a named option; the default dapo is not affected). Minimal case: "
        + LUSPO
        + ".",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    with open(args[0], encoding="utf-8") as handle:
        print(notes(json.load(handle)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

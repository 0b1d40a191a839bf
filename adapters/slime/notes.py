"""The hand-written notes appended to the published slime report (docs/certification).

``python -m rlconform.adapters.slime.notes REPORT.json >> REPORT.md`` after
``rlconform certify slime ... --json REPORT.json --markdown REPORT.md``: the baseline table
comes from ``baselines/slime-624b824.toml`` and the run's statuses, so it cannot drift.
"""

from __future__ import annotations

import json
import sys

from rlconform.adapters.slime.manifest import SLIME_PROFILE, deviations

INTRO = """## Adapter notes (slime)

- **Certified source**: THUDM/slime commit `624b824a898ab0ec1fcb4d373004c7f3852bf515` (2026-08-21, "[NFC] Add observability subfolder (#2298)"; `setup.py` version 0.3.1), run on CPU (torch 2.13, float32) with `rlconform certify slime --framework-path <checkout> --json ... --markdown ...`. The reproducers above name the checkout (`replay(clause, 'slime', case=..., framework_path=...)`); `rlconform replay REPORT.json CLAUSE` re-runs one.
- **What is called**: the table "Bindings" above, generated from `adapters/slime/__init__.py` (`BINDINGS`): slime's own functions on the call sites its trainer uses, with the arguments it passes. The adapter only converts layouts (`adapters/slime/layout.py`) and builds the `args` namespaces the trainer would hold.
- **Baseline**: `adapters/slime/baselines/slime-624b824.toml` declares every break observed on this commit, scoped by check and feature (no entry covers a whole clause), so `rlconform certify slime` exits 0 on it and a fork's CI fails only on a new break (or a fixed one: a stale entry fails).
- **torch.compile**: `compute_approx_kl`, `compute_policy_loss`, `compute_cispo_loss` are called uncompiled (`__wrapped__`): compiled, every new Python scalar (each drawn `eps_clip`, each `kl_loss_type`) recompiles for seconds and dynamo falls back to eager after 8 recompiles. `RLCONFORM_SLIME_COMPILED=1` calls the compiled functions.
- **Shims and runtime** (`adapters/slime/loader.py`, `runtime.py`): `megatron.core.mpu` (one process: CP=TP=DP=1, last pipeline stage) and `httpx` are shimmed only when absent. `slime/ray/rollout.py` needs ray and sglang: its two `RolloutManager` methods are compiled from slime's source file unchanged. Collectives run on a private one-rank gloo group; `train_metric_utils.log_rollout_data` runs inside a one-rank default process group destroyed afterwards, and its tracker sink (`logging_utils.log`, wandb/tensorboard) is replaced by a recorder of the metrics slime reports.
{profile}
"""

TAIL = """### Not bound (skipped) and why

- `loss.total`, `loss.entropy_bonus` (op `actor_loss(pg, entropy, kl, mask)`): slime has no function of that shape. `policy_loss_function` computes the per-token entropy itself from the logits (`get_log_probs_and_entropy` -> `calculate_log_probs_and_entropy`) and never takes one; a logits row with a prescribed entropy would need a numerical inversion in the adapter (math), and the gradient with respect to the given entropy would not exist. It also never forms a per-token total: it reduces the policy term, the entropy and the KL separately (`sum_of_sample_mean`) and combines the scalars (`pg_loss - entropy_coef * entropy_loss + kl_loss_coef * kl_loss`). The log-prob gap of the same function is bound (`offpolicy.logprob_gap`).
- `filter.before_normalize`: slime has no function normalising rewards over the filtered samples of a batch or group with population statistics; its group normalisation (`_post_process_rewards`, ddof 1, eps 1e-6) is certified as `adv.grpo` / `reward.normalize_batch`.
- `filter.*` runs only where slime's dynamic sampling can express the case: configs without duplicate removal (on by default in the contract), truncation dropping, length limits or outlier removal (`Unsupported`: a skip), groups that are contiguous and of equal size, statuses and rewards that reach slime's filter (`Inexpressible`). Most generated cases are skipped; the counts are in the table above.
- `metrics.reduce`, `metrics.token_accounting`, `metrics.validation_at_n`: slime reduces logged metrics by explicit (sum, count) pairs and per-rank means (`gather_and_reduce_log_dict`, which needs one process per rank), not by key substring; it has no token accounting after filtering; its evaluation metrics are the mean reward and the unbiased pass@k (`compute_pass_rate`, without replacement), not mean/std/best/worst/maj@N.
- `mask.response_from_eos`, `mask.response_from_attention`, `reward.place_uniform`, `reward.place_discounted`, `reward.td_target`, `kl.adaptive_controller`, `adv.rloo`, `adv.remax`, `adv.opo`, `adv.grpo_passk`, `adv.gpg`, `adv.optimal_token_baseline`, `adv.gdpo`, `loss.gmpo`, `loss.dppo_tv`, `schema.*`, `batch.row_ops`, `batch.pad_divisor`, `batch.union`: slime has no function for them (its response mask comes from the rollout engine; its batches are plain dicts of per-sample lists).
- `mask.multi_turn`: `MultiTurnLossMaskGenerator` tokenises the conversation itself and needs a real HF tokenizer (downloaded), which a CPU certification does not have.
- `layout.*`: slime's packing (`megatron_utils.data.get_batch`) allocates `cu_seqlens` on an accelerator and has no padded layout; the adapter's own converters are tested in `tests/slime/test_layout.py` instead.
- `logprob.sampling_distribution`: slime replays the rollout engine's recorded top-p support (bound as `logprob.keep_sampling_mask`); it never computes a top-k/top-p support itself.
- `kl.straight_through` and the `abs` KL estimator: slime has no such estimator (skip).
- `agg.token_sum`, `agg.seq_mean_token_sum`, `agg.seq_mean_token_sum_norm`: slime has only the per-sample mean and `--calculate-per-token-loss` (skip).

### Known gaps of this run (engine side, reported)

- `step.*`: slime's `loss_function` takes the model's logits and derives the log-probs and entropies itself, so the binding (`adapters/slime/step.py`) builds two-token logits `[lp, log(1 - exp(lp))]` from the harness's log-prob leaves: `log_softmax` gives back `lp` and the chain rule returns slime's gradient to the leaf. An action token with a log-prob at or above `-1e-30` (probability 1 in float32, where log-softmax has no gradient) is inexpressible; the entropy slime logs is the logits' own, so the entropy metric is not compared and every config keeps slime's default `entropy_coef = 0`. Megatron (not installed) is reproduced as megatron-core does it: the per-rollout-mean loss divided by `num_microbatches` before `backward`, or with `--calculate-per-token-loss` the gradients divided by the step's token count after the last micro-batch. One data-parallel rank, one optimizer step per rollout.
- `batch.seqlen_balance`: the declared `workload` deviation ends each case (the check raises outside a `ctx.check` block), so `partition` and `balance` never run on slime. By hand: `get_seqlen_balanced_partitions` (Karmarkar-Karp) on the FLOPs workloads of lengths [2, 2, 2, 3, 3], k = 2, returns [[0, 1, 3], [2, 4]], max 5.43e10 FLOPs, where the input order's contiguous parts give 4.66e10: balancing makes an already optimal order worse (verl's workload gives the same partitions, 172,049 vs 147,474).
- `loss.total`, `loss.entropy_bonus` and the optional `policy_loss_reduced` check of the loss clauses are not bound (see above: `policy_loss_function` takes logits, not per-token log-probs or entropies).

### Contract questions raised

- `batch.seqlen_balance`: the contract fixes verl's workload 24576 L + L^2; slime weighs a sample by its estimated forward FLOPs for the model being trained (`calculate_fwd_flops`, here Qwen3-4B). The workload could be a profile choice, with the balance check measured in the framework's own workload.
- `agg.seq_mean_token_mean`: slime's constant denominator (the configured rollout count) is a defensible choice; the contract could make "which sequences count" a profile key.
- `loss.gspo`: slime implements sequence-level GSPO; the contract requires the GSPO-token gradient.
"""


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _profile() -> str:
    keys = ["dtype", "grpo_std_ddof", "grpo_eps", "grpo_singleton", "kl_ref_clamp"]
    keys += ["k3_value_clamp", "reward_nonaction_tail"]
    pairs = [(k, getattr(SLIME_PROFILE, k)) for k in keys] + list(SLIME_PROFILE.extra.items())
    return (
        "- **Profile** (`adapters/slime/manifest.py`): "
        + ", ".join(f"`{k}={v!r}`" for k, v in pairs)
        + ". Loss metrics (entropy, clip fractions) are reduced as with "
        "`--calculate-per-token-loss` (token means); the log-prob gap with slime's default "
        "reducer (per-rollout means over the step's rollouts, `logprob_gap_reduction`)."
    )


def render(report: dict) -> str:
    results = {c["id"]: c for c in report["clauses"]}
    lines = ["", INTRO.replace("{profile}", _profile()).rstrip(), ""]
    lines += ["### Baseline (declared breaks, each reproduced by hand)", ""]
    lines += ["| clause | status | severity | checks | features | rationale |"]
    lines += ["|---|---|---|---|---|---|"]
    for clause_id, entries in deviations().items():
        result = results.get(clause_id, {})
        observed = {
            (tuple(d.get("checks", ())), tuple(d.get("features", ()))): d
            for d in result.get("deviations", [])
        }
        for entry in entries:
            seen = observed.get((tuple(entry.checks), tuple(entry.features)), {})
            lines.append(
                f"| `{clause_id}` | {result.get('status', '?')} | "
                f"{seen.get('severity') or result.get('severity') or '-'} | "
                f"{', '.join(entry.checks)} | {', '.join(entry.features) or 'any case'} | "
                f"{_cell(entry.rationale)} |"
            )
    lines += ["", TAIL.rstrip(), ""]
    return "\n".join(lines)


if __name__ == "__main__":
    with open(sys.argv[1], encoding="utf-8") as handle:
        sys.stdout.write(render(json.load(handle)))

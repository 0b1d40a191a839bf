"""The hand-written notes appended to the published slime report (docs/certification).

``python -m rlconform.adapters.slime.notes REPORT.json >> REPORT.md`` after
``rlconform certify slime ... --json REPORT.json --markdown REPORT.md``: the findings and
deviations tables come from ``manifest.py`` and the run's statuses, so they cannot drift.
"""

from __future__ import annotations

import json
import sys

from rlconform.adapters.base import Deviation
from rlconform.adapters.slime.manifest import SLIME_DEVIATIONS, SLIME_FINDINGS, SLIME_PROFILE

INTRO = "## Adapter notes (slime)\n\n- **Certified source**: THUDM/slime commit `624b824a898ab0ec1fcb4d373004c7f3852bf515` (2026-08-21, \"[NFC] Add observability subfolder (#2298)\"; `setup.py` version 0.3.1), run on CPU (torch 2.13, float32) with `rlconform certify slime --framework-path <checkout> --json ... --markdown ...`. The reproducers above need the same checkout: `replay(clause, load(framework_path=<checkout>), case=...)` with `from rlconform.adapters.slime import load`.\n- **What is called**: slime's own functions (`slime.utils.ppo_utils`, `slime.utils.distributed_utils.distributed_masked_whiten`, `slime.backends.megatron_utils.{loss,cp_utils}` incl. `loss_function` with a custom loss, `RolloutManager._post_process_rewards` / `_convert_samples_to_train_data`). The adapter only converts layouts (`adapters/slime/layout.py`).\n- **torch.compile**: `compute_approx_kl`, `compute_policy_loss`, `compute_cispo_loss` are called uncompiled (`__wrapped__`): compiled, every new Python scalar (each drawn `eps_clip`, each `kl_loss_type`) recompiles for seconds and dynamo falls back to eager after 8 recompiles. `RLCONFORM_SLIME_COMPILED=1` calls the compiled functions.\n- **Shims** (installed only because the packages are absent; see `adapters/slime/loader.py`): `megatron.core.mpu` (one process: CP=TP=DP=1, last pipeline stage), `httpx` (names read by an annotation at import). `slime/ray/rollout.py` needs ray and sglang: its two `RolloutManager` methods are compiled from slime's source file unchanged (with `torch`, `Sample`, `get_source`). Whitening's `all_reduce` runs on a private one-rank gloo group.\n{profile}\n\n"

REACHABILITY = "Reachability: in slime's pipeline the per-token values at mask-0 (tool) tokens come from real computations, so the `x * loss_mask` leak (mask.loss) matters when one of them is non-finite (an overflow at a tool token); this run did not construct such a training step. The whitening NaN (adv.reinforce_pp, also reached by `--normalize-advantages` for GAE and GRPO) needs only near-equal masked values: `distributed_masked_whiten(torch.full((5,), 0.7), torch.ones(5))` returns NaN.\n\n"

TAIL = "### Not bound (skipped) and why\n\n- `mask.response_from_eos`, `mask.response_from_attention`, `reward.place_uniform`, `reward.place_discounted`, `reward.td_target`, `kl.adaptive_controller`, `adv.rloo`, `adv.remax`, `adv.opo`, `adv.grpo_passk`, `adv.gpg`, `adv.optimal_token_baseline`, `adv.gdpo`, `loss.gmpo`, `loss.dppo_tv`, `offpolicy.is_correction`, `schema.*`, `filter.*`, `batch.*`, `metrics.*`: slime has no function for them (its response mask comes from the rollout engine, its sequence balancing weighs FLOPs, not 24576 L + L^2).\n- `purity.idempotent`: none of the bound operations has an idempotence probe (skip); the other purity clauses run on every bound operation.\n- `mask.multi_turn`: `MultiTurnLossMaskGenerator` tokenises the conversation itself and needs a real HF tokenizer (downloaded), which a CPU certification does not have.\n- `layout.*`: slime's packing (`megatron_utils.data.get_batch`) allocates `cu_seqlens` on an accelerator and has no padded layout; the adapter's own converters are tested in `tests/slime/test_layout.py` instead.\n- `logprob.sampling_distribution`: slime replays the rollout engine's recorded top-p support (bound as `logprob.keep_sampling_mask`); it never computes a top-k/top-p support itself.\n- `kl.in_reward`, `offpolicy.logprob_gap`, `loss.entropy_bonus`, `loss.total`: computed inline in `compute_advantages_and_returns` / `policy_loss_function` (scalar reward on the last token; terms combined after reduction), with no function of the operation's shape.\n- `kl.straight_through` and the `abs` KL estimator: slime has no such estimator (skip).\n- `agg.token_sum`, `agg.seq_mean_token_sum`, `agg.seq_mean_token_sum_norm`: slime has only the per-sample mean and `--calculate-per-token-loss` (skip); `agg.shard_invariance` draws those modes and is skipped with them.\n\n### Contract questions raised\n\n- `agg.seq_mean_token_mean`: slime's constant denominator (the configured rollout count) is a defensible choice; the contract could make \"which sequences count\" a profile key.\n- `loss.gspo`: slime implements sequence-level GSPO; the contract requires the GSPO-token gradient.\n"


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _profile() -> str:
    keys = ["dtype", "grpo_std_ddof", "grpo_eps", "grpo_singleton", "kl_ref_clamp"]
    keys += ["k3_value_clamp", "reward_nonaction_tail"]
    pairs = [(k, getattr(SLIME_PROFILE, k)) for k in keys] + list(SLIME_PROFILE.extra.items())
    return (
        "- **Profile** (`adapters/slime/manifest.py`): "
        + ", ".join(f"`{k}={v!r}`" for k, v in pairs)
        + ". Metrics are reduced as with `--calculate-per-token-loss` (token means); under "
        "slime's default reducer they are per-sample means averaged over every sample of the "
        "step."
    )


def render(report: dict) -> str:
    status = {c["id"]: c["status"] for c in report["clauses"]}
    lines = ["", INTRO.replace("{profile}", _profile()).rstrip(), ""]
    lines += ["### Findings (contract violations; they stay failures)", ""]
    lines += ["| clause | status | what, with a counterexample |", "|---|---|---|"]
    for clause_id, text in SLIME_FINDINGS.items():
        lines.append(f"| `{clause_id}` | {status.get(clause_id, '?')} | {_cell(text)} |")
    lines += ["", REACHABILITY.rstrip(), ""]
    lines += ["### Deviations (declared)", ""]
    lines += ["| clause | status | scope | rationale |", "|---|---|---|---|"]
    for clause_id, entry in SLIME_DEVIATIONS.items():
        scope = ", ".join(entry.scope) if isinstance(entry, Deviation) else "whole clause"
        rationale = entry.rationale if isinstance(entry, Deviation) else entry
        lines.append(
            f"| `{clause_id}` | {status.get(clause_id, '?')} | {scope} | {_cell(rationale)} |"
        )
    lines += ["", TAIL.rstrip(), ""]
    return "\n".join(lines)


if __name__ == "__main__":
    with open(sys.argv[1], encoding="utf-8") as handle:
        sys.stdout.write(render(json.load(handle)))

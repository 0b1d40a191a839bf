"""The hand-written notes appended to the published TRL report (docs/certification).

``python -m rlconform.adapters.trl.notes REPORT.json >> REPORT.md`` after
``rlconform certify trl --json REPORT.json --markdown REPORT.md``: the table of declared
breaks comes from the shipped baseline and the run's statuses, so it cannot drift; the
minimal cases are those of ``tests/trl/test_findings.py`` (run on real TRL).
"""

from __future__ import annotations

import json
import sys
from typing import Any

from rlconform.adapters.trl.manifest import PROFILE, baseline_path
from rlconform.adapters.trl.releases import TABLES

# clause -> the minimal case, reproduced by hand on TRL's real method (test_findings.py)
NAN_PAD = "a NaN (inf for cispo) log-prob at a padded position, mask [1, 0], A = 1: TRL's loss and its gradient are NaN; the contract ignores padding"
MASKED_NAN = "losses [0.5, NaN, -1.5], mask [1, 0, 1]: NaN, contract -0.5 (loss_type dapo; the same sum in grpo, luspo, dr_grpo)"

# (clause, first feature of the entry or "") -> the minimal case, reproduced by hand on
# TRL's real method (tests/trl/test_findings.py)
MINIMAL = {
    (
        "adv.gdpo",
        "",
    ): "one group, one reward function, scores [0, 1, 2] on completions of 1, 1 and 3 tokens: TRL gives the middle completion 0; whitening over the 5 action tokens gives -0.447",
    (
        "loss.cispo",
        "",
    ): "one token, ratio e > eps_max 1.28, A = -1: cispo_clip_ratio 0, contract 1 (the weight is clamped whatever the sign of A)",
    ("loss.cispo", "padding_nonfinite"): NAN_PAD,
    (
        "loss.gspo",
        "",
    ): "s0 one unclipped token, s1 two tokens with rho = e^-0.5 < 0.8 and A < 0: TRL 1/2 (sequences), contract 2/3 (tokens)",
    ("loss.gspo", "padding_nonfinite"): NAN_PAD,
    (
        "loss.gspo",
        "overflow",
    ): "old -100 on the one action token, logp -0.5, A = -1, one padded token: the sequence ratio exp(99.5) is inf in float32, TRL's loss and gradient are not finite; contract |A| e^99.5 = 1.6e43 under TRL's profile (no clamp), finite in float64, the padded token ignored",
    ("loss.ppo_clip", "padding_nonfinite"): NAN_PAD,
    (
        "loss.ppo_clip",
        "extreme_log_ratio",
    ): "old -30, logp -0.5, A = -2 (log-ratio 29.5, edge): per-token loss 2 exp(29.5), contract 2 exp(20); old -100: 2 exp(99.5) = inf",
    ("loss.dual_clip", "padding_nonfinite"): NAN_PAD,
    ("loss.sapo", "padding_nonfinite"): NAN_PAD,
    (
        "loss.sapo",
        "overflow",
    ): "old -100, logp -0.5, A = 1, loss_type sapo (log-ratio 99.5): the ratio exp(99.5) is inf in float32; the loss is the saturated -4A/tau = -4, as the contract's, but d/dlogp is NaN (0 * inf), contract 0 (the log-ratio clamped at 20)",
    (
        "loss.dual_clip",
        "extreme_log_ratio",
    ): "old -100, logp -0.5, A = -2, delta 3: the value is 6 as the contract's, but d/dlogp is NaN (0 * inf through the clamp), contract 0",
    (
        "kl.importance_weighted",
        "overflow",
    ): "logp -100, ref -1, old -0.5: per_token_kl = inf (k3 overflows before the multiplication by exp(-99.5)); the weighted value is exp(-0.5) = 0.607",
    ("agg.token_mean", "padding_nonfinite"): MASKED_NAN,
    (
        "agg.seq_mean_token_mean",
        "actionless_sample",
    ): "rows [1, 2, 3] | [5, 6] | a row without action tokens: loss_type grpo 2.5, contract 3.75",
    (
        "agg.seq_mean_token_sum",
        "actionless_sample",
    ): "the same rows: loss_type luspo 5.667, contract 8.5",
    (
        "agg.seq_mean_token_sum_norm",
        "actionless_sample",
    ): "the same rows, max_completion_length 2: loss_type dr_grpo 2.833, contract 4.25",
    # the step (tests/trl/test_trl_step.py, GRPOTrainer's chain on one step's batch)
    (
        "step.update",
        "uneven_shards",
        "bnpo",
    ): "scores 0, 0, 1 in one group, lengths 2, 1, 1, one sample per micro-batch, ratio 1: TRL's loss 0 (each micro-batch its own token mean over 3 accumulation steps), contract a/4 = 0.144 (a = 1/sqrt(3))",
    (
        "step.update",
        "uneven_shards",
        "entropy_bonus",
    ): "the same batch, entropy_coef 0.01: d loss / d H on the 2-token micro-batch -0.01/6 per token, contract -0.01/4",
    (
        "step.update",
        "actionless_sample",
        "grpo_kl",
    ): "scores 0, 1, 0 in one group, lengths 1, 1 and a completion whose token is masked, one micro-batch: TRL's loss 2/3 of the contract's (.mean() over 3 rows, 2 with an action token)",
    (
        "step.update",
        "extreme_log_ratio",
        "two_iterations",
    ): "scores 0, 1 in one group, one token each, s0 old -23 and logp -1 (stale, num_iterations 2): TRL's loss |A| e^22 / 2 = 1.27e9, contract |A| e^20 / 2 = 1.7e8 (A = -1/sqrt(2))",
    (
        "step.update",
        "overflow",
    ): "a NaN log-prob at a tool token (the pinned hardening example of step.update): TRL's loss and gradient NaN; the contract ignores mask-0 positions",
    (
        "step.metrics",
        "",
        "entropy_bonus",
    ): "scores 0, 1, lengths 2, 1, two micro-batches, entropy_coef 0.01: logged policy_loss 0.118, the step's 0.236 (half: the mean of two shares)",
    (
        "step.metrics",
        "uneven_shards",
    ): "entropies [1, 0] | [0] in two micro-batches: logged entropy (0.5 + 0) / 2 = 0.25, the step's token mean 1/3",
    (
        "step.metrics",
        "overflow",
    ): "a NaN reference log-prob at a tool token under grpo_kl: every micro-batch's kl NaN, GRPOTrainer.log drops NaN values and logs None",
    ("agg.seq_mean_token_mean", "padding_nonfinite"): MASKED_NAN,
    ("agg.seq_mean_token_sum", "padding_nonfinite"): MASKED_NAN,
    ("agg.seq_mean_token_sum_norm", "padding_nonfinite"): MASKED_NAN,
}

INTRO = """## Adapter notes (TRL)

- **Certified release**: `trl==1.16.0` from the package registry (`pip install 'rlconform[trl]'`), run on CPU (torch 2.13, float32) with `rlconform certify trl --json ... --markdown ...`. The reproducers above need the same install: `replay(clause, 'trl', case=...)`.
- **Binding table** `{table}` (`adapters/trl/releases.py`), releases {releases}: the internals the shell relies on (the attributes `GRPOTrainer.__init__` derives from `GRPOConfig`, the tuple `_generate` returns, the arity of `_get_per_token_logps_and_entropies`, the locals and metric names read back) were compared release by release in each release's `grpo_trainer.py`; the shell was also run on 1.9.0, 1.12.0 and 1.14.2. Any other release exits 2 naming this range. Only 1.16.0 ships a baseline; the math of 1.9 and 1.10 differs (the dapo normaliser before the accumulation rescale, luspo's sequence sum, the NaN handling of sampling log-probs), so their certifications report their own breaks.
- **What is called**: `GRPOTrainer._generate_and_score_completions` (advantages for every `scale_rewards` mode and both `multi_objective_aggregation`s with `reward_weights`, the vLLM importance-sampling ratio in all four `vllm_importance_sampling_mode`s, `num_items_in_batch`, the logged log-prob gap) and `GRPOTrainer._compute_loss` (the per-token loss of `loss_type` dapo / cispo / sapo, `importance_sampling_level='sequence'`, `delta`, the k3 KL term with and without `use_bias_correction_kl`, the normalisers of dapo / grpo / luspo / dr_grpo, and its returned scalar for `policy_loss_reduced`), plus the static `get_off_policy_mask`. The trainer shell (`adapters/trl/shell.py`) is a `GRPOTrainer` made with `object.__new__` from a real `GRPOConfig`; only `_get_per_token_logps_and_entropies` (returns the case's log-probs with their autograd graph), `_generate` (returns the case's completions) and `_calculate_rewards` (returns the case's scores) are replaced, on the instance. `accelerator` is a one-process stand-in whose `num_processes` is the case's data-parallel size. The per-token loss and KL are `_compute_loss`'s locals `per_token_loss` / `per_token_kl`, read when it returns (`sys.settrace`, nothing changed).
- **Layout** (`adapters/trl/layout.py`): a canonical action mask is TRL's `completion_mask` (t < L_i) times a `tool_mask` (its holes); groups are reordered to be consecutive (TRL's `view(-1, num_generations)`) and back; per-completion values (advantages, the sequence IS ratio, the OPSM flag) go onto the sample's action tokens. `agg_loss` runs TRL's normalisers on a given per-token loss by making it TRL's clipped surrogate at ratio 1 (log-probs as their own old, per-token advantages -loss).
- **Inexpressible inputs (counted, skipped per case)**: groups of different sizes or of one completion (`GRPOConfig` refuses num_generations < 2), an epsilon other than TRL's 1e-4, normalize_then_sum without std scaling, CISPO with a lower weight bound above 0, token-varying advantages for GSPO and OPSM, empty micro-batches, a global sequence count that is no whole number of micro-batches for grpo / luspo / dr_grpo (their only global denominator is gradient_accumulation_steps), an IS band TRL's config refuses (clip_min >= clip_max).
- **The step** (`adapters/trl/step.py`, CONTRACT `step`): one optimizer step of `GRPOTrainer`: `_generate_and_score_completions` on the step's generation batch (advantages, `num_items_in_batch`, reference log-probs, old log-probs when the config keeps them), the batch split into `steps_per_generation` equal micro-batches with TRL's `split_tensor_dict`, `_compute_loss` per micro-batch and `loss.backward()` as `Trainer.training_step` does (`loss_is_scaled_for_ga = True`: no second division), the logged metrics averaged as `GRPOTrainer.log` does. Configs: `default` is `GRPOConfig()`; `grpo_kl` (loss_type grpo, beta 0.04, `use_bias_correction_kl=False`: the IS-weighted KL term has no step oracle), `bnpo`, `dr_grpo` (scale_rewards none), `entropy_bonus` (entropy_coef 0.01), `two_iterations` (num_iterations 2: old log-probs kept), `sapo` (loss_type sapo, TRL's temperatures 1.0 / 1.05, grpo's normaliser). Inexpressible step batches: groups of different sizes or of one, a completion of no token, micro-batches of different sizes.
{profile}

"""

TAIL = """### Not bound (skipped) and why

- `adv.gae`, `adv.reinforce_pp`, `adv.reinforce_pp_baseline`, `adv.remax`, `adv.opo`, `adv.grpo_passk`, `adv.gpg`, `adv.optimal_token_baseline`, `loss.value_clip`, `reward.td_target`: TRL 1.16 has no critic and no such estimator (there is no PPO trainer; GRPOTrainer's advantage is group-normalised).
- `adv.rloo`: RLOO lives in a separate trainer (`RLOOTrainer`, leave-one-out baseline with the KL as a reward penalty); this adapter binds `GRPOTrainer`.
- `kl.in_reward`, `kl.adaptive_controller`: GRPOTrainer puts the KL in the loss (`beta`), with a fixed coefficient; only `RLOOTrainer` subtracts a KL from the reward (summed per sequence).
- `kl.straight_through`, and the k1 / abs / k2 estimators of `kl.estimators` / `kl.importance_weighted`: TRL's GRPO KL is k3 only (those cases skip).
- `agg.token_sum`: no loss_type sums without a normaliser. `loss_type='bnpo'` (the micro-batch's local token mean) is not bound to an agg clause: in one call it equals token-mean, which is bound to dapo (TRL's default), and it takes no global count; the step runs it (config `bnpo`), where its local denominator shows. `vespo` has no clause.
- `loss.gmpo`, `loss.dppo_tv`: no such loss type.
- `loss.entropy_bonus`, `loss.total`: TRL subtracts `entropy_coef` times the masked mean entropy from the already aggregated scalar, and forms the KL from log-probs inside `_compute_loss`, so there is no per-token total and an arbitrary per-token KL cannot be passed. `top_entropy_quantile` (entropy masking, `get_high_entropy_mask`) has no clause.
- `logprob.*`, `entropy.from_logits`: the log-probs and entropies come from the model's fused LM head (`add_fused_lm_head`, a patched forward over hidden states and the head's weight), not from logits; no function takes logits.
- `mask.*`, `layout.*`, `schema.*`, `filter.*`, `batch.*`, `metrics.*`, `reward.place_*`, `reward.normalize_batch`: TRL builds its masks and padding inline from the generated token lists (`trl.trainer.utils.pad`), has no reward placement (one scalar per completion), no batch container and no filter; `scale_rewards='batch'` (group mean, batch std) and the `sum_then_normalize` weighting of several reward functions have no clause (adv.grpo takes token rewards of one reward).
- `purity.*`: run on every bound operation.

### Engine notes

- `loss.sapo`: `loss_type='sapo'` exponentiates the log-ratio without a clamp, so beyond a log-ratio of 88 (float32) the ratio is inf: the saturated gate gives the right loss -4A/tau and a NaN gradient (0 x inf), where the contract's clamp gives 0 (declared; reproduced in `tests/trl/test_findings.py`). Under the `sapo` step config it is contained: with num_iterations 1 the old log-probs are the current ones, so the ratio is 1. The clause has no `reduced` check: sapo aggregates with grpo's normaliser whatever the profile's `loss_agg_mode` (as verl's and SkyRL's recommend).
- `loss.ppo_clip`, `loss.dual_clip`, `loss.gspo`, `loss.cispo` check `reduced` (and `shard_invariance`) on the scalar `_compute_loss` returns (`policy_loss_reduced`): with NaN/inf padding that scalar is NaN (TRL masks by multiplication, as in `agg.token_mean`), and with an unclamped log-ratio of 29.5 and A < 0 it is 2.4e10 where the contract's clamp gives 1.6e8; both are declared entries above.
- `agg.shard_invariance` passes (in-process and on gloo ranks): token-mean through TRL's global `num_items_in_batch`; grpo / luspo / dr_grpo shards of unequal size are inexpressible (TRL's micro-batches all hold per_device_train_batch_size rows), equal ones give TRL's own full-batch value.

### Contract questions raised

- `adv.gdpo`: TRL normalises the summed components over completions ((x - mean) / (std + 1e-4)), as the GDPO paper's batch normalisation; the contract whitens over action tokens. Which one the contract means could be a profile key.
- `step` (on-policy trainers): with `num_iterations=1` TRL never keeps the rollout's log-probs; `_compute_loss` uses the current ones, detached, as the old (ratio 1). The contract's step input names old log-probs; rlconform's trainer configs carry `on_policy` (the old log-probs are the current ones), under which the oracle and the batch use the current log-probs as old. The contract could say so.
- `step.metrics`: TRL logs the mean entropy and KL of the action tokens (`entropy`, `kl`), not the entropy / KL terms as the loss aggregates them (verl's `actor/entropy_loss`); rlconform checks them as `entropy/mean` / `kl_loss/mean`.
- `agg.seq_mean_*`: TRL's grpo / luspo / dr_grpo divide by every row of the micro-batch (per_device_train_batch_size), a fixed denominator like slime's; "which sequences count" could be a profile key.
"""


def _key(clause_id: str, entry: Any) -> tuple[str, ...]:
    key = (clause_id, entry.features[0] if entry.features else "")
    return key + (entry.configs[0],) if entry.configs else key


def _cell(text: Any) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _profile() -> str:
    keys = ["dtype", "grpo_std_ddof", "grpo_eps", "kl_ref_clamp", "k3_value_clamp"]
    pairs = [(k, getattr(PROFILE, k)) for k in keys] + list(PROFILE.extra.items())
    return "- **Profile** (`adapters/trl/manifest.py`): " + ", ".join(
        f"`{k}={v!r}`" for k, v in pairs
    )


def render(report: dict[str, Any]) -> str:
    from rlconform.conformance import baseline

    version = str(report["target"].get("version", ""))
    table = TABLES[0]
    out = INTRO.format(table=table.name, releases=table.span, profile=_profile())
    statuses = {c["id"]: c for c in report["clauses"]}
    path = baseline_path(version.split("+")[0])
    entries = baseline.load(path) if path.exists() else {}
    out += "### Declared breaks (baseline `adapters/trl/baselines/" + path.name + "`)\n\n"
    out += "Every entry was reproduced by hand on TRL's own method (`tests/trl/test_findings.py`), and a correct implementation of the contract passes the same case.\n\n"
    out += "| clause | status | severity | checks | features | what TRL does | minimal case |\n|---|---|---|---|---|---|---|\n"
    for clause_id, deviations in entries.items():
        result = statuses.get(clause_id, {})
        for entry in deviations:
            seen = next(
                (
                    d
                    for d in result.get("deviations") or []
                    if tuple(d.get("checks", ())) == entry.checks
                    and tuple(d.get("features", ())) == entry.features
                    and tuple(d.get("declared_configs", ())) == entry.configs
                ),
                {},
            )
            observed = "observed" if seen.get("observed") else "NOT observed"
            out += (
                f"| `{clause_id}` | {result.get('status', '-')} ({observed}) | {seen.get('severity') or '-'} | "
                f"{', '.join(entry.checks)} | {', '.join(entry.features) or 'any case'}"
                f"{' under ' + ', '.join(entry.configs) if entry.configs else ''} | "
                f"{_cell(entry.rationale)} | {_cell(MINIMAL.get(_key(clause_id, entry), ''))} |\n"
            )
    return out + "\n" + TAIL


def main(argv: list[str]) -> int:
    with open(argv[0], encoding="utf-8") as handle:
        report = json.load(handle)
    sys.stdout.write(render(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

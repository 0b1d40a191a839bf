"""Benchmark: ``rlconform audit`` on a GRPO step of 256 x 4096 = 1,048,576 response tokens.

Not a timed test. Builds one GRPO step as verl records it (left-padded prompts, responses
of uneven length with tool-observation holes, the score at L_i - 1, KL in the reward,
values, per-token policy losses and their token-mean aggregate, rollout log-probs and the
gap metric), with every derived field computed by torchref (the contract's vectorised torch
implementation; that recomputation is timed as the baseline). By default every response
has the full width (256 x 4096 = 1,048,576 response tokens, the issue's size; mask holes
still cut tool observations out of a third of them). The step is recorded with
``rlconform.audit.record`` and audited by ``rlconform audit`` in a child process, whose
wall time and peak resident memory are measured. Prints tokens/s and the ratio of the
audit's time to torchref's; exits 1 when a target is missed or the audit is not clean.

    python benchmarks/audit_scale.py [--samples 256] [--width 4096] [--budget 120] [--memory-gib 4]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from rlconform.adapters.torchref import TorchRef
from rlconform.audit import record

KL_COEF = 0.001


def build_step(
    samples: int, width: int, prompt_width: int, per_group: int, min_length: int
) -> dict:
    """The recorded inputs of one step (no derived field yet)."""
    gen = torch.Generator().manual_seed(0)
    lengths = torch.randint(min_length, width + 1, (samples,), generator=gen)
    lengths[:: max(1, samples // 16)] = width  # some responses hit the length limit
    columns = torch.arange(width).unsqueeze(0)
    response = columns < lengths.unsqueeze(1)
    # tool observations: one span of up to 64 tokens inside about a third of the responses
    start = (torch.rand(samples, generator=gen) * lengths * 0.8).long().unsqueeze(1)
    span = torch.randint(1, 65, (samples, 1), generator=gen)
    with_tool = torch.rand(samples, 1, generator=gen) < 0.33
    holes = with_tool & (columns >= start) & (columns < start + span) & (columns > 0)
    holes &= columns < (lengths - 1).unsqueeze(1)
    response_mask = (response & ~holes).to(torch.int64)
    prompt_lengths = torch.randint(1, prompt_width + 1, (samples,), generator=gen)
    prompt_mask = torch.arange(prompt_width).unsqueeze(0) >= (
        prompt_width - prompt_lengths
    ).unsqueeze(1)
    attention_mask = torch.cat([prompt_mask, response], dim=1).to(torch.int64)
    prompts = torch.randint(3, 32000, (samples, prompt_width), generator=gen) * prompt_mask
    responses = torch.randint(3, 32000, (samples, width), generator=gen) * response
    old = -torch.rand(samples, width, generator=gen) * 4
    return {
        "prompts": prompts,
        "responses": responses,
        "input_ids": torch.cat([prompts, responses], dim=1),
        "attention_mask": attention_mask,
        "position_ids": (attention_mask.cumsum(dim=1) - 1).clamp(min=0),
        "response_mask": response_mask,
        "old_log_probs": old,
        "ref_log_prob": old - 0.1 * torch.randn(samples, width, generator=gen),
        "rollout_log_probs": old + 0.02 * torch.randn(samples, width, generator=gen),
        "values": torch.randn(samples, width, generator=gen),
        "pg_losses": torch.randn(samples, width, generator=gen),
        "scores": torch.randint(0, 2, (samples,), generator=gen).float(),
        "uid": [f"prompt-{i // per_group}" for i in range(samples)],
        "sample_id": [f"step7-{i}" for i in range(samples)],
    }


def torchref_recompute(step: dict) -> tuple[dict, float]:
    """Every derived field by torchref, and the seconds it took (the baseline: one torch
    thread, as the audit runs, best of three)."""
    torch.set_num_threads(1)
    seconds = min(_timed(step)[1] for _ in range(2))
    out, last = _timed(step)
    return out, min(seconds, last)


def _timed(step: dict) -> tuple[dict, float]:
    ref = TorchRef()
    started = time.perf_counter()
    mask = step["response_mask"]
    span = step["attention_mask"][:, -mask.shape[1] :]
    scores = ref.place_reward_last(step["scores"], span, mask)
    rewards, kl_metric = ref.apply_kl_in_reward(
        scores, step["old_log_probs"], step["ref_log_prob"], mask, KL_COEF, "low_var_kl"
    )
    advantages, returns = ref.advantage_grpo(rewards, mask, step["uid"])
    pg_loss = ref.agg_loss(step["pg_losses"], mask, "token-mean")
    gap = ref.logprob_gap(step["old_log_probs"], step["rollout_log_probs"], mask)
    seconds = time.perf_counter() - started
    derived = {
        "token_level_scores": scores,
        "token_level_rewards": rewards,
        "advantages": advantages,
        "returns": returns,
        "pg_loss": pg_loss,
    }
    metrics = {
        "actor/reward_kl_penalty": float(kl_metric),
        "train_rollout_logprob_abs_diff": float(gap),
    }
    return {"derived": derived, "metrics": metrics}, seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=256)
    parser.add_argument("--width", type=int, default=4096)
    parser.add_argument("--prompt-width", type=int, default=512)
    parser.add_argument("--per-group", type=int, default=8)
    parser.add_argument(
        "--min-length",
        type=int,
        default=None,
        help="shortest response (default: the width, so the batch holds samples x width "
        "response tokens; lower it for uneven lengths and padding)",
    )
    parser.add_argument("--budget", type=float, default=120.0, help="seconds allowed")
    parser.add_argument("--memory-gib", type=float, default=4.0, help="peak RSS allowed")
    args = parser.parse_args()

    min_length = args.width if args.min_length is None else args.min_length
    step = build_step(args.samples, args.width, args.prompt_width, args.per_group, min_length)
    out, ref_seconds = torchref_recompute(step)
    step.pop("scores")
    step.update(out["derived"])
    config = {
        "adv_estimator": "grpo",
        "norm_adv_by_std_in_grpo": True,
        "use_kl_in_reward": True,
        "kl_penalty": "low_var_kl",
        "kl_coef": KL_COEF,
        "loss_agg_mode": "token-mean",
    }
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "step.safetensors"
        record(step, path, config=config, metrics=out["metrics"])
        del step, out
        report_path = Path(folder) / "report.json"
        command = [
            sys.executable,
            "-c",
            "from rlconform.conformance.cli import entry; entry()",
            "audit",
            str(path),
            "--json",
            str(report_path),
        ]
        started = time.perf_counter()
        completed = subprocess.run(command, capture_output=True, text=True)
        wall = time.perf_counter() - started
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        peak_gib = usage.ru_maxrss / 2**20
        cpu = usage.ru_utime + usage.ru_stime
        if completed.returncode != 0:
            print(completed.stdout[-3000:], completed.stderr[-3000:], sep="\n")
        report = json.loads(report_path.read_text()) if report_path.exists() else {}
    tokens = report.get("tokens", 0)
    audit_seconds = report.get("seconds", float("nan"))
    statuses = {c["clause"]: c["status"] for c in report.get("clauses", [])}
    print(f"batch: {args.samples} x {args.width} GRPO step, {tokens} response tokens")
    print(f"clauses: {', '.join(f'{k} {v}' for k, v in statuses.items())}")
    print(
        f"audit: {wall:.1f} s wall in a child process ({audit_seconds:.1f} s in the audit "
        f"itself, the rest is starting Python and importing torch), {cpu:.1f} s CPU, peak "
        f"RSS {peak_gib:.2f} GiB, exit {completed.returncode}"
    )
    print(
        f"throughput: {tokens / wall:,.0f} tokens/s (wall), {tokens / audit_seconds:,.0f} "
        "tokens/s (audit)"
    )
    print(
        f"torchref recomputation of the same derived fields (1 thread, best of 3): "
        f"{ref_seconds:.3f} s; "
        f"audit / torchref = {wall / ref_seconds:,.0f}x (wall), "
        f"{audit_seconds / ref_seconds:,.0f}x (audit)"
    )
    met = wall <= args.budget and peak_gib <= args.memory_gib and completed.returncode == 0
    print(
        f"targets (<= {args.budget:g} s, <= {args.memory_gib:g} GiB, exit 0): "
        f"{'met' if met else 'MISSED'}"
    )
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())

"""Memory of the second policy: peak memory of Agon against single-adapter GRPO, and adapter size.

Measured: peak RSS of a fresh process training ``game: grpo`` with N rollouts per problem,
``game: grpo`` with 2N, and ``game: agon`` with N — GRPO with 2N does the same rollout work
per step as Agon (P·N drafts + P·N challenges), so Agon against it isolates what holding and
training a second policy costs. Agon runs twice: with the challenger reading nothing
(``hidden``) and reading the draft's summary (``strip_trace``; for an untrained model, the
whole draft), since a longer challenger prompt means more activations. The *working set* is
the peak above the RSS the process had when training started (model, adapters and libraries
loaded): activations, gradients, optimizer state, KV caches.

Counted: LoRA parameters of one adapter as a share of the base, and the training state of a
second adapter (fp32 weights, gradients and two AdamW moments: 16 bytes a parameter) against
the base's weights, for the benchmark's tiny model and for Qwen3-0.6B (built on the meta
device from its published shape, so no weights are needed).

    python -m benchmarks.bench_memory
    python -m benchmarks.bench_memory --rounds 1 --steps 1
    python -m benchmarks.bench_memory --summarizers hidden     # one Agon row
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

import torch

from benchmarks.common import (
    LORA_TARGETS,
    SUMMARIZERS,
    Workload,
    build_model_dir,
    median,
    ours_worker,
    print_table,
    spawn,
    work_config,
    worker_main,
    workload_of,
    workload_parser,
    write_json,
)

MODULE = "benchmarks.bench_memory"
ADAPTER_STATE_BYTES = 16  # fp32 weight + gradient + AdamW exp_avg + exp_avg_sq


def qwen3_0_6b_config() -> Any:
    """Qwen3-0.6B's shape: hidden 1024, MLP 3072, 28 layers, 16/8 heads of 128, vocab 151,936, tied."""
    from transformers import Qwen3Config

    return Qwen3Config(
        vocab_size=151_936, hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
        num_attention_heads=16, num_key_value_heads=8, head_dim=128, tie_word_embeddings=True,
    )  # fmt: skip


def adapter_share(config: Any, rank: int, targets: list[str] = LORA_TARGETS) -> dict[str, float]:
    """Base and one-adapter parameter counts of a causal LM built on the meta device (no memory)."""
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    base = sum(p.numel() for p in model.parameters())  # tied embeddings counted once
    lora = sum(
        rank * (m.in_features + m.out_features)
        for name, m in model.named_modules()
        if isinstance(m, torch.nn.Linear) and name.rsplit(".", 1)[-1] in targets
    )
    return {"base_params": base, "adapter_params": lora, "adapter_share": lora / base}


def measured(cli: argparse.Namespace) -> tuple[str, list[dict[str, Any]]]:
    work = workload_of(cli)
    double = Workload(**{**work.__dict__, "generations": 2 * work.generations})
    agon = {
        "hidden": "Agon, N, challenger reads nothing",
        "strip_trace": "Agon, N, challenger reads the draft",
    }
    configs = [
        ("grpo", work, "strip_trace", "GRPO, N"),
        ("grpo", double, "strip_trace", "GRPO, 2N"),
        *(("agon", work, summarizer, agon[summarizer]) for summarizer in cli.summarizers),
    ]
    runs: dict[str, list[dict[str, Any]]] = {label: [] for *_, label in configs}
    with tempfile.TemporaryDirectory() as root:
        model_dir = build_model_dir(Path(root), work)
        for _ in range(cli.rounds):
            for game, w, summarizer, label in configs:
                config = work_config(w, game=game, summarizer=summarizer, model_dir=str(model_dir))
                result = spawn(MODULE, config)
                runs[label].append(result)
                print(
                    f"{label}: peak {result['peak_rss_mb']:.0f} MB, start {result['train_start_rss_mb']:.0f} MB"
                )
    peak = {k: median([r["peak_rss_mb"] for r in rs]) for k, rs in runs.items()}
    working = {k: median([r["peak_rss_mb"] - r["train_start_rss_mb"] for r in rs]) for k, rs in runs.items()}
    ref = "GRPO, 2N"  # the same rollout work as one Agon step
    rows = [
        [label, runs[label][0]["rollout_tokens"], runs[label][0]["rollout_tokens"] + runs[label][0]["prompt_tokens"],
         peak[label], working[label], peak[label] / peak[ref], working[label] / working[ref]]
        for *_, label in configs
    ]  # fmt: skip
    table = print_table(
        f"Peak memory, fresh process per run (P={work.prompts}, N={work.generations}, T={work.max_new_tokens}, "
        f"tiny Qwen3 h{work.hidden_size}×{work.num_layers}); ratios to GRPO with 2N (equal rollout tokens)",
        ["run", "rollout tokens/step", "trained tokens/step (prompt+rollout)", "peak RSS MB", "working set MB",
         "peak / GRPO 2N", "working set / GRPO 2N"],
        rows,
    )  # fmt: skip
    return table, [{"label": k, "runs": v} for k, v in runs.items()]


def counted(cli: argparse.Namespace) -> tuple[str, list[dict[str, Any]]]:
    from transformers import AutoConfig

    work = Workload()
    with tempfile.TemporaryDirectory() as root:
        tiny = AutoConfig.from_pretrained(build_model_dir(Path(root), work))
    models = [
        (f"tiny Qwen3 h{work.hidden_size}×{work.num_layers} (fp32)", tiny, 4),
        ("Qwen3-0.6B (bf16)", qwen3_0_6b_config(), 2),
    ]
    rows, records = [], []
    for name, config, base_bytes in models:
        share = adapter_share(config, cli.rank)
        weights_mb = share["base_params"] * base_bytes / 2**20
        state_mb = share["adapter_params"] * ADAPTER_STATE_BYTES / 2**20
        rows.append([
            name, f"{share['base_params']:,}", f"{share['adapter_params']:,}", f"{100 * share['adapter_share']:.2f}%",
            weights_mb, state_mb, (weights_mb + 2 * state_mb) / (weights_mb + state_mb),
        ])  # fmt: skip
        records.append({"model": name, **share, "base_weights_mb": weights_mb, "adapter_state_mb": state_mb})
    table = print_table(
        f"One LoRA adapter (r={cli.rank}, q,k,v,o,gate,up,down) against the base",
        ["model", "base params", "adapter params", "adapter/base", "base weights MB",
         "adapter train state MB", "(base+2 states)/(base+1 state)"],
        rows,
    )  # fmt: skip
    return table, records


def main() -> None:
    parser = workload_parser(
        __doc__, rounds=2, rounds_help="runs per row", steps=1, prompts=4, max_new_tokens=64
    )
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument(
        "--summarizers", nargs="+", default=["hidden", "strip_trace"], choices=SUMMARIZERS,
        help="what the challenger reads in the Agon rows",
    )  # fmt: skip
    cli = parser.parse_args()
    count_table, count_records = counted(cli)
    measure_table, measure_records = measured(cli)
    write_json(
        "memory",
        {"tables": [measure_table, count_table], "measured": measure_records, "counted": count_records},
        cli.results_dir,
    )


if __name__ == "__main__":
    if not worker_main(ours_worker):
        main()

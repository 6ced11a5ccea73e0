"""The Qwen3-0.6B architecture (random weights, vocabulary 151,936) through every path, on CPU.

Two sections, each run in fresh processes:

* ``--paths`` (default): two Agon steps in fp32 and in bf16 with short rollouts — the decode
  loop, the update with chunked log-probs and activation checkpointing, the non-finite guard,
  a checkpoint, a bundle export and a cascade prediction from it — with step time, peak RSS
  and the sampler/trainer log-prob mismatch.
* ``--vs-trl``: our ``game: grpo`` step against TRL's ``GRPOTrainer`` on the same architecture
  and work (P=4, N=4, T=64, fp32; the workers of :mod:`benchmarks.bench_vs_trl`), run in the
  order ours, TRL, TRL, ours (the machine may be shared: each pair is side by side), with the
  achieved FLOP/s of generation and of the rest of the step against a plain matmul of the same
  shapes (:mod:`benchmarks.scale_flops`).

    python -m benchmarks.bench_scale                 # --paths on Qwen3-0.6B
    python -m benchmarks.bench_scale --vs-trl        # needs the bench extra (TRL)
    python -m benchmarks.bench_scale --arch tiny     # the same on the tiny shape (seconds)
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.common import Workload, build_model_dir, median, print_table, spawn, work_config, write_json
from benchmarks.scale_flops import generation_flops, matmul_flops_per_s, update_flops

TRL_WORKER = "benchmarks.bench_vs_trl"
MODULE = "benchmarks.bench_scale"
WORKER_TIMEOUT_S = 3600  # one 0.6B process on a shared CPU: model build, two steps


def vs_trl(
    arch: str, prompts: int, generations: int, max_new_tokens: int, steps: int, rounds: int
) -> dict[str, Any]:
    """``rounds`` of ours, TRL, TRL, ours on the same work; ratios per adjacent pair, medians."""
    import trl
    from transformers import AutoConfig

    work = Workload(
        prompts=prompts, generations=generations, max_new_tokens=max_new_tokens, steps=steps, arch=arch
    )
    order = ["ours", "trl", "trl", "ours"] * rounds
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as root:
        model_dir = build_model_dir(Path(root), work)
        config = AutoConfig.from_pretrained(model_dir)
        for impl in order:
            result = spawn(
                TRL_WORKER, work_config(work, impl=impl, model_dir=str(model_dir)), WORKER_TIMEOUT_S
            )
            result["impl"] = impl
            runs.append(result)
            print(f"{impl}: {result['step_s']:.1f} s/step, peak {result['peak_rss_mb']:.0f} MB", flush=True)
    pairs = [(runs[i], runs[i + 1]) if runs[i]["impl"] == "ours" else (runs[i + 1], runs[i])
             for i in range(0, len(runs), 2)]  # fmt: skip
    tokens = {r["impl"]: (r["rollout_tokens"], r["prompt_tokens"]) for r in runs}
    if tokens["ours"][0] != tokens["trl"][0]:
        raise RuntimeError(f"unequal work: rollout tokens per step {tokens}")
    rollout, prompt = tokens["ours"]
    gen_flops, upd_flops = generation_flops(config, rollout), update_flops(config, rollout, prompt)
    rows_gen, rows_upd = work.rollouts, int(rollout + prompt)
    widest = max(config.intermediate_size, config.hidden_size)
    peak_gen = matmul_flops_per_s(rows_gen, config.hidden_size, widest)
    peak_upd = matmul_flops_per_s(rows_upd, config.hidden_size, widest)
    table_rows, per_impl = [], {}
    for impl in ("ours", "trl"):
        rs = [r for r in runs if r["impl"] == impl]
        gen_s = median([r["generate_cpu_s"] for r in rs])
        rest_s = median([r["cpu_step_s"] - r["generate_cpu_s"] for r in rs])
        per_impl[impl] = {
            "step_s": median([r["step_s"] for r in rs]), "peak_rss_mb": median([r["peak_rss_mb"] for r in rs]),
            "generate_gflops": gen_flops / gen_s / 1e9, "update_gflops": upd_flops / rest_s / 1e9,
        }  # fmt: skip
        p = per_impl[impl]
        table_rows.append([impl, p["step_s"], p["peak_rss_mb"] / 1024, p["generate_gflops"],
                           p["generate_gflops"] * 1e9 / peak_gen, p["update_gflops"],
                           p["update_gflops"] * 1e9 / peak_upd])  # fmt: skip
    ratios = [o["step_s"] / t["step_s"] for o, t in pairs]
    memory = [o["peak_rss_mb"] / t["peak_rss_mb"] for o, t in pairs]
    table = print_table(
        f"{arch}, fp32, ours (game: grpo) vs TRL {trl.__version__} GRPOTrainer, P={prompts} N={generations} "
        f"T={max_new_tokens}, CPU 1 thread, order {' '.join(order)}; ours/TRL per adjacent pair: wall "
        f"{', '.join(f'{r:.3f}' for r in ratios)} (median {median(ratios):.3f}), peak RSS "
        f"{', '.join(f'{m:.3f}' for m in memory)}; plain matmul: {peak_gen / 1e9:.1f} GFLOP/s at "
        f"[{rows_gen}, {config.hidden_size}]×[{config.hidden_size}, {widest}], {peak_upd / 1e9:.1f} at "
        f"[{rows_upd}, …]",
        ["impl", "s/step", "peak RSS GiB", "generation GFLOP/s", "of matmul", "rest of step GFLOP/s", "of matmul"],
        table_rows,
    )  # fmt: skip
    return {"table": table, "order": order, "ratio_per_pair": ratios, "rss_ratio_per_pair": memory,
            "matmul_gflops": {"generation": peak_gen / 1e9, "update": peak_upd / 1e9},
            "flops": {"generation": gen_flops, "update": upd_flops}, "summary": per_impl, "runs": runs,
            "workload": work.__dict__}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--arch", default="qwen3-0.6b", help="a shape of agon_lightning.shapes.QWEN3, or tiny"
    )
    parser.add_argument("--vs-trl", action="store_true", help="ours vs TRL instead of the paths section")
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--generations", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--steps", type=int, default=1, help="measured steps after the warm-up step")
    parser.add_argument("--rounds", type=int, default=1, help="repeats of the ours, TRL, TRL, ours order")
    cli = parser.parse_args()
    if cli.vs_trl:
        result = vs_trl(cli.arch, cli.prompts, cli.generations, cli.max_new_tokens, cli.steps, cli.rounds)
        write_json(f"scale_vs_trl_{cli.arch}", result)


if __name__ == "__main__":
    main()

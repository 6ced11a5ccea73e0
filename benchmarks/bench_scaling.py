"""Scaling: Agon step time as N, the prompt batch P and ``max_new_tokens`` T each double.

Each doubling doubles the rollout tokens of a step; the step's cost should grow no faster
than that (ratio ≤ 2). Batch doublings (N, P) should cost less than 2×, since a decode step
serves the whole batch; doubling T adds decode steps and longer sequences to train on.
Fresh process per run, configurations interleaved, repeated.

    python -m benchmarks.bench_scaling
    python -m benchmarks.bench_scaling --game grpo --rounds 1 --steps 2
    python -m benchmarks.bench_scaling --doublings T     # the base and T × 2 only
"""

from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from benchmarks.common import (
    SUMMARIZERS,
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

MODULE = "benchmarks.bench_scaling"


def main() -> None:
    parser = workload_parser(__doc__, rounds=2, rounds_help="runs of every shape", steps=3)
    parser.add_argument("--game", choices=["agon", "grpo"], default="agon")
    parser.add_argument("--summarizer", choices=SUMMARIZERS, default="strip_trace")
    parser.add_argument(
        "--doublings", nargs="+", choices=["N", "P", "T"], default=["N", "P", "T"], help="which to double"
    )
    cli = parser.parse_args()
    base = workload_of(cli)
    doubled = {
        "N": replace(base, generations=2 * base.generations),
        "P": replace(base, prompts=2 * base.prompts),
        "T": replace(base, max_new_tokens=2 * base.max_new_tokens),
    }
    variants = {"base": base, **{f"{k} × 2": w for k, w in doubled.items() if k in cli.doublings}}
    runs: dict[str, list[dict[str, Any]]] = {k: [] for k in variants}
    with tempfile.TemporaryDirectory() as root:
        for _ in range(cli.rounds):
            for name, work in variants.items():
                model_dir = build_model_dir(Path(root), work)  # same weights; T sets min_new_tokens
                config = work_config(work, game=cli.game, summarizer=cli.summarizer, model_dir=str(model_dir))
                result = spawn(MODULE, config)
                runs[name].append(result)
                print(f"{name}: {result['step_s']:.3f} s/step, {result['rollout_tokens']} tokens")
    wall = {k: median([r["step_s"] for r in rs]) for k, rs in runs.items()}
    cpu = {k: median([r["cpu_step_s"] for r in rs]) for k, rs in runs.items()}
    tokens = {k: rs[0]["rollout_tokens"] for k, rs in runs.items()}
    rows = [
        [name, f"P={w.prompts} N={w.generations} T={w.max_new_tokens}", tokens[name], wall[name], cpu[name],
         tokens[name] / tokens["base"], wall[name] / wall["base"], cpu[name] / cpu["base"]]
        for name, w in variants.items()
    ]  # fmt: skip
    table = print_table(
        f"Step time as the work doubles ({cli.game}, challenger reads {cli.summarizer})",
        ["run", "shape", "rollout tokens/step", "wall s/step", "CPU s/step", "tokens ×", "wall ×", "CPU ×"],
        rows,
    )  # fmt: skip
    write_json("scaling", {"game": cli.game, "table": table, "runs": runs}, cli.results_dir)


if __name__ == "__main__":
    if not worker_main(ours_worker):
        main()

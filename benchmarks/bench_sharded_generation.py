"""Sampling under sharded weights: all-gathers and seconds per rollout, per layer per token vs once per rollout.

Under FSDP2 and ZeRO-3 each rank holds a shard of every weight and a sharded module gathers
its weights when its forward starts. Sampling through the modules (``generate``) therefore
gathers every layer once per generated token: what happened before rollouts were gathered.
``agon_lightning.strategies.gathered`` gathers the whole model once around a rollout, and the
decode loop then reads the whole weights directly (no module hooks at all).

Two gloo processes on CPU, the benchmarks' random tiny Qwen3 (hidden 128, 4 layers; every
completion exactly T tokens), both adapters attached (LoRA r=16 on all seven projections),
every weight sharded (ZeRO-3: ``stage3_param_persistence_threshold=0``). Per strategy, in one
pair of processes, alternating the modes round by round:

* ``per_layer``: ``generate`` through the sharded modules, adapter unmerged, no gather (before);
* ``gathered_generate``: gathered once, then ``generate`` through the modules;
* ``gathered_decode``: gathered once, then our decode loop (what training does now).

All-gathers are counted at ``torch.distributed`` (every all-gather entry point, both ranks do
the same); time is rank 0's wall time per rollout, median over the rounds. The host may be
shared: compare the rows of one run, as ratios.

    python -m benchmarks.bench_sharded_generation
    python -m benchmarks.bench_sharded_generation --strategies fsdp2 --rounds 2
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import (
    Workload,
    add_results_dir,
    build_model_dir,
    make_problems,
    median,
    print_table,
    write_json,
)

MODULE = "benchmarks.bench_sharded_generation"
STRATEGIES = ("fsdp2", "zero3")
MODES = ("per_layer", "gathered_generate", "gathered_decode")
GATHERS = (
    "all_gather",
    "all_gather_into_tensor",
    "all_gather_single",
    "_all_gather_base",
    "all_gather_object",
)


def count_all_gathers() -> dict[str, int]:
    """Wrap every all-gather of ``torch.distributed`` (before anything caches them); the live count."""
    import torch.distributed as dist

    counts = {"n": 0}
    for name in GATHERS:
        original = getattr(dist, name, None)
        if original is None:
            continue

        def counted(*args: Any, _original: Any = original, **kwargs: Any) -> Any:
            counts["n"] += 1
            return _original(*args, **kwargs)

        setattr(dist, name, counted)
    return counts


def shard(strategy: str, policy: Any) -> Any:
    """Shard ``policy`` as our strategies do; returns what keeps it alive (the DeepSpeed engine)."""
    import torch

    if strategy == "fsdp2":
        from torch.distributed.device_mesh import init_device_mesh

        from agon_lightning.strategies.fsdp2 import shard as fully_shard_layers

        fully_shard_layers(policy, init_device_mesh("cpu", (2,)), None)
        return None
    import deepspeed

    config = {
        "train_micro_batch_size_per_gpu": 1,
        "zero_allow_untested_optimizer": True,
        "zero_optimization": {
            "stage": 3, "stage3_param_persistence_threshold": 0, "stage3_prefetch_bucket_size": 0,
        },
    }  # fmt: skip
    trainable = [p for n, p in policy.named_parameters() if "lora_" in n]
    engine, *_ = deepspeed.initialize(
        model=policy, model_parameters=trainable, optimizer=torch.optim.SGD(trainable, lr=0.0), config=config
    )
    return engine


def worker(
    rank: int, port: int, strategy: str, model_dir: str, work: Workload, rounds: int
) -> list[dict[str, Any]]:
    """One rank: every mode ``rounds`` times (after a warm-up round); rows with seconds and all-gathers."""
    import contextlib

    counts = count_all_gathers()
    import torch
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE="2",
                      LOCAL_RANK=str(rank))  # fmt: skip
    torch.set_num_threads(1)
    if strategy == "zero3":
        import deepspeed

        deepspeed.init_distributed("gloo")
    else:
        dist.init_process_group("gloo", rank=rank, world_size=2)
    from agon_lightning.adapters.policy import LoraOptions, attach_adapters, load_base, sample_with
    from agon_lightning.game.prompts import Prompts
    from agon_lightning.rollout.hf import HFRollout
    from agon_lightning.strategies import gathered

    base, tokenizer = load_base(model_dir)
    torch.manual_seed(work.seed)
    policy = attach_adapters(base, ("alpha", "beta"), LoraOptions(r=work.lora_r, alpha=2 * work.lora_r))
    keep = shard(strategy, policy)
    trainable = [p for n, p in policy.named_parameters() if "lora_" in n]
    prompts = [Prompts(chat_template=False).draft_prompt(tokenizer, p) for p in make_problems(work.prompts)]
    rollouts = {
        # Unmerged, as sampling through sharded weights was (a merged copy needs whole weights).
        "per_layer": (HFRollout(max_new_tokens=work.max_new_tokens, fused_decode=False, merge_adapter=False),
                      contextlib.nullcontext),
        "gathered_generate": (HFRollout(max_new_tokens=work.max_new_tokens, fused_decode=False), lambda: gathered(policy)),
        "gathered_decode": (HFRollout(max_new_tokens=work.max_new_tokens), lambda: gathered(policy)),
    }  # fmt: skip
    rows = {
        mode: {"strategy": strategy, "mode": mode, "seconds": [], "all_gathers": [], "tokens": []}
        for mode in MODES
    }
    for round_ in range(rounds + 1):
        for mode in MODES:
            rollout, weights = rollouts[mode]
            torch.manual_seed(work.seed + round_)
            dist.barrier()
            before, start = counts["n"], time.perf_counter()
            rb = sample_with(
                policy, rollout, tokenizer, "alpha", prompts, work.generations, False, trainable, weights
            )
            seconds, gathers = time.perf_counter() - start, counts["n"] - before
            if round_ > 0:  # the first round warms up
                rows[mode]["seconds"].append(seconds)
                rows[mode]["all_gathers"].append(gathers)
                rows[mode]["tokens"].append(int(rb.lengths.sum()))
    del keep
    dist.destroy_process_group()
    return list(rows.values())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_strategy(strategy: str, model_dir: Path, work: Workload, rounds: int) -> list[dict[str, Any]]:
    """Both ranks in fresh processes; rank 0's rows (with rank 1's all-gather counts checked equal)."""
    port, outs, procs = free_port(), [], []
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for rank in range(2):
        out = Path(tempfile.mkstemp(suffix=".json")[1])
        config = {"rank": rank, "port": port, "strategy": strategy, "model_dir": str(model_dir),
                  "work": work.__dict__, "rounds": rounds}  # fmt: skip
        cmd = [sys.executable, "-m", MODULE, "--worker", json.dumps(config), str(out)]
        procs.append(
            subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        )
        outs.append(out)
    logs = [p.communicate(timeout=1800)[0] for p in procs]
    for p, log in zip(procs, logs):
        if p.returncode != 0:
            raise RuntimeError(f"{strategy} worker failed:\n{log[-4000:]}")
    rank0, rank1 = (json.loads(o.read_text()) for o in outs)
    for a, b in zip(rank0, rank1):
        a["all_gathers_rank1"] = b["all_gathers"]
    return rank0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--strategies", nargs="+", default=list(STRATEGIES), choices=STRATEGIES)
    parser.add_argument("--prompts", type=int, default=4, help="P prompts per rollout")
    parser.add_argument("--generations", type=int, default=4, help="N samples per prompt")
    parser.add_argument(
        "--max-new-tokens", type=int, default=32, help="T, every completion exactly this long"
    )
    parser.add_argument("--rounds", type=int, default=3, help="measured rounds (after one warm-up)")
    parser.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    add_results_dir(parser)
    args = parser.parse_args()
    if args.worker:
        config = json.loads(args.worker[0])
        rows = worker(config["rank"], config["port"], config["strategy"], config["model_dir"],
                      Workload(**config["work"]), config["rounds"])  # fmt: skip
        Path(args.worker[1]).write_text(json.dumps(rows))
        return
    work = Workload(prompts=args.prompts, generations=args.generations, max_new_tokens=args.max_new_tokens)
    model_dir = build_model_dir(Path(tempfile.mkdtemp(prefix="agon-bench-")), work)
    rows = [row for s in args.strategies for row in run_strategy(s, model_dir, work, args.rounds)]
    table = []
    for row in rows:
        before = next(r for r in rows if r["strategy"] == row["strategy"] and r["mode"] == "per_layer")
        row["seconds_median"] = median(row["seconds"])
        row["all_gathers_median"] = median(row["all_gathers"])
        table.append([
            row["strategy"], row["mode"], f"{row['all_gathers_median']:.0f}", f"{row['seconds_median']:.3f}",
            f"{before['seconds_median'] / row['seconds_median']:.2f}x", f"{median(row['tokens']):.0f}",
        ])  # fmt: skip
    title = f"Sampling under sharding, P={work.prompts} N={work.generations} T={work.max_new_tokens}, 2 gloo processes"
    print_table(title, ["strategy", "mode", "all-gathers / rollout", "s / rollout", "speed-up vs per_layer", "tokens"],
                table)  # fmt: skip
    write_json(
        "sharded_generation",
        {"workload": work.__dict__, "rounds": args.rounds, "rows": rows},
        args.results_dir,
    )


if __name__ == "__main__":
    main()

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
import json
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.common import (
    Workload,
    add_results_dir,
    build_model_dir,
    coin_verifier,
    median,
    print_table,
    spawn,
    work_config,
    write_json,
)
from benchmarks.scale_flops import generation_flops, matmul_flops_per_s, update_flops

TRL_WORKER = "benchmarks.bench_vs_trl"
MODULE = "benchmarks.bench_scale"
WORKER_TIMEOUT_S = 3600  # one 0.6B process on a shared CPU: model build, two steps
CHUNK = 256  # log-prob chunk of the paths section (tokens)


def vs_trl(
    arch: str,
    prompts: int,
    generations: int,
    max_new_tokens: int,
    steps: int,
    rounds: int,
    runs_from: Path | None = None,
) -> dict[str, Any]:
    """``rounds`` of ours, TRL, TRL, ours on the same work; ratios per adjacent pair, medians.

    ``runs_from``: take the runs from an earlier result JSON instead (the table and the matmul
    ceiling are computed again).
    """  # fmt: skip
    import trl
    from transformers import AutoConfig

    work = Workload(
        prompts=prompts, generations=generations, max_new_tokens=max_new_tokens, steps=steps, arch=arch
    )
    order = ["ours", "trl", "trl", "ours"] * rounds
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as root:
        if runs_from is not None:
            recorded = json.loads(runs_from.read_text())
            work, runs, order = Workload(**recorded["workload"]), recorded["runs"], recorded["order"]
        model_dir = build_model_dir(Path(root), work)
        config = AutoConfig.from_pretrained(model_dir)
        for impl in order if runs_from is None else []:
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
            "step_s": median([r["step_s"] for r in rs]), "cpu_step_s": median([r["cpu_step_s"] for r in rs]),
            "peak_rss_mb": median([r["peak_rss_mb"] for r in rs]),
            "generate_gflops": gen_flops / gen_s / 1e9, "update_gflops": upd_flops / rest_s / 1e9,
        }  # fmt: skip
        p = per_impl[impl]
        table_rows.append([impl, p["step_s"], p["cpu_step_s"], p["peak_rss_mb"] / 1024, p["generate_gflops"],
                           p["generate_gflops"] * 1e9 / peak_gen, p["update_gflops"],
                           p["update_gflops"] * 1e9 / peak_upd])  # fmt: skip
    ratios = [o["step_s"] / t["step_s"] for o, t in pairs]
    cpu_ratios = [o["cpu_step_s"] / t["cpu_step_s"] for o, t in pairs]
    memory = [o["peak_rss_mb"] / t["peak_rss_mb"] for o, t in pairs]
    table = print_table(
        f"{arch}, fp32, ours (game: grpo) vs TRL {trl.__version__} GRPOTrainer, P={prompts} N={generations} "
        f"T={max_new_tokens}, CPU 1 thread, order {' '.join(order)}; ours/TRL per adjacent pair: wall "
        f"{', '.join(f'{r:.3f}' for r in ratios)} (median {median(ratios):.3f}), CPU time "
        f"{', '.join(f'{r:.3f}' for r in cpu_ratios)} (median {median(cpu_ratios):.3f}), peak RSS "
        f"{', '.join(f'{m:.3f}' for m in memory)}; plain matmul: {peak_gen / 1e9:.1f} GFLOP/s at "
        f"[{rows_gen}, {config.hidden_size}]×[{config.hidden_size}, {widest}], {peak_upd / 1e9:.1f} at "
        f"[{rows_upd}, …]",
        ["impl", "s/step", "CPU s/step", "peak RSS GiB", "generation GFLOP/s", "of matmul", "rest of step GFLOP/s", "of matmul"],
        table_rows,
    )  # fmt: skip
    return {"table": table, "order": order, "ratio_per_pair": ratios, "cpu_ratio_per_pair": cpu_ratios, "rss_ratio_per_pair": memory,
            "matmul_gflops": {"generation": peak_gen / 1e9, "update": peak_upd / 1e9},
            "flops": {"generation": gen_flops, "update": upd_flops}, "summary": per_impl, "runs": runs,
            "workload": work.__dict__}  # fmt: skip


# ---------------------------------------------------------------------------- every path, 2 steps
def run_paths(config: dict[str, Any]) -> dict[str, Any]:
    """In a fresh process: 2 Agon steps of ``work`` in ``dtype``, a checkpoint, a bundle, a cascade prediction."""
    import time

    import lightning as L
    import torch

    from agon_lightning.adapters.policy import LoraOptions
    from agon_lightning.data.base import ProblemDataModule
    from agon_lightning.deploy.bundle import save_bundle
    from agon_lightning.deploy.cascade import Cascade
    from agon_lightning.game.prompts import Prompts
    from agon_lightning.rollout import HFRollout
    from agon_lightning.training.module import AgonModule, GRPOOptions
    from benchmarks.common import LEARNING_RATE, LORA_TARGETS, StepTimer, make_problems, workload_from

    work, dtype, out = workload_from(config), config["dtype"], Path(config["out"])

    class FixedProblems(ProblemDataModule):
        def load_train(self):
            return make_problems(work.prompts * (work.steps + 1), work.seed)

        def load_val(self):
            return []

    mismatch: list[float] = []

    class Mismatch(L.Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            value = trainer.callback_metrics.get("train/logprob_mismatch")
            mismatch.append(float("nan") if value is None else float(value))

    L.seed_everything(work.seed, verbose=False)
    module = AgonModule(
        model_name_or_path=config["model_dir"], dtype=dtype, game="agon",
        lora=LoraOptions(r=work.lora_r, alpha=2 * work.lora_r, target_modules=LORA_TARGETS),
        grpo=GRPOOptions(num_generations=work.generations, logprob_chunk_size=CHUNK),
        rollout=HFRollout(max_new_tokens=work.max_new_tokens), verifier=coin_verifier(),
        prompts=Prompts(chat_template=False), gradient_checkpointing=True, max_grad_norm=1.0,
        optimizer=lambda params: torch.optim.AdamW(params, lr=LEARNING_RATE, weight_decay=0.0),
        validate_at_start=False,
    )  # fmt: skip
    timer = StepTimer()
    trainer = L.Trainer(
        max_steps=work.steps + 1, limit_val_batches=0, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, accelerator="cpu", devices=1,
        callbacks=[timer.lightning_callback(), Mismatch()], num_sanity_val_steps=0, default_root_dir=str(out),
    )  # fmt: skip
    trainer.fit(module, FixedProblems(batch_size=work.prompts, seed=work.seed))
    result = timer.summary()
    start = time.perf_counter()
    trainer.save_checkpoint(out / "last.ckpt")
    bundle = save_bundle(module, out / "bundle")
    cascade = Cascade.from_pretrained(str(bundle), device="cpu")
    answers = cascade.solve([p.question for p in make_problems(2, work.seed + 1)])
    result.update(
        after_s=time.perf_counter() - start, mismatch_per_step=mismatch, skipped_steps=int(module.skipped_steps),
        checkpoint_mb=(out / "last.ckpt").stat().st_size / 2**20, cascade_answers=len(answers),
    )  # fmt: skip
    return result


def paths(arch: str, prompts: int, generations: int, max_new_tokens: int, steps: int) -> dict[str, Any]:
    """``run_paths`` in fp32 and in bf16, each in a fresh process; one table."""
    work = Workload(
        prompts=prompts, generations=generations, max_new_tokens=max_new_tokens, steps=steps, arch=arch
    )
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as root:
        model_dir = build_model_dir(Path(root), work)
        for dtype in ("float32", "bfloat16"):
            out = Path(root) / dtype
            config = work_config(work, dtype=dtype, model_dir=str(model_dir), out=str(out))
            results[dtype] = spawn(MODULE, config, WORKER_TIMEOUT_S)
            print(f"{dtype}: {results[dtype]}", flush=True)
    rows = [[dtype, r["step_s"], r["generate_s"], r["update_s"], r["peak_rss_mb"] / 1024,
             ", ".join(f"{m:.2e}" for m in r["mismatch_per_step"]), r["skipped_steps"], r["after_s"]]
            for dtype, r in results.items()]  # fmt: skip
    table = print_table(
        f"{arch} (random weights), 2 Agon steps on CPU, 1 thread: P={prompts} N={generations} T={max_new_tokens}, "
        f"decode loop, update with chunked log-probs ({CHUNK}) and checkpointing, non-finite guard, then a "
        "checkpoint, a bundle and a 2-problem cascade prediction",
        ["dtype", "s/step (2nd)", "generate s", "update s", "peak RSS GiB", "logprob mismatch per step",
         "skipped steps", "checkpoint+bundle+cascade s"],
        rows,
    )  # fmt: skip
    return {"table": table, "workload": work.__dict__, "results": results}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--arch", default="qwen3-0.6b", help="a shape of agon_lightning.infra.shapes.QWEN3, or tiny"
    )
    parser.add_argument("--vs-trl", action="store_true", help="ours vs TRL instead of the paths section")
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--generations", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--steps", type=int, default=1, help="measured steps after the warm-up step")
    parser.add_argument("--rounds", type=int, default=1, help="repeats of the ours, TRL, TRL, ours order")
    parser.add_argument("--runs-from", type=Path, help="--vs-trl: recompute the table from this result JSON")
    add_results_dir(parser)
    cli = parser.parse_args()
    if cli.vs_trl:
        args = (
            cli.arch,
            cli.prompts,
            cli.generations,
            cli.max_new_tokens,
            cli.steps,
            cli.rounds,
            cli.runs_from,
        )
        result = vs_trl(*args)
        write_json(f"scale_vs_trl_{cli.arch}", result, cli.results_dir)
    else:
        result = paths(cli.arch, cli.prompts, cli.generations, cli.max_new_tokens, cli.steps)
        write_json(f"scale_paths_{cli.arch}", result, cli.results_dir)


if __name__ == "__main__":
    from benchmarks.common import worker_main

    if not worker_main(run_paths):
        main()

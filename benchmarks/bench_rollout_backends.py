"""Step time of each rollout backend: our decode loop, HF ``generate``, one vLLM engine holding both adapters.

The default job's step (``configs/agon.yaml``: the shipped tiny Qwen3, P = 16 chain-sum
problems, N = 8 drafts each and 8 challenges, up to 80 new tokens, float32), trained with
each backend in a fresh process with one torch thread, with ``agon``'s allocator setting.
``hf`` is ``HFRollout`` as shipped (our decode loop), ``hf_generate`` the same with
``fused_decode: false`` (``transformers.generate``, adapter merged). Completions end at EOS, so
the backends do not generate exactly the same number of tokens: the table reports tokens per
step and generation tokens/s beside the step time. vLLM also pushes both adapters to its
engine after every step (written as safetensors, registered under new ids); that cost is
inside its generation time.

    python -m benchmarks.bench_rollout_backends
    python -m benchmarks.bench_rollout_backends --steps 2 --backends hf
    python -m benchmarks.bench_rollout_backends --steps 1 --backends hf --prompts 2 --generations 2 --max-new-tokens 8
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from benchmarks.common import StepTimer, add_results_dir, median, print_table, spawn, worker_main, write_json

MODULE = "benchmarks.bench_rollout_backends"
BACKENDS = ("hf", "hf_generate", "vllm")


def run(config: dict[str, Any]) -> dict[str, Any]:
    """One backend, ``1 + steps`` training steps of the default job (or of its ``shape``); per-step times."""
    import lightning as L
    import torch

    from agon_lightning.data.reasoning_gym import ReasoningGymDataModule
    from agon_lightning.infra.allocator import reuse_freed_memory
    from agon_lightning.rollout.hf import HFRollout
    from agon_lightning.rollout.vllm import VLLMRollout
    from agon_lightning.training.module import AgonModule
    from agon_lightning.training.options import GRPOOptions
    from agon_lightning.verifiers.reasoning_gym import ReasoningGymVerifier

    steps, backend = config["steps"], config["backend"]
    prompts, generations, max_new_tokens = config["shape"]
    reuse_freed_memory()
    L.seed_everything(0, verbose=False)
    # vLLM's default sizes its KV cache from the machine's memory; 1 GiB holds this job many times over.
    rollout = (
        VLLMRollout(max_new_tokens=max_new_tokens, kv_cache_memory_gib=1.0)
        if backend == "vllm"
        else HFRollout(max_new_tokens=max_new_tokens, fused_decode=backend == "hf")
    )
    module = AgonModule(
        grpo=GRPOOptions(num_generations=generations),
        rollout=rollout,
        verifier=ReasoningGymVerifier(),
        optimizer=lambda params: torch.optim.AdamW(params, lr=4e-4, weight_decay=0.0),
        validate_at_start=False,
    )
    data = ReasoningGymDataModule(
        tasks={"chain_sum": {"min_terms": 3, "max_terms": 4, "min_digits": 2, "max_digits": 2}},
        train_size=prompts * (steps + 1), val_size=1, batch_size=prompts, data_seed=1,
    )  # fmt: skip
    timer = StepTimer()
    trainer = L.Trainer(
        max_steps=steps + 1, limit_val_batches=0, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, accelerator="cpu", devices=1,
        callbacks=[timer.lightning_callback()], num_sanity_val_steps=0,
    )  # fmt: skip
    start = time.perf_counter()
    module.configure_model()
    trainer.fit(module, data)
    summary = timer.summary()
    summary["first_step_s"] = timer.ends[0] - start  # includes the engine's start for vLLM
    return summary


def table_of(
    results: dict[str, dict[str, Any]], shape: tuple[int, int, int], steps: int
) -> tuple[str, list[str], list[list[Any]]]:
    """The table's title, columns and rows: one row a backend, from its worker's summary."""
    prompts, generations, max_new_tokens = shape
    rows = []
    for backend, r in results.items():
        tokens = r["rollout_tokens"]
        rows.append([
            backend, r["step_s"], r["generate_s"], r["update_s"], tokens, tokens / r["generate_s"],
            r["first_step_s"], r["peak_rss_mb"],
        ])  # fmt: skip
    title = (
        f"Rollout backends, the default job's step on this CPU (P={prompts} N={generations} "
        f"T={max_new_tokens}, median of {steps} steps, 1 thread)"
    )
    columns = ["backend", "step s", "generate s", "update s", "rollout tokens/step", "gen tokens/s",
               "first step s (incl. start)", "peak RSS MB"]  # fmt: skip
    return title, columns, rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=4, help="measured steps per backend (after 1 warm-up)")
    parser.add_argument("--backends", nargs="+", default=list(BACKENDS), choices=BACKENDS)
    parser.add_argument("--prompts", type=int, default=16, help="P, problems per step (the default job's)")
    parser.add_argument(
        "--generations", type=int, default=8, help="N, drafts per problem (the default job's)"
    )
    parser.add_argument("--max-new-tokens", type=int, default=80, help="the default job's")
    add_results_dir(parser)
    args = parser.parse_args()
    shape = (args.prompts, args.generations, args.max_new_tokens)
    results = {
        b: spawn(MODULE, {"backend": b, "steps": args.steps, "shape": shape}, timeout=1800)
        for b in args.backends
    }
    table = print_table(*table_of(results, shape, args.steps))
    write_json(
        "rollout_backends",
        {"steps": args.steps, "shape": shape, "median_step_s": {b: median(r["step_s_all"]) for b, r in results.items()},
         "results": results, "table": table},
        args.results_dir,
    )  # fmt: skip


if __name__ == "__main__":
    if not worker_main(run):
        main()

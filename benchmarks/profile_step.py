"""Where one ``game: grpo`` (or Agon) training step spends its time: ``torch.profiler`` on one step.

The same tiny Qwen3 and workload as ``bench_vs_trl.py`` (one thread), one warm-up step, then
one profiled step. Prints the top operators by self CPU time and the top ``record_function``
regions (``agon.play``: sampling, verifying; ``agon.update``: the forward, backward and optimizer
step), which is what the README's profile tables quote, and writes them to ``profile_GAME.json``.

    python -m benchmarks.profile_step --prompts 16 --generations 8 --max-new-tokens 80
    python -m benchmarks.profile_step --game agon --rows 25
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from benchmarks.common import (
    Workload,
    add_results_dir,
    build_model_dir,
    coin_verifier,
    make_problems,
    single_thread,
    write_json,
)


def profile(work: Workload, game: str) -> Any:
    """One warm-up step, then one profiled step of ``AgonModule``; the profiler's averages per operator."""
    import lightning as L

    from agon_lightning.adapters.policy import LoraOptions
    from agon_lightning.data.base import ProblemDataModule
    from agon_lightning.game.prompts import Prompts
    from agon_lightning.infra.allocator import reuse_freed_memory
    from agon_lightning.rollout.hf import HFRollout
    from agon_lightning.training.module import AgonModule, GRPOOptions
    from benchmarks.common import LEARNING_RATE, LORA_TARGETS

    class FixedProblems(ProblemDataModule):
        def load_train(self):
            return make_problems(work.prompts * 2, work.seed)

        def load_val(self):
            return []

    reuse_freed_memory()  # as `agon fit` runs
    prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])

    class Profile(L.Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            if batch_idx == 1:
                prof.start()

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            if batch_idx == 1:
                prof.stop()

    with tempfile.TemporaryDirectory() as root:
        L.seed_everything(work.seed, verbose=False)
        module = AgonModule(
            model_name_or_path=str(build_model_dir(Path(root), work)), game=game,
            lora=LoraOptions(r=work.lora_r, alpha=2 * work.lora_r, target_modules=LORA_TARGETS),
            grpo=GRPOOptions(num_generations=work.generations, kl_beta=work.kl_beta),
            rollout=HFRollout(max_new_tokens=work.max_new_tokens), verifier=coin_verifier(),
            prompts=Prompts(chat_template=False), validate_at_start=False,
            optimizer=lambda params: torch.optim.AdamW(params, lr=LEARNING_RATE, weight_decay=0.0),
        )  # fmt: skip
        for name in ("play", "update"):  # labelled regions in the profile (the step calls both by name)
            setattr(module, name, _labelled(getattr(module, name), f"agon.{name}"))
        trainer = L.Trainer(
            max_steps=2, limit_val_batches=0, logger=False, enable_checkpointing=False,
            enable_progress_bar=False, enable_model_summary=False, accelerator="cpu", devices=1,
            callbacks=[Profile()], num_sanity_val_steps=0,
        )  # fmt: skip
        trainer.fit(module, FixedProblems(batch_size=work.prompts, seed=work.seed))
    return prof.key_averages()


def top_operators(averages: Any, rows: int) -> list[dict[str, Any]]:
    """The ``rows`` operators with the most self CPU time: name, self CPU ms, calls."""
    ranked = sorted(averages, key=lambda e: e.self_cpu_time_total, reverse=True)[:rows]
    return [{"op": e.key, "self_cpu_ms": e.self_cpu_time_total / 1e3, "calls": e.count} for e in ranked]


def _labelled(fn: Callable[..., Any], label: str) -> Callable[..., Any]:
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        with torch.profiler.record_function(label):
            return fn(*args, **kwargs)

    return wrapped


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--game", choices=["grpo", "agon"], default="grpo")
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--generations", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=80)
    parser.add_argument("--beta", type=float, default=0.0)
    parser.add_argument("--rows", type=int, default=30)
    add_results_dir(parser)
    cli = parser.parse_args()
    single_thread()
    work = Workload(
        prompts=cli.prompts, generations=cli.generations, max_new_tokens=cli.max_new_tokens, kl_beta=cli.beta
    )
    averages = profile(work, cli.game)
    table = averages.table(sort_by="self_cpu_time_total", row_limit=cli.rows)
    print(table)
    write_json(
        f"profile_{cli.game}",
        {
            "game": cli.game,
            "workload": work.__dict__,
            "table": table,
            "top": top_operators(averages, cli.rows),
        },
        cli.results_dir,
    )


if __name__ == "__main__":
    main()

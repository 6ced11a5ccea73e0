"""Where every second of a Countdown training step goes, stage by stage, at one and two threads.

``configs/countdown.yaml`` as ``agon fit`` builds it (the tiny-countdown base, Agon, N = 8,
``max_new_tokens`` = 192, the config's P), trained in this process for one warm-up step and
``--steps`` measured ones. Each measured step's wall time (from the first callback's
``on_train_batch_start`` to the last one's ``on_train_batch_end``) is split into exclusive
stages, each timed around the call that does it:

- ``generate/drafts`` and ``generate/challenges``: sampling (the rollout's ``generate``);
- ``verify``: the verifier on every completion; ``summaries``: the challenger's prompts
  (summarizer and template);
- ``play/other``: the rest of the game's play (rewards, records, the features' hooks);
- ``update/forward``: the update's forward, loss and statistics; ``update/backward``;
  ``update/optimizer``: gradient clipping and the optimizer's step;
- ``logging``: ``log_dict`` and every callback hook of the step (progress, trace lengths,
  checkpoints, sample games...);
- ``evaluation (amortised)``: one held-out evaluation on ``--val-problems`` problems, timed twice
  (the first also samples the frozen base, which later ones reuse), scaled to the config's
  held-out set and spread over the run: ``(first + (E - 1) · later) / steps``, ``E`` evaluations in
  ``trainer.limit_train_batches`` steps (before the first step, every ``val_check_interval``, after
  the last);
- ``other``: what is left of the wall time (Lightning's loop, the data loader, advantages).

    python -m benchmarks.profile_countdown                      # 1 and 2 threads, 3 steps each
    python -m benchmarks.profile_countdown --threads 1 --steps 5
    python -m benchmarks.profile_countdown --smoke              # seconds: 2 problems x 2 drafts of 8 tokens

Writes ``profile_countdown.json`` (``--results-dir``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.common import add_results_dir, median, print_table, write_json

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs" / "countdown.yaml"
STAGES = (
    "generate/drafts", "generate/challenges", "summaries", "verify", "play/other",
    "update/forward", "update/backward", "update/optimizer", "logging",
)  # fmt: skip
SMOKE = [
    "--data.init_args.batch_size=2",
    "--model.grpo.num_generations=2",
    "--model.rollout.init_args.max_new_tokens=8",
]
WORKER = "--worker"


class Stages:
    """Exclusive seconds per stage: a timed call's time, less that of the timed calls inside it."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._stack: list[list[Any]] = []  # [label, start, inner seconds]

    def wrap(self, fn: Callable[..., Any], label: str | Callable[[list[str]], str]) -> Callable[..., Any]:
        """``fn`` timed under ``label`` (or ``label(stack of open labels)``, chosen at the call)."""

        def timed(*args: Any, **kwargs: Any) -> Any:
            name = label if isinstance(label, str) else label([f[0] for f in self._stack])
            frame = [name, time.perf_counter(), 0.0]
            self._stack.append(frame)
            try:
                return fn(*args, **kwargs)
            finally:
                self._stack.pop()
                spent = time.perf_counter() - frame[1]
                self.seconds[name] = self.seconds.get(name, 0.0) + spent - frame[2]
                if self._stack:
                    self._stack[-1][2] += spent

        return timed

    def take(self) -> dict[str, float]:
        out, self.seconds = self.seconds, {}
        return out


def _sample_label(stack: list[str]) -> str:
    return "generate/drafts" if "drafts" in stack else "generate/challenges"


def instrument(module: Any, trainer: Any, stages: Stages) -> None:
    """Time ``module``'s stages and every callback's hooks (instance attributes: nothing else changes)."""
    module.play = stages.wrap(module.play, "play/other")
    module.draft = stages.wrap(module.draft, "drafts")  # its own time: prompts; sampling and verify inside
    module.sample = stages.wrap(module.sample, _sample_label)
    module.verify = stages.wrap(module.verify, "verify")
    module.read = stages.wrap(module.read, "summaries")
    module.update = stages.wrap(module.update, "update/forward")
    module.manual_backward = stages.wrap(module.manual_backward, "update/backward")
    module.clip_gradients = stages.wrap(module.clip_gradients, "update/optimizer")
    module.log_dict = stages.wrap(module.log_dict, "logging")
    hooks = ("on_train_batch_start", "on_train_batch_end", "on_before_backward", "on_after_backward",
             "on_before_optimizer_step", "on_before_zero_grad")  # fmt: skip
    for callback in trainer.callbacks:
        for hook in hooks:
            setattr(callback, hook, stages.wrap(getattr(callback, hook), "logging"))


def profile(threads: int, steps: int, val_problems: int, overrides: list[str]) -> dict[str, Any]:
    """One warm-up and ``steps`` measured steps of the Countdown config; seconds per stage and step."""
    import lightning as L
    import torch

    from agon_lightning.cli.build import from_config

    torch.set_num_threads(threads)
    stages = Stages()
    steps_rows: list[dict[str, float]] = []

    class Clock(L.Callback):
        """First and last of the callbacks: a step's wall time, and its stages once it ends."""

        def __init__(self, first: bool) -> None:
            self.first = first

        def on_train_start(self, trainer, pl_module):
            if self.first:
                for optimizer in trainer.optimizers:
                    optimizer.step = stages.wrap(optimizer.step, "update/optimizer")

        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            if self.first:
                stages.take()
                self.start = time.perf_counter()

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            if not self.first:
                wall = time.perf_counter() - start_clock.start
                row = {k: round(v, 4) for k, v in stages.take().items()}
                row["drafts"] = row.get("drafts", 0.0)  # prompt building: part of play/other
                row["play/other"] = round(row.get("play/other", 0.0) + row.pop("drafts"), 4)
                row["wall"] = round(wall, 4)
                row["other"] = round(wall - sum(row.get(s, 0.0) for s in STAGES), 4)
                steps_rows.append(row)

    with tempfile.TemporaryDirectory() as root:
        args = [
            f"--trainer.limit_train_batches={steps + 1}", "--trainer.limit_val_batches=0",
            "--model.validate_at_start=false", f"--trainer.default_root_dir={root}",
            "--trainer.logger=false", "--trainer.enable_progress_bar=false", *overrides,
        ]  # fmt: skip
        module, data, trainer = from_config(str(CONFIG), *args)
        start_clock, end_clock = Clock(first=True), Clock(first=False)
        trainer.callbacks.insert(0, start_clock)
        trainer.callbacks.append(end_clock)
        instrument(module, trainer, stages)
        t0 = time.perf_counter()
        trainer.fit(module, data)
        fit_s = time.perf_counter() - t0
        evaluation = amortised_evaluation(module, data, val_problems)
    measured = steps_rows[1:]
    keys = [*STAGES, "other", "wall"]
    per_step = {k: median([r.get(k, 0.0) for r in measured]) for k in keys}
    per_step["evaluation (amortised)"] = evaluation["amortised_s"]
    return {
        "threads": threads,
        "steps": measured,
        "median": per_step,
        "evaluation": evaluation,
        "fit_s": fit_s,
    }


def amortised_evaluation(module: Any, data: Any, problems: int) -> dict[str, Any]:
    """One evaluation on the first ``problems`` held-out problems, twice, scaled to the config's run."""
    import yaml

    config = yaml.safe_load(CONFIG.read_text())["trainer"]
    run_steps, every = config["limit_train_batches"], config["val_check_interval"]
    evaluations = 2 + (run_steps - 1) // every  # before the first step, every `every` steps, after the last
    held_out = list(data.val_problems)
    subset = held_out[:problems]
    times = []
    for _ in range(2):
        t0 = time.perf_counter()
        module.evaluator.run(module, [subset])
        times.append(time.perf_counter() - t0)
    scale = len(held_out) / max(len(subset), 1)
    first, later = times[0] * scale, times[1] * scale
    return {
        "problems_timed": len(subset), "held_out": len(held_out), "first_s": first, "later_s": later,
        "evaluations_per_run": evaluations, "run_steps": run_steps,
        "amortised_s": (first + (evaluations - 1) * later) / run_steps,
    }  # fmt: skip


def worker(config: dict[str, Any]) -> None:
    result = profile(config["threads"], config["steps"], config["val_problems"], config["overrides"])
    print("RESULT " + json.dumps(result), flush=True)


def spawn(threads: int, steps: int, val_problems: int, overrides: list[str]) -> dict[str, Any]:
    """:func:`profile` in a fresh process with ``threads`` intra-op threads."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads),
           "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}  # fmt: skip
    config = {"threads": threads, "steps": steps, "val_problems": val_problems, "overrides": overrides}
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.profile_countdown", WORKER, json.dumps(config)],
        capture_output=True, text=True, env=env, cwd=ROOT,
    )  # fmt: skip
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(
            f"profile at {threads} threads failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}"
        )
    return json.loads(lines[-1][len("RESULT ") :])


def table(results: list[dict[str, Any]]) -> str:
    rows = []
    for stage in [*STAGES, "other", "evaluation (amortised)"]:
        row: list[Any] = [stage]
        for r in results:
            total = r["median"]["wall"] + r["median"]["evaluation (amortised)"]
            seconds = r["median"][stage]
            row += [seconds, f"{100 * seconds / total:.1f}%" if total else "-"]
        rows.append(row)
    rows.append(["step (wall)", *(v for r in results for v in (r["median"]["wall"], ""))])
    rows.append(
        [
            "step + evaluation",
            *(v for r in results for v in (r["median"]["wall"] + r["median"]["evaluation (amortised)"], "")),
        ]
    )
    columns = ["stage", *(c for r in results for c in (f"{r['threads']} thread(s), s", "share"))]
    return print_table("Countdown step, median seconds per measured step", columns, rows)


def main() -> None:
    if WORKER in sys.argv:
        worker(json.loads(sys.argv[sys.argv.index(WORKER) + 1]))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3, help="measured steps, after one warm-up")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="torch threads, one run each")
    parser.add_argument(
        "--val-problems",
        type=int,
        default=100,
        help="held-out problems timed, one batch as the config has (scaled to all)",
    )
    parser.add_argument(
        "--smoke", action="store_true", help="a shape that runs in seconds: " + " ".join(SMOKE)
    )
    add_results_dir(parser)
    cli = parser.parse_args()
    if cli.steps < 1 or cli.val_problems < 1 or min(cli.threads) < 1:
        parser.error(
            f"--steps, --val-problems and --threads must be >= 1, got {cli.steps}, {cli.val_problems}, {cli.threads}"
        )
    overrides = SMOKE if cli.smoke else []
    results = [spawn(t, cli.steps, cli.val_problems, overrides) for t in cli.threads]
    text = table(results)
    write_json(
        "profile_countdown",
        {"config": str(CONFIG.relative_to(ROOT)), "overrides": overrides, "table": text, "results": results,
         "unaccounted_share": max(abs(r["median"]["other"]) / r["median"]["wall"] for r in results if r["median"]["wall"])},
        cli.results_dir,
    )  # fmt: skip


if __name__ == "__main__":
    main()

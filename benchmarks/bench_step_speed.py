"""One checkout's Countdown training step against another's, side by side: the speed-up of a change.

Each round runs ``configs/countdown.yaml`` (as ``agon fit`` builds it; no evaluation) in a fresh
process per checkout, with ``PYTHONPATH`` at that checkout, for one warm-up step and ``--steps``
measured ones, the same seed for both; rounds alternate the two checkouts (base, ours, base,
ours...), so a machine shared with other jobs slows both alike. Reported: each side's median
step time over every measured step of every round, the spread (min and max of the rounds'
medians), and ``ours / base``.

    git worktree add /tmp/base HEAD~1
    python -m benchmarks.bench_step_speed --base /tmp/base                # 3 rounds, 3 steps each
    python -m benchmarks.bench_step_speed --smoke                         # seconds; this checkout twice
    python -m benchmarks.bench_step_speed --ours-override=--model.dtype=bfloat16   # one checkout, two settings
    python -m benchmarks.bench_step_speed --ours-matmul-precision medium           # float32 products in bf16 (oneDNN)

Writes ``step_speed.json`` (``--results-dir``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from benchmarks.common import add_results_dir, print_table, write_json

ROOT = Path(__file__).resolve().parents[1]
SMOKE = [
    "--data.init_args.batch_size=2",
    "--model.grpo.num_generations=2",
    "--model.rollout.init_args.max_new_tokens=8",
]
# The step loop a worker runs: only what both checkouts have (from_config, Lightning's callbacks).
WORKER = """
import json, sys, tempfile, time
import lightning as L, torch
import agon_lightning
from agon_lightning.cli.build import from_config
config = json.loads(sys.argv[1])
torch.set_num_threads(config["threads"])
if config["matmul_precision"] is not None:
    torch.set_float32_matmul_precision(config["matmul_precision"])
ends = []
class Clock(L.Callback):
    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        self.start = time.perf_counter()
    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        ends.append(time.perf_counter() - self.start)
with tempfile.TemporaryDirectory() as root:
    module, data, trainer = from_config(
        config["config"], f"--trainer.limit_train_batches={config['steps'] + 1}", "--trainer.limit_val_batches=0",
        "--model.validate_at_start=false", f"--trainer.default_root_dir={root}", "--trainer.logger=false",
        "--trainer.enable_progress_bar=false", f"--seed_everything={config['seed']}", *config["overrides"],
    )
    trainer.callbacks.insert(0, Clock())
    trainer.fit(module, data)
print("RESULT " + json.dumps({"package": agon_lightning.__file__, "step_s": ends[1:],
                             "matmul_precision": torch.get_float32_matmul_precision()}), flush=True)
"""


def run_checkout(
    checkout: Path,
    steps: int,
    threads: int,
    seed: int,
    overrides: list[str],
    matmul_precision: str | None = None,
) -> list[float]:
    """Seconds of each measured step of ``checkout``'s Countdown config, in a fresh process
    (``matmul_precision``: ``torch.set_float32_matmul_precision``'s, before the run is built)."""
    env = {**os.environ, "PYTHONPATH": str(checkout), "OMP_NUM_THREADS": str(threads),
           "MKL_NUM_THREADS": str(threads), "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1"}  # fmt: skip
    config = {"config": str(checkout / "configs" / "countdown.yaml"), "steps": steps, "threads": threads,
              "seed": seed, "overrides": overrides, "matmul_precision": matmul_precision}  # fmt: skip
    proc = subprocess.run(
        [sys.executable, "-c", WORKER, json.dumps(config)],
        capture_output=True,
        text=True,
        env=env,
        cwd=checkout,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(
            f"the step loop of {checkout} failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}"
        )
    result = json.loads(lines[-1][len("RESULT ") :])
    if not Path(result["package"]).resolve().is_relative_to(checkout.resolve()):
        raise RuntimeError(f"the worker for {checkout} imported agon_lightning from {result['package']}")
    if result["matmul_precision"] != (matmul_precision or "highest"):
        raise RuntimeError(f"the worker for {checkout} ran at matmul precision {result['matmul_precision']!r}, "
                           f"not {matmul_precision!r}")  # fmt: skip
    return result["step_s"]


def commit(checkout: Path) -> str:
    """``checkout``'s commit, with ``+changes`` where its work tree differs from it (``?`` outside git)."""
    git = ["git", "-C", str(checkout)]
    head = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    if head.returncode != 0:
        return "?"
    dirty = subprocess.run(
        [*git, "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True
    )
    return head.stdout.strip() + ("+changes" if dirty.stdout.strip() else "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=Path, default=ROOT, help="the baseline checkout (default: this one)")
    parser.add_argument("--ours", type=Path, default=ROOT, help="the checkout measured (default: this one)")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds (one run of each checkout)")
    parser.add_argument("--steps", type=int, default=3, help="measured steps per run, after one warm-up")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per run")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--smoke", action="store_true", help="seconds: " + " ".join(SMOKE))
    for side in ("base", "ours"):
        parser.add_argument(
            f"--{side}-override", action="append", default=[], metavar="--KEY=VALUE",
            help=f"a config override for the {side} side only (repeatable; write it as --{side}-override=--KEY=VALUE): "
            "one checkout's step under two settings",
        )  # fmt: skip
        parser.add_argument(
            f"--{side}-matmul-precision", choices=("highest", "high", "medium"), default=None,
            help=f"torch.set_float32_matmul_precision for the {side} side (default: torch's, highest); on a CPU "
            "with oneDNN, medium runs float32 matrix products in bf16",
        )  # fmt: skip
    add_results_dir(parser)
    cli = parser.parse_args()
    if min(cli.rounds, cli.steps, cli.threads) < 1:
        parser.error(
            f"--rounds, --steps and --threads must be >= 1, got {cli.rounds}, {cli.steps}, {cli.threads}"
        )
    common = SMOKE if cli.smoke else []
    overrides = {"base": [*common, *cli.base_override], "ours": [*common, *cli.ours_override]}
    sides: dict[str, list[list[float]]] = {"base": [], "ours": []}
    for round_ in range(cli.rounds):
        for side in ("base", "ours"):
            precision = getattr(cli, f"{side}_matmul_precision")
            steps = run_checkout(
                getattr(cli, side), cli.steps, cli.threads, cli.seed, overrides[side], precision
            )
            sides[side].append(steps)
            print(f"round {round_ + 1} {side}: " + ", ".join(f"{s:.3f}" for s in steps), flush=True)
    summary = {
        side: {
            "median_step_s": statistics.median(s for run in runs for s in run),
            "round_medians_s": [statistics.median(run) for run in runs],
        }
        for side, runs in sides.items()
    }
    ratio = summary["ours"]["median_step_s"] / summary["base"]["median_step_s"]
    rows = [
        [side, s["median_step_s"], min(s["round_medians_s"]), max(s["round_medians_s"])]
        for side, s in summary.items()
    ]
    rows.append(["ours / base", ratio, "", ""])
    text = print_table(
        f"Countdown step, {cli.threads} thread(s), {cli.rounds} alternating rounds of {cli.steps} steps",
        ["checkout", "median step, s", "min round median", "max round median"],
        rows,
    )
    write_json(
        "step_speed",
        {"base": str(cli.base), "ours": str(cli.ours), "commits": {"base": commit(cli.base), "ours": commit(cli.ours)},
         "overrides": overrides, "threads": cli.threads,
         "matmul_precision": {"base": cli.base_matmul_precision, "ours": cli.ours_matmul_precision},
         "table": text, "steps_s": sides, "summary": summary, "ratio": ratio},
        cli.results_dir,
    )  # fmt: skip


if __name__ == "__main__":
    main()

"""What the training callbacks cost: ``agon fit`` with them on versus off, in wall-clock time.

"On" is the embedded default, ``configs/agon.yaml``, as shipped. "Off" is the same config with
the callbacks from ``agon_lightning.callbacks`` (checkpoints, trace lengths, divergence,
samples) removed from ``trainer.callbacks``; the others stay, and Lightning's default
``ModelCheckpoint`` (a save after each validation) comes back, as before they existed. Runs
alternate on/off/off/on/... so drift in a shared machine's load hits both sides alike.
Each run is a fresh ``agon fit`` process with one intra-op thread, timed from start to exit.
A shared machine's load moves wall times by more than the callbacks cost, so every run also
carries Lightning's ``SimpleProfiler``, and the seconds spent inside the measured callbacks'
hooks are reported next to the profiled total: a share that load barely moves.

    python -m benchmarks.bench_callbacks --model agon:tiny-qwen3 --steps 20 --repeats 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from benchmarks.common import add_results_dir, print_table, write_json

ROOT = Path(__file__).resolve().parents[1]
MEASURED = ("AgonCheckpoint", "TraceLengthMonitor", "DivergenceMonitor", "SampleTable")


def callbacks_off_config(config: Path, out: Path) -> Path:
    """A config overlay listing ``config``'s callbacks minus the :data:`MEASURED` ones."""
    callbacks = yaml.safe_load(config.read_text())["trainer"].get("callbacks") or []
    kept = [c for c in callbacks if c["class_path"].rpartition(".")[2] not in MEASURED]
    out.write_text(yaml.safe_dump({"trainer": {"callbacks": kept}}))
    return out


def hook_seconds(report: Path) -> tuple[float, float]:
    """``(seconds in the measured callbacks' hooks, total seconds)`` from a SimpleProfiler report."""
    ours = total = 0.0
    for line in report.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]  # action, mean, calls, total, %
        try:
            seconds = float(cells[3])
        except (IndexError, ValueError):  # a title, a header or a rule
            continue
        if cells[0] == "Total":
            total = seconds
        elif cells[0].removeprefix("[Callback]").startswith(MEASURED):
            ours += seconds
    return ours, total


def run_fit(args: list[str]) -> float:
    """Wall seconds of one ``agon fit`` process."""
    code = f"from agon_lightning.cli import main; main({args!r})"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(
            f"agon fit failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
        )
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="agon:tiny-qwen3", help="model_name_or_path for both sides")
    parser.add_argument(
        "--steps", type=int, default=20, help="training steps per run (trainer.limit_train_batches)"
    )
    parser.add_argument("--repeats", type=int, default=3, help="runs per side")
    parser.add_argument("--config", type=Path, default=ROOT / "configs" / "agon.yaml")
    add_results_dir(parser)
    parser.add_argument("extra", nargs="*", help="more `agon fit` overrides, after --")
    opts = parser.parse_args()
    if opts.steps < 1 or opts.repeats < 1:
        parser.error(f"--steps and --repeats must be >= 1, got {opts.steps} and {opts.repeats}")

    times: dict[str, list[float]] = {"on": [], "off": []}
    hooks: list[tuple[float, float]] = []  # (measured callbacks' hook seconds, profiled seconds) per "on" run
    with tempfile.TemporaryDirectory(prefix="bench-callbacks-") as tmp:
        off = callbacks_off_config(opts.config, Path(tmp) / "off.yaml")
        order = [
            side for i in range(opts.repeats) for side in (("on", "off") if i % 2 == 0 else ("off", "on"))
        ]
        for i, side in enumerate(order):
            run_dir = Path(tmp) / f"run{i}-{side}"
            args = [
                "fit", "--config", str(opts.config), *(["--config", str(off)] if side == "off" else []),
                f"--model.model_name_or_path={opts.model}", f"--trainer.limit_train_batches={opts.steps}",
                f"--trainer.default_root_dir={run_dir}", "--trainer.profiler=SimpleProfiler",
                f"--trainer.profiler.dirpath={run_dir}", "--trainer.profiler.filename=profile", *opts.extra,
            ]  # fmt: skip
            times[side].append(run_fit(args))
            line = f"run {i + 1}/{len(order)}: callbacks {side:3s} {times[side][-1]:8.1f} s"
            if side == "on":
                hooks.append(hook_seconds(run_dir / "fit-profile.txt"))
                line += f"  (in their hooks: {hooks[-1][0]:.2f} of {hooks[-1][1]:.1f} profiled s)"
            print(line, flush=True)

    ratio = statistics.median(times["on"]) / statistics.median(times["off"])
    rows = [(side, len(t), statistics.median(t), statistics.mean(t), min(t)) for side, t in times.items()]
    print_table(f"agon fit, {opts.steps} steps of {opts.model}: callbacks on vs off (wall s)",
                ["callbacks", "runs", "median", "mean", "min"], rows)  # fmt: skip
    share = statistics.median(ours / total for ours, total in hooks)
    print(f"wall-time ratio on/off (medians): {ratio:.3f} ({(ratio - 1) * 100:+.1f}%)")
    print(f"time inside the measured callbacks' hooks (median over 'on' runs): {share * 100:.2f}% of fit")
    write_json("callbacks", {
        "model": opts.model, "steps": opts.steps, "repeats": opts.repeats, "config": str(opts.config),
        "extra": opts.extra, "order": order, "wall_s": times, "ratio_on_off_median": ratio,
        "hook_s_and_profiled_s": hooks, "hook_share_median": share,
    }, opts.results_dir)  # fmt: skip


if __name__ == "__main__":
    main()

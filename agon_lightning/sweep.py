"""``agon sweep``: the paper's variants × seeds, one ``agon`` subprocess per run, resumable.

Each variant is a small YAML overlay (``configs/experiments/NAME.yaml``) given as a second
``--config`` on top of one base config, so variants share everything else by construction.
Each run is its own ``agon fit`` process (``agon validate`` for evaluation-only variants): a
crash stays one run's, memory goes back to the OS, and every run starts from a clean RNG.
``--jobs`` runs several at once; ``--threads`` caps each one's intra-op threads, which on a
small or shared CPU matters more than anything else (oversubscribed threads spin and stall).

A seed S sets ``seed_everything`` (sampling), ``data.init_args.seed`` (training order) and
``model.lora.init_seed`` (beta's initial noise); the problems and the held-out set stay fixed.

A run is finished when its directory holds :data:`MARKER`, written only after the process
returned 0; an interrupted sweep re-run with the same arguments skips finished runs and
redoes unfinished ones from scratch. The marker records the run's arguments, so a changed
command cannot silently mix two settings into one table.

Results come from each run's ``metrics.csv``: the final held-out pass@1 and length of the
deployed policy (``val/deployed/*``, and ``val/hard/deployed/*`` when the data module has a
hard split), and the rollout budget: per step ``(train/draft/length + train/challenge/length)
× N × P``, with N and P from the run's saved ``config.yaml``, summed over steps. Wall time is
measured around the process. Paired comparisons (Agon against GRPO, each ablation against
Agon) bootstrap the difference in pass@1 over seeds × problems from each run's
``outcomes.jsonl`` (:mod:`agon_lightning.stats`).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path

import yaml

from agon_lightning.config_files import local_or_shipped, resolve_config
from agon_lightning.errors import CommandParser, UsageError

# (variant, reference): each row of the paired-comparison table is variant − reference.
COMPARISONS = (
    ("agon", "grpo"), ("agon", "grpo_n"), ("cooperative", "agon"), ("no_exchange", "agon"),
    ("fixed_roles", "agon"), ("self_play", "agon"), ("moa_untrained", "agon"),
)  # fmt: skip
SPLITS = (("", "held-out"), ("hard", "hard split"))
DEFAULT_VARIANTS = (
    "grpo", "grpo_n", "agon", "cooperative", "no_exchange", "fixed_roles", "self_play", "moa_untrained",
)  # fmt: skip
# Variants that train nothing → the evaluator key they report instead of ``deployed``.
EVAL_ONLY = {"moa_untrained": "moa"}
MARKER = "sweep_done.json"
# The ``agon`` entry point under this very interpreter (no dependence on PATH).
AGON = (sys.executable, "-c", "from agon_lightning.cli import main; main()")


@dataclass(frozen=True)
class Run:
    """One (variant, seed) cell of the grid."""

    variant: str
    seed: int
    config: Path
    directory: Path

    @property
    def eval_only(self) -> bool:
        return self.variant in EVAL_ONLY

    @property
    def metric_key(self) -> str:
        return EVAL_ONLY.get(self.variant, "deployed")

    def argv(self, base_config: Path, overrides: Sequence[str]) -> list[str]:
        """The ``agon`` arguments of this run; ``overrides`` come last, so they win."""
        return [
            "validate" if self.eval_only else "fit",
            "--config", str(base_config), "--config", str(self.config),
            f"--seed_everything={self.seed}", f"--data.init_args.seed={self.seed}",
            f"--model.lora.init_seed={self.seed}", f"--trainer.default_root_dir={self.directory}",
            *overrides,
        ]  # fmt: skip


def plan(variants: Sequence[str], seeds: Sequence[int], out: Path, experiments_dir: Path) -> list[Run]:
    """The grid's runs, seed by seed, so a sweep cut short still compares every variant.
    Evaluation-only variants run once (first seed): greedy decoding of the untrained base does
    not depend on the seed."""
    variants, seeds = list(dict.fromkeys(variants)), list(dict.fromkeys(seeds))
    if not variants or not seeds:
        raise ValueError(f"need at least one variant and one seed, got {variants} and {seeds}")
    for variant in variants:
        config = experiments_dir / f"{variant}.yaml"
        if not config.is_file():
            available = sorted(p.stem for p in experiments_dir.glob("*.yaml"))
            raise ValueError(f"no variant {variant!r}: {config} does not exist; available: {available}")
    return [
        Run(variant, seed, experiments_dir / f"{variant}.yaml", out / variant / f"seed_{seed}")
        for seed in seeds
        for variant in variants
        if seed == seeds[0] or variant not in EVAL_ONLY
    ]


@dataclass
class RunResult:
    """What one finished run measured (``curve``: ``(step, pass@1, length)`` per evaluation)."""

    variant: str
    seed: int
    pass_at_1: float
    length: float
    base_pass_at_1: float
    steps: int
    rollout_tokens: int
    train_s: float
    wall_s: float
    hard_pass_at_1: float = math.nan
    hard_length: float = math.nan
    curve: list[tuple[int, float, float]] = field(default_factory=list)
    # split → question → (correct, tokens) of the deployed policy at the last evaluation
    outcomes: dict[str, dict[str, tuple[bool, int]]] = field(default_factory=dict)


# ---------------------------------------------------------------------- resuming
def finished(run: Run, argv: list[str]) -> bool:
    """Whether ``run`` already completed with exactly ``argv``; raises if it ran with others."""
    marker = run.directory / MARKER
    if not marker.is_file():
        return False
    done = json.loads(marker.read_text())
    if done["argv"] != argv:
        raise SystemExit(
            f"{run.directory} was finished with other arguments:\n  was: {' '.join(done['argv'])}\n"
            f"  now: {' '.join(argv)}\nUse another --out, or delete that directory to redo it."
        )
    return True


def write_marker(run: Run, argv: list[str], wall_s: float) -> None:
    marker = run.directory / MARKER
    tmp = marker.with_suffix(".tmp")
    tmp.write_text(json.dumps({"variant": run.variant, "seed": run.seed, "argv": argv, "wall_s": wall_s}))
    os.replace(tmp, marker)  # atomic: a marker is either absent or complete


def run_agon(argv: list[str], log_path: Path, threads: int | None = None) -> int:
    """Run ``agon ARGV`` to completion, its output to ``log_path``; the exit status.

    ``threads`` caps the run's intra-op threads (``OMP_NUM_THREADS``); ``None`` keeps torch's default.
    """
    env = dict(os.environ, **({"OMP_NUM_THREADS": str(threads)} if threads else {}))
    with log_path.open("w") as log:
        return subprocess.run([*AGON, *argv], stdout=log, stderr=subprocess.STDOUT, env=env).returncode


Runner = Callable[[list[str], Path], int]


def attempt(run: Run, argv: list[str], runner: Runner) -> tuple[int, float]:
    """Start ``run`` over in a clean directory; marks it finished on success. ``(exit status, wall s)``."""
    if run.directory.exists():  # an interrupted attempt
        shutil.rmtree(run.directory)
    run.directory.mkdir(parents=True)
    start = time.perf_counter()
    code = runner(argv, run.directory / "run.log")
    wall = time.perf_counter() - start
    if code == 0:
        write_marker(run, argv, wall)
    return code, wall


def sweep(
    runs: Sequence[Run],
    base_config: Path,
    overrides: Sequence[str],
    out: Path,
    runner: Runner = run_agon,
    jobs: int = 1,
) -> list[Run]:
    """Run every unfinished run, ``jobs`` at a time, rewriting the report after each; returns
    the failed runs."""
    todo = []
    for run in runs:
        argv = run.argv(base_config, overrides)
        if finished(run, argv):
            print(f"{run.variant} seed {run.seed}: finished earlier, reused", flush=True)
        else:
            todo.append((run, argv))
    failed = []
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = {}
        for run, argv in todo:
            futures[pool.submit(attempt, run, argv, runner)] = run
            print(f"{run.variant} seed {run.seed}: queued `agon {argv[0]}` → {run.directory}", flush=True)
        for done, future in enumerate(as_completed(futures), 1):
            run = futures[future]
            code, wall = future.result()
            tag = f"[{done}/{len(todo)}] {run.variant} seed {run.seed}"
            if code != 0:
                print(
                    f"{tag}: FAILED (exit {code}) after {wall:.0f} s; see {run.directory / 'run.log'}",
                    flush=True,
                )
                failed.append(run)
                continue
            print(f"{tag}: done in {wall:.0f} s", flush=True)
            report(runs, out)
    return failed


def report(runs: Sequence[Run], out: Path) -> list[RunResult]:
    """Read every finished run and write ``results.csv``, ``results.md`` and the plots."""
    results = []
    for run in runs:
        marker = run.directory / MARKER
        if marker.is_file():
            done = json.loads(marker.read_text())
            results.append(read_run(run.directory, run.variant, run.seed, run.metric_key, done["wall_s"]))
    write_report(
        results,
        out,
        pending=[f"{r.variant}/seed_{r.seed}" for r in runs if not r.directory.joinpath(MARKER).is_file()],
    )
    return results


# ---------------------------------------------------------------------- results
def _float(row: dict[str, str], key: str) -> float:
    return float(row[key]) if row.get(key) else 0.0


def read_run(directory: Path, variant: str, seed: int, key: str, wall_s: float) -> RunResult:
    """Read a finished run's ``metrics.csv`` (latest version) and ``config.yaml``."""
    logs = sorted(
        directory.glob("lightning_logs/version_*/metrics.csv"), key=lambda p: int(p.parent.name[8:])
    )
    if not logs:
        raise FileNotFoundError(f"no lightning_logs/version_*/metrics.csv under {directory}")
    rows = list(csv.DictReader(logs[-1].open()))
    evals = [r for r in rows if r.get(f"val/{key}/pass@1")]
    if not evals:
        raise ValueError(f"{logs[-1]} has no val/{key}/pass@1: did the run evaluate?")
    curve = {int(r["step"]): (_float(r, f"val/{key}/pass@1"), _float(r, f"val/{key}/length")) for r in evals}
    steps = [r for r in rows if r.get("train/draft/length")]
    tokens = 0
    if steps:  # rollouts per step: P problems × N drafts (+ N challenges)
        config = yaml.safe_load((logs[-1].parent / "config.yaml").read_text())
        per_length = config["model"]["grpo"]["num_generations"] * config["data"]["init_args"]["batch_size"]
        tokens = round(
            sum(_float(r, "train/draft/length") + _float(r, "train/challenge/length") for r in steps)
            * per_length
        )
    final = curve[int(evals[-1]["step"])]  # the last evaluation: after the last step
    last = evals[-1]
    return RunResult(
        variant, seed, final[0], final[1], _float(evals[0], "val/base/pass@1"), len(steps), tokens,
        sum(_float(r, "time/generate_s") + _float(r, "time/update_s") for r in steps), wall_s,
        float(last[f"val/hard/{key}/pass@1"]) if last.get(f"val/hard/{key}/pass@1") else math.nan,
        float(last[f"val/hard/{key}/length"]) if last.get(f"val/hard/{key}/length") else math.nan,
        [(step, *curve[step]) for step in sorted(curve)], read_outcomes(logs[-1].parent, key),
    )  # fmt: skip


def read_outcomes(run_dir: Path, key: str) -> dict[str, dict[str, tuple[bool, int]]]:
    """``outcomes.jsonl`` of a run (written by ``ValidationReport``) for the policy ``key``.

    ``deployed`` resolves to the first trained cascade present, else the single adapter; an
    evaluation-only run (``agon validate``) writes none, and gets ``{}``.
    """
    path = run_dir / "outcomes.jsonl"
    if not path.is_file():
        return {}
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    if key == "deployed":
        key = next(k for k in ("cascade_ab", "cascade_aa", "alpha") if rows and k in rows[0])
    out: dict[str, dict[str, tuple[bool, int]]] = {}
    for r in rows:
        out.setdefault(r["split"], {})[r["question"]] = (bool(r[key]), int(r[f"{key}/length"]))
    return out


def compare(results: Sequence[RunResult], variant: str, reference: str, split: str) -> str | None:
    """``mean [low, high]`` of pass@1(variant) − pass@1(reference), paired by seed and problem."""
    from agon_lightning.stats import paired_bootstrap

    ours = {r.seed: r.outcomes.get(split, {}) for r in results if r.variant == variant}
    theirs = {r.seed: r.outcomes.get(split, {}) for r in results if r.variant == reference}
    if not ours or not theirs:
        return None
    if len(ours) == 1 and len(theirs) > 1:  # an evaluation-only variant: one seed stands for all
        ours = dict.fromkeys(theirs, next(iter(ours.values())))
    seeds = sorted(ours.keys() & theirs.keys())
    questions = sorted(set.intersection(*(set(ours[s]) & set(theirs[s]) for s in seeds))) if seeds else []
    if not questions:
        return None
    a = [[ours[s][q][0] for q in questions] for s in seeds]
    b = [[theirs[s][q][0] for q in questions] for s in seeds]
    return str(paired_bootstrap(a, b)) + f" ({len(seeds)} seeds × {len(questions)})"


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation of the values that are not ``nan`` (``nan`` for too few)."""
    values = [v for v in values if not math.isnan(v)]
    if not values:
        return math.nan, math.nan
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else math.nan


def _cell(values: Sequence[float], fmt: str) -> str:
    mean, std = mean_std(values)
    if math.isnan(mean):
        return "—"
    return f"{mean:{fmt}}" if math.isnan(std) else f"{mean:{fmt}} ± {std:{fmt}}"


def write_report(results: Sequence[RunResult], out: Path, pending: Sequence[str] = ()) -> None:
    """``results.csv`` (one row per run), ``results.md`` (mean ± std per variant) and the plots."""
    out.mkdir(parents=True, exist_ok=True)
    columns = [f for f in RunResult.__dataclass_fields__ if f not in ("curve", "outcomes")]
    with (out / "results.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows({k: v for k, v in asdict(r).items() if k in columns} for r in results)
    by_variant: dict[str, list[RunResult]] = {}
    for r in results:
        by_variant.setdefault(r.variant, []).append(r)
    lines = [
        "# Sweep results", "",
        "Final held-out pass@1 (greedy) and mean completion tokens of the deployed policy (cascade alpha → beta; "
        "alpha for `grpo`; alpha → alpha for `self_play`; base → base for `moa_untrained`), mean ± sample std "
        "over seeds. Rollout tokens: every token sampled in training (drafts + challenges); train time: "
        "generation + update; wall: the whole run, evaluations included.", "",
        "| variant | seeds | pass@1 | length | hard pass@1 | hard length | steps | rollout tokens | train time (s) | wall (s) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]  # fmt: skip
    for variant, rs in by_variant.items():
        cells = [_cell([getattr(r, k) for r in rs], fmt) for k, fmt in
                 [("pass_at_1", ".3f"), ("length", ".1f"), ("hard_pass_at_1", ".3f"), ("hard_length", ".1f"),
                  ("steps", ".0f"), ("rollout_tokens", ",.0f"), ("train_s", ".0f"), ("wall_s", ".0f")]]  # fmt: skip
        lines.append(f"| {variant} | {len(rs)} | " + " | ".join(cells) + " |")
    rows = [
        (variant, reference, [compare(results, variant, reference, split) for split, _ in SPLITS])
        for variant, reference in COMPARISONS
    ]
    rows = [r for r in rows if any(r[2])]
    if rows:
        lines += [
            "", "Paired differences in pass@1 (variant − reference; mean [95% bootstrap interval] over "
            "seeds × problems, pairing runs of the same seed on the same problem):", "",
            "| variant − reference | " + " | ".join(name for _, name in SPLITS) + " |",
            "|---|" + "---|" * len(SPLITS),
        ]  # fmt: skip
        lines += [f"| {v} − {ref} | " + " | ".join(c or "—" for c in cells) + " |" for v, ref, cells in rows]
    if results:
        lines += ["", f"Untrained base alone: pass@1 {_cell([r.base_pass_at_1 for r in results], '.3f')}."]
    if pending:
        lines += ["", f"Not finished yet ({len(pending)}): " + ", ".join(pending) + "."]
    (out / "results.md").write_text("\n".join(lines) + "\n")
    plot_curves(by_variant, out)


def plot_curves(by_variant: dict[str, list[RunResult]], out: Path) -> None:
    """``pass_at_1.png`` and ``length.png``: mean over seeds against step, ± std shaded, one
    line per variant; evaluation-only variants as dashed horizontal lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    for index, name, label in [
        (1, "pass_at_1.png", "held-out pass@1 (greedy)"),
        (2, "length.png", "completion tokens"),
    ]:
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for variant, rs in by_variant.items():
            by_step: dict[int, list[float]] = {}
            for r in rs:
                for point in r.curve:
                    by_step.setdefault(point[0], []).append(point[index])
            steps = sorted(by_step)
            stats = [mean_std(by_step[s]) for s in steps]
            means = [m for m, _ in stats]
            if variant in EVAL_ONLY:
                ax.axhline(means[-1], linestyle="--", color="grey", label=variant)
                continue
            (line,) = ax.plot(steps, means, marker="o", label=variant)
            stds = [0.0 if math.isnan(s) else s for _, s in stats]
            ax.fill_between(steps, [m - s for m, s in zip(means, stds)], [m + s for m, s in zip(means, stds)],
                            color=line.get_color(), alpha=0.15)  # fmt: skip
        ax.set(xlabel="training step", ylabel=label, title=f"deployed policy: {label}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out / name, dpi=100)
        plt.close(fig)


# ---------------------------------------------------------------------- command line
def parse_args(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    """The sweep's own options, and the overrides after ``--`` passed to every run.

    The configs default to the working directory's ``configs/`` (a checkout) and otherwise to
    the copies shipped with the package, so a sweep runs after a plain ``pip install`` too;
    both options take ``agon:NAME`` for a shipped one.
    """
    argv = list(argv)
    split = argv.index("--") if "--" in argv else len(argv)
    parser = CommandParser(
        prog="agon sweep",
        description="Run variants × seeds (each `agon fit --config BASE --config VARIANT`), resumably, "
        "and write results.csv, results.md and plots to --out. Arguments after `--` go to every run.",
    )
    parser.add_argument("--variants", nargs="+", default=list(DEFAULT_VARIANTS),
                        help="names of YAML overlays in --experiments-dir (default: %(default)s)")  # fmt: skip
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--out", type=Path, default=Path("runs/sweep"))
    parser.add_argument("--base-config", default=None,
                        help="default: configs/agon.yaml if present, else the shipped agon:agon.yaml")  # fmt: skip
    parser.add_argument("--experiments-dir", default=None,
                        help="default: configs/experiments if present, else the shipped agon:experiments")  # fmt: skip
    parser.add_argument("--jobs", type=int, default=1, help="runs at a time (default: %(default)s)")
    parser.add_argument("--threads", type=int, default=None,
                        help="OMP_NUM_THREADS of each run; on a shared or small machine use jobs × threads ≤ cores")  # fmt: skip
    parser.add_argument(
        "--dry-run", action="store_true", help="print each pending run's command, run nothing"
    )
    args = parser.parse_args(argv[:split])
    args.base_config = resolve_config(args.base_config) if args.base_config else local_or_shipped("agon.yaml")
    args.experiments_dir = (
        resolve_config(args.experiments_dir) if args.experiments_dir else local_or_shipped("experiments")
    )
    if not args.base_config.is_file():
        parser.error(f"--base-config {args.base_config} does not exist")
    if args.jobs < 1 or (args.threads is not None and args.threads < 1):
        parser.error(f"--jobs and --threads must be >= 1, got {args.jobs} and {args.threads}")
    return args, argv[split + 1 :]


def sweep_main(argv: Sequence[str] | None = None) -> None:
    """Entry point of ``agon sweep``."""
    args, overrides = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        runs = plan(args.variants, args.seeds, args.out, args.experiments_dir)
    except ValueError as err:
        raise UsageError(str(err)) from err
    if args.dry_run:
        for run in runs:
            argv_run = run.argv(args.base_config, overrides)
            if not finished(run, argv_run):
                print("agon " + " ".join(argv_run))
        return
    runner = partial(run_agon, threads=args.threads)
    failed = sweep(runs, args.base_config, overrides, args.out, runner, args.jobs)
    report(runs, args.out)
    print(f"results: {args.out / 'results.md'}")
    if failed:
        raise SystemExit(f"{len(failed)} run(s) failed: " + ", ".join(str(r.directory) for r in failed))

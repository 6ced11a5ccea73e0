"""``agon sweep``: the paper's variants × seeds, one ``agon`` subprocess per run, resumable.

Each variant is a small YAML overlay (``configs/experiments/NAME.yaml``) given as a second
``--config`` on top of one base config, so variants share everything else by construction.
Each run is its own ``agon fit`` process (``agon validate`` for evaluation-only variants): a
crash stays one run's, memory goes back to the OS, and every run starts from a clean RNG.
``--jobs`` runs several at once; ``--threads`` caps each one's intra-op threads, which on a
small or shared CPU matters more than anything else (oversubscribed threads spin and stall).

A seed S sets ``seed_everything`` (sampling), ``data.init_args.seed`` (training order) and
``model.lora.init_seed`` (beta's initial noise); the problems and the held-out set stay fixed.

A *derived* variant (:data:`~agon_lightning.experiments.sweep_report.DERIVED`: ``grpo_self_cascade``) trains
nothing of its own: it reads another key of another variant's runs (``cascade_aa`` of ``grpo``),
whose runs the plan then includes. ``--table paper`` runs the paper's rows by default and adds
``paper_table.md`` (:mod:`agon_lightning.experiments.paper_table`).

A run is finished when its directory holds :data:`MARKER`, written only after the process
returned 0, or, where its directory is absent (a clean checkout), when its committed archive holds
one (the archive is then laid out as its directory); an interrupted sweep re-run with the same
arguments skips finished runs. An unfinished training run that was started with the same arguments
(:data:`STARTED`) and left a ``last.ckpt`` goes on from it (``agon fit --ckpt_path last``, which
resumes exactly: the same batches, numbers and logs as a run never stopped; its logs are read across
the sittings, :func:`~agon_lightning.experiments.sweep_report.run_rows`); any other unfinished run is
started over in a clean directory. The markers record the run's arguments, so a changed command
cannot silently mix two settings into one table or one run.

Wall time is measured around the process; a run resumed after its sweep was stopped has no wall
time of its own (its earlier sitting was not timed to its end): ``—`` in the tables, where its
generation and update time (``train_s``, read from every step's log) stays whole. What the finished runs measured — the tables, the
paired comparisons and the plots — is :mod:`agon_lightning.experiments.sweep_report`'s job.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from agon_lightning.experiments.archive import archive_path, archive_run, unpack, unpack_all
from agon_lightning.experiments.paper_table import PAPER_VARIANTS, write_paper_table
from agon_lightning.experiments.sweep_report import DERIVED, EVAL_ONLY, RunResult, read_run, write_report
from agon_lightning.infra.errors import CommandParser, UsageError
from agon_lightning.infra.provenance import code_version, differences, environment
from agon_lightning.infra.shipped_configs import local_or_shipped, resolve_config

DEFAULT_VARIANTS = (
    "grpo", "grpo_n", "agon", "cooperative", "no_exchange", "fixed_roles", "self_play", "moa_untrained",
)  # fmt: skip
TABLES = ("results", "paper")
MARKER = "sweep_done.json"
STARTED = "sweep_started.json"  # written as a run starts: the arguments a resume must match; the code
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
    def derived(self) -> bool:
        """Read from another variant's run of the same seed; never run itself."""
        return self.variant in DERIVED

    @property
    def metric_key(self) -> str:
        if self.derived:
            return DERIVED[self.variant][1]
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
    not depend on the seed. A derived variant brings in the variant it reads (just before it)
    and points at that variant's directories."""
    variants = [
        v for variant in variants for v in ([DERIVED[variant][0]] if variant in DERIVED else []) + [variant]
    ]
    variants, seeds = list(dict.fromkeys(variants)), list(dict.fromkeys(seeds))
    if not variants or not seeds:
        raise ValueError(f"need at least one variant and one seed, got {variants} and {seeds}")
    for variant in variants:
        config = experiments_dir / f"{variant}.yaml"
        if not config.is_file():
            available = sorted(p.stem for p in experiments_dir.glob("*.yaml"))
            raise ValueError(f"no variant {variant!r}: {config} does not exist; available: {available}")
    return [
        Run(
            variant,
            seed,
            experiments_dir / f"{variant}.yaml",
            out / DERIVED.get(variant, (variant,))[0] / f"seed_{seed}",
        )
        for seed in seeds
        for variant in variants
        if seed == seeds[0] or variant not in EVAL_ONLY
    ]


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
            f"  now: {' '.join(argv)}\nUse another --out, or delete that directory (and its archive under "
            f"{run.directory.parent.parent / 'archive'}) to redo it."
        )
    return True


def write_marker(
    run: Run,
    argv: list[str],
    wall_s: float | None,
    code: str | None = None,
    env: dict[str, str] | None = None,
) -> None:
    """Mark ``run`` finished with ``argv``; ``wall_s`` ``None`` (JSON null): not timed whole (resumed).

    ``code`` and ``env``: the code its last sitting ran and on what
    (:func:`~agon_lightning.infra.provenance.code_version`, :func:`~agon_lightning.infra.provenance.environment`).
    """
    marker = run.directory / MARKER
    tmp = marker.with_suffix(".tmp")
    tmp.write_text(
        json.dumps(
            {
                "variant": run.variant,
                "seed": run.seed,
                "argv": argv,
                "wall_s": wall_s,
                "code": code,
                "environment": env,
            }
        )
    )
    os.replace(tmp, marker)  # atomic: a marker is either absent or complete


def marked_wall_s(marker: Path) -> float:
    """The wall seconds a finished run's marker records; NaN for a run resumed by the sweep (not timed whole)."""
    wall = json.loads(marker.read_text())["wall_s"]
    return math.nan if wall is None else float(wall)


def resumable(run: Run, argv: list[str]) -> Path | None:
    """The ``last.ckpt`` an unfinished training run goes on from: one left by an attempt started with ``argv``."""
    started = run.directory / STARTED
    if run.eval_only or not started.is_file():
        return None
    try:
        same = json.loads(started.read_text()).get("argv") == argv
    except (json.JSONDecodeError, AttributeError):
        return None
    found = sorted(run.directory.rglob("last.ckpt")) if same else []
    return found[0] if found else None


def run_agon(argv: list[str], log_path: Path, threads: int | None = None) -> int:
    """Run ``agon ARGV`` to completion, its output to ``log_path``; the exit status.

    ``threads`` caps the run's intra-op threads (``OMP_NUM_THREADS``); ``None`` keeps torch's default.
    """
    env = dict(os.environ, **({"OMP_NUM_THREADS": str(threads)} if threads else {}))
    with log_path.open("a") as log:  # a resumed run's log goes on after its earlier sitting's
        return subprocess.run([*AGON, *argv], stdout=log, stderr=subprocess.STDOUT, env=env).returncode


Runner = Callable[[list[str], Path], int]


def attempt(run: Run, argv: list[str], runner: Runner) -> tuple[int, float]:
    """Run ``run``: on from its ``last.ckpt`` (:func:`resumable`), else over in a clean directory; marks it
    finished on success. ``(exit status, wall s)``."""
    checkpoint = resumable(run, argv)
    code, env = code_version(), environment()
    if checkpoint is not None:
        print(f"{run.variant} seed {run.seed}: going on from {checkpoint}", flush=True)
        started = json.loads((run.directory / STARTED).read_text())
        began = started.get("code")
        if began is not None and code is not None and began != code:
            print(
                f"{run.variant} seed {run.seed}: WARNING: it started on code {began} and goes on with {code}: "
                "its steps before and after this point ran different code",
                flush=True,
            )
        changed = differences(started["environment"], env) if started.get("environment") else []
        if changed:
            print(
                f"{run.variant} seed {run.seed}: WARNING: it goes on in another environment ({'; '.join(changed)}): "
                "its steps after this point may compute their sums in another order, so its trajectory need "
                "not be the one an unbroken run would have drawn",
                flush=True,
            )
        command = [*argv, "--ckpt_path", "last"]
    else:
        if run.directory.exists():  # an interrupted attempt that cannot go on
            shutil.rmtree(run.directory)
        run.directory.mkdir(parents=True)
        (run.directory / STARTED).write_text(json.dumps({"argv": argv, "code": code, "environment": env}))
        command = argv
    start = time.perf_counter()
    status = runner(command, run.directory / "run.log")
    wall = time.perf_counter() - start
    if status == 0:
        write_marker(run, argv, None if checkpoint is not None else wall, code, env)
    return status, wall


def sweep(
    runs: Sequence[Run],
    base_config: Path,
    overrides: Sequence[str],
    out: Path,
    runner: Runner = run_agon,
    jobs: int = 1,
    table: str = "results",
) -> list[Run]:
    """Run every unfinished run, ``jobs`` at a time, rewriting the report after each; returns
    the failed runs."""
    todo = []
    for run in (r for r in runs if not r.derived):
        argv = run.argv(base_config, overrides)
        packed = archive_path(out, run.variant, run.seed)
        if packed.is_file() and not run.directory.exists():
            # A run finished and committed elsewhere (a clean checkout keeps the archive, not the
            # directory): its archive holds the marker and what the report reads, so it is not redone.
            unpack(packed, run.directory)
        if finished(run, argv):
            print(f"{run.variant} seed {run.seed}: finished earlier, reused", flush=True)
            if not archive_path(out, run.variant, run.seed).is_file():
                archive_run(run.directory, archive_path(out, run.variant, run.seed))
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
            archive_run(run.directory, archive_path(out, run.variant, run.seed))
            report(runs, out, table)
    return failed


def report(runs: Sequence[Run], out: Path, table: str = "results") -> list[RunResult]:
    """Read every finished run and write ``results.csv``, ``results.md`` and the plots (and, for
    ``table="paper"``, ``paper_table.md``)."""
    results = []
    for run in runs:
        marker = run.directory / MARKER
        if marker.is_file():
            results.append(
                read_run(run.directory, run.variant, run.seed, run.metric_key, marked_wall_s(marker))
            )
    write_report(
        results,
        out,
        pending=[f"{r.variant}/seed_{r.seed}" for r in runs if not r.directory.joinpath(MARKER).is_file()],
    )
    if table == "paper":
        write_paper_table(results, out)
    return results


def report_from_archive(runs: Sequence[Run], out: Path, table: str = "results") -> list[RunResult]:
    """:func:`report` over ``out``'s archived runs (unpacked to a scratch directory), written to ``out``."""
    import tempfile

    with tempfile.TemporaryDirectory() as scratch:
        unpacked = {(d.parent.name, d.name) for d in unpack_all(out, Path(scratch))}
        if not unpacked:
            raise SystemExit(f"no archived run under {out / 'archive'}")
        moved = [
            Run(r.variant, r.seed, r.config, Path(scratch) / r.directory.parent.name / r.directory.name)
            for r in runs
        ]
        results = report(moved, out, table)
    print(f"{len(unpacked)} archived runs read; tables written to {out}")
    return results


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
    parser.add_argument(
        "--variants",
        nargs="+",
        default=None,
        help=f"names of YAML overlays in --experiments-dir (default: {' '.join(DEFAULT_VARIANTS)}; "
        f"with --table paper: {' '.join(PAPER_VARIANTS)})",
    )
    parser.add_argument("--table", choices=TABLES, default="results",
                        help="paper: also write paper_table.md, the paper's rows in its order with its numbers "
                             "beside ours (default: %(default)s)")  # fmt: skip
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
    parser.add_argument("--from-archive", action="store_true",
                        help="run nothing: rewrite the tables and plots in --out from its committed "
                             "archive/VARIANT/seed_N.tar.gz (each finished run's outcomes and metrics)")  # fmt: skip
    args = parser.parse_args(argv[:split])
    if args.variants is None:
        args.variants = list(PAPER_VARIANTS if args.table == "paper" else DEFAULT_VARIANTS)
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
    if args.from_archive:
        report_from_archive(runs, args.out, args.table)
        return
    if args.dry_run:
        for run in (r for r in runs if not r.derived):
            argv_run = run.argv(args.base_config, overrides)
            if not finished(run, argv_run):
                goes_on = resumable(run, argv_run) is not None  # what attempt() would run
                print("agon " + " ".join([*argv_run, *(["--ckpt_path", "last"] if goes_on else [])]))
        return
    runner = partial(run_agon, threads=args.threads)
    failed = sweep(runs, args.base_config, overrides, args.out, runner, args.jobs, args.table)
    report(runs, args.out, args.table)
    print(
        f"results: {args.out / 'results.md'}"
        + (f", {args.out / 'paper_table.md'}" if args.table == "paper" else "")
    )
    if failed:
        raise SystemExit(f"{len(failed)} run(s) failed: " + ", ".join(str(r.directory) for r in failed))

"""Countdown S2's registered endpoints, recomputed from the committed archive of its runs.

``benchmarks/results/countdown/s2/README.md`` (part 2) registers three primary differences in
deployed held-out pass@1 on the main split, each compute-matched at deployment (two passes
against two passes), their interval (the crossed t of
:func:`~agon_lightning.experiments.stats.crossed_t`: new seeds and new problems), Holm's
correction over the three, and the secondaries. This script computes exactly those from the
sweep's ``archive/VARIANT/seed_N.tar.gz`` (each finished run's outcomes and metrics, committed),
so every figure is recomputed from the repository alone, and rewrites the sweep's tables::

    python -m agon_lightning.testbeds.countdown.s2_endpoints benchmarks/results/countdown/s2/sweep

It writes ``endpoints.md`` and ``endpoints.json`` beside the archive, with each figure's seeds;
a decision is *final* only when every registered seed of both rows is in the archive.
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from agon_lightning.experiments.stats import crossed_t, holm
from agon_lightning.game.names import ALPHA

ALPHA_LEVEL = 0.05
#: Registered seeds per row (part 2); an untrained row is one greedy evaluation, the same for every seed.
SEEDS = {"agon": 5, "cooperative": 5, "grpo": 5, "moa_untrained": 1}
#: (name, (variant, key), (reference variant, key)): the key is the evaluator's, at the last evaluation.
PRIMARIES = (
    (
        "training adds to the untrained cascade: Agon − moa_untrained",
        ("agon", "deployed"),
        ("moa_untrained", "moa"),
    ),
    ("two passes on one budget: Agon − GRPO's self-cascade", ("agon", "deployed"), ("grpo", "cascade_aa")),
    ("the competition step: Agon − cooperative", ("agon", "deployed"), ("cooperative", "deployed")),
)
SECONDARIES = (
    ("the drafter alone: Agon's alpha − GRPO's alpha", ("agon", ALPHA), ("grpo", ALPHA)),
    ("the exchange: cooperative − GRPO's self-cascade", ("cooperative", "deployed"), ("grpo", "cascade_aa")),
    ("the cascade over one pass: Agon − GRPO alone", ("agon", "deployed"), ("grpo", ALPHA)),
)
SPLITS = (("", "main"), ("hard", "hard"))  # (the outcomes' split tag, its name)


@dataclass
class Endpoint:
    name: str
    split: str
    primary: bool
    variant: str
    key: str
    reference: str
    reference_key: str
    mean: float | None = None
    low: float | None = None
    high: float | None = None
    p: float | None = None
    p_holm: float | None = None
    df: float | None = None
    seeds: int = 0
    problems: int = 0
    decision: str = "not run"
    final: bool = False


def outcomes_of(run_dir: Path, key: str, split: str) -> dict[str, bool]:
    """question → right? for ``key`` on ``split`` at the run's last evaluation."""
    from agon_lightning.experiments.sweep_report import latest_metrics, read_outcomes

    return {q: ok for q, (ok, _) in read_outcomes(latest_metrics(run_dir).parent, key).get(split, {}).items()}


def table(runs: dict[tuple[str, int], Path], row: tuple[str, str], reference: tuple[str, str], split: str):
    """The paired ``[seeds, problems]`` tables of two rows (an untrained row stands for every seed)."""
    mine = {s: outcomes_of(d, row[1], split) for (v, s), d in runs.items() if v == row[0]}
    theirs = {s: outcomes_of(d, reference[1], split) for (v, s), d in runs.items() if v == reference[0]}
    if len(theirs) == 1 and SEEDS.get(reference[0]) == 1:
        theirs = dict.fromkeys(mine, next(iter(theirs.values())))
    seeds = sorted(mine.keys() & theirs.keys())
    if not seeds:
        return None
    questions = sorted(set.intersection(*(set(mine[s]) & set(theirs[s]) for s in seeds)))
    a = np.array([[mine[s][q] for q in questions] for s in seeds], dtype=float)
    b = np.array([[theirs[s][q] for q in questions] for s in seeds], dtype=float)
    return a, b


def decide(mean: float, p_adjusted: float) -> str:
    """*shown* / *contradicted* when the (Holm-adjusted) p is below 0.05, by the sign; else *not resolved*."""
    if p_adjusted < ALPHA_LEVEL:
        return "shown" if mean > 0 else "contradicted"
    return "not resolved"


def compute(runs: dict[tuple[str, int], Path]) -> list[Endpoint]:
    done = {v: sum(1 for (w, _) in runs if w == v) for v, _ in runs}
    out = []
    for tag, split in SPLITS:
        family = []
        for primary, items in ((True, PRIMARIES), (False, SECONDARIES)):
            for name, row, reference in items:
                e = Endpoint(name, split, primary, row[0], row[1], reference[0], reference[1])
                e.final = all(done.get(v, 0) >= SEEDS.get(v, 5) for v in (row[0], reference[0]))
                pair = table(runs, row, reference, tag)
                if pair is not None and pair[0].shape[0] >= 2 and pair[0].shape[1] >= 2:
                    d = crossed_t(*pair)
                    e.mean, e.low, e.high, e.p, e.df = d.mean, d.low, d.high, d.p, d.df
                    e.seeds, e.problems = d.seeds, d.problems
                    if primary and split == "main":
                        family.append(e)
                    else:
                        e.decision = decide(d.mean, d.p)
                out.append(e)
        # Holm over the three primaries (the main split's); every other figure is read at its own p.
        adjusted = holm({e.name: e.p for e in family})
        for e in family:
            e.p_holm = adjusted[e.name]
            e.decision = decide(e.mean, e.p_holm)
    return out


def markdown(endpoints: list[Endpoint], runs: dict[tuple[str, int], Path]) -> str:
    ran = {}
    for v, s in sorted(runs):
        ran.setdefault(v, []).append(s)
    lines = [
        "# Countdown S2: the registered endpoints",
        "",
        "Computed by `python -m agon_lightning.testbeds.countdown.s2_endpoints` from the committed archive, as part 2 of "
        "`README.md` registers them: deployed held-out pass@1 at the last evaluation, paired by seed and problem, "
        "the crossed t interval (new seeds and new problems), Holm's correction over the three primaries. A "
        "decision is *final* only when every registered seed of both rows is archived.",
        "",
        "Runs archived (seeds): " + "; ".join(f"`{v}` {s}" for v, s in ran.items()) + ".",
        "",
        "| endpoint | split | difference [95% interval] | p (Holm) | df | seeds × problems | decision | final? |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for e in endpoints:
        cell = "—" if e.mean is None else f"{e.mean:+.3f} [{e.low:+.3f}, {e.high:+.3f}]"
        p = "—" if e.p is None else f"{e.p:.4f}" + ("" if e.p_holm is None else f" ({e.p_holm:.4f})")
        df = "—" if e.df is None else f"{e.df:.1f}"
        name = f"**primary: {e.name}**" if e.primary and e.split == "main" else e.name
        lines.append(f"| {name} | {e.split} | {cell} | {p} | {df} | {e.seeds} × {e.problems} | {e.decision} | "
                     f"{'final' if e.final else 'interim'} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def unpacked_runs(sweep: Path, scratch: Path) -> dict[tuple[str, int], Path]:
    from agon_lightning.experiments.archive import unpack_all

    return {(d.parent.name, int(d.name.removeprefix("seed_"))): d for d in unpack_all(sweep, scratch)}


def rewrite_tables(sweep: Path, runs: dict[tuple[str, int], Path], experiments_dir: Path | None) -> None:
    """The sweep's results.md, results.csv and plots, from the archive (``agon sweep --from-archive``)."""
    from agon_lightning.experiments.sweep import plan, report_from_archive
    from agon_lightning.infra.shipped_configs import local_or_shipped

    variants = sorted({v for v, _ in runs}) + (
        ["grpo_self_cascade"] if any(v == "grpo" for v, _ in runs) else []
    )
    seeds = sorted({s for _, s in runs})
    report_from_archive(
        plan(variants, seeds, sweep, experiments_dir or local_or_shipped("experiments")), sweep
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sweep", type=Path, help="the sweep's --out, holding archive/VARIANT/seed_N.tar.gz")
    parser.add_argument("--experiments-dir", type=Path, default=None,
                        help="the variants' overlays (default: configs/experiments, else the shipped ones)")  # fmt: skip
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        runs = unpacked_runs(args.sweep, Path(scratch))
        if not runs:
            raise SystemExit(f"no archived run under {args.sweep / 'archive'}")
        endpoints = compute(runs)
        text = markdown(endpoints, runs)
    rewrite_tables(args.sweep, runs, args.experiments_dir)
    (args.sweep / "endpoints.md").write_text(text)
    clean = [
        {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in asdict(e).items()}
        for e in endpoints
    ]
    (args.sweep / "endpoints.json").write_text(json.dumps({"endpoints": clean}, indent=1) + "\n")
    print(text)
    print(f"written to {args.sweep / 'endpoints.md'} and endpoints.json")


if __name__ == "__main__":
    main()

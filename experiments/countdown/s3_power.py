"""Countdown S3's seeds from power: how many seeds a row needs to detect a 4-point difference.

S2's primaries were underpowered: at 5 seeds × 523 problems each difference's smallest effect
detectable with 80% power was 6.6–7.7 points at α = 0.05 and 9.0–10.3 at Holm's first step
(``benchmarks/results/countdown/s2/sweep/endpoints.md``). S3 sizes its seeds before any run,
from S2's committed outcomes:

1. each S2 primary's paired difference table ``[seeds, problems]`` (main split, last
   evaluation) is split into its variance components (:func:`agon_lightning.experiments.stats.components`:
   the seeds' own variance σ_a², the problems' σ_b², the seed × problem residual σ_e²);
2. for ``S`` new seeds on ``n`` problems, the registered test's standard error and Satterthwaite
   degrees of freedom are predicted from the mean squares those components imply
   (:func:`predicted`), exactly as :func:`~agon_lightning.experiments.stats.mean_variance`
   computes them from a table;
3. the minimum detectable effect at 80% power follows from them
   (:func:`experiments.countdown.s2_endpoints.minimum_detectable`), at α = 0.05 and at Holm's first
   step (α = 0.05 / primaries); :func:`seeds_needed` is the fewest seeds that bring it to the target.

Command (writes ``power.json`` and prints the table)::

    python -m experiments.countdown.s3_power benchmarks/results/countdown/s2/sweep \\
      --out benchmarks/results/countdown/s3/power.json

The components are S2's at 120 steps; S3 trains longer (its pilot fixes T), and a longer run's
seed variance may differ. The design states the seeds this gives and, beside it, the detectable
effect of the seeds compute allows.
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from agon_lightning.experiments.stats import Components, components, mean_variance
from experiments.countdown.s2_endpoints import (
    ALPHA_LEVEL,
    POWER,
    S2,
    minimum_detectable,
    table,
    unpacked_runs,
)

TARGET = 0.04  # the difference S3 is sized to detect (4 points of pass@1)
MAX_SEEDS = 200  # the search's ceiling: past it a target counts as out of reach


@dataclass(frozen=True)
class Variances:
    """A difference table's variance components: σ_a² (seeds), σ_b² (problems), σ_e² (residual)."""

    seed: float
    problem: float
    residual: float


def variances(difference) -> Variances:
    """The components of a paired difference table ``[seeds, problems]``."""
    c = components(difference)
    return Variances(c.seed_var, c.problem_var, c.residual_var)


def predicted(v: Variances, seeds: int, problems: int) -> tuple[float, float]:
    """``(standard error, Satterthwaite df)`` of the crossed t on a new ``seeds × problems`` table.

    The expected mean squares of the two-way table are ``MS_seed = n·σ_a² + σ_e²``, ``MS_problem
    = S·σ_b² + σ_e²`` and ``MS_residual = σ_e²``; the test's variance is ``(MS_seed + MS_problem −
    MS_residual) / (S·n)`` with Satterthwaite's df over the three mean squares (the formula
    :func:`~agon_lightning.experiments.stats.mean_variance` applies to a measured table).
    """
    if seeds < 2 or problems < 2:
        raise ValueError(f"need at least 2 seeds and 2 problems, got {seeds} × {problems}")
    expected = Components(
        seeds, problems, problems * v.seed + v.residual, seeds * v.problem + v.residual, v.residual
    )
    var, df = mean_variance(expected)
    return math.sqrt(var), df


def detectable(
    v: Variances, seeds: int, problems: int, alpha: float = ALPHA_LEVEL, power: float = POWER
) -> float:
    """The smallest true difference the crossed t detects with ``power`` at two-sided ``alpha``."""
    se, df = predicted(v, seeds, problems)
    return minimum_detectable(se, df, alpha, power)


def seeds_needed(
    v: Variances, problems: int, target: float = TARGET, alpha: float = ALPHA_LEVEL, power: float = POWER
) -> int | None:
    """The fewest seeds (≥ 2) whose detectable effect is at most ``target``; ``None`` past :data:`MAX_SEEDS`.

    The detectable effect falls as seeds are added (the seed term shrinks and the df grow), so
    the search runs upward from 2 seeds.
    """
    for seeds in range(2, MAX_SEEDS + 1):
        if detectable(v, seeds, problems, alpha, power) <= target:
            return seeds
    return None


@dataclass
class Row:
    """One S2 primary, resized for S3."""

    name: str
    s2_seeds: int
    s2_problems: int
    variances: Variances
    s2_detectable: float  # at S2's own seeds × problems, α = 0.05 (the components' check)
    seeds_for_target: int | None  # at α = 0.05
    seeds_for_target_holm: int | None  # at Holm's first step
    detectable_by_seeds: dict[int, tuple[float, float]]  # seeds → (MDE at α, MDE at Holm's first step)


def plan(runs: dict, problems: int | None, target: float, seed_counts: list[int]) -> list[Row]:
    """Every S2 primary's components (main split) and what S3's seeds detect."""
    holm_alpha = ALPHA_LEVEL / len(S2.primaries)
    rows = []
    for name, row, reference in S2.primaries:
        pair = table(runs, row, reference, "", S2.seeds)
        if pair is None:
            raise SystemExit(f"no archived outcomes for {row} against {reference}")
        difference = pair[0] - pair[1]
        v = variances(difference)
        n = problems or difference.shape[1]
        rows.append(
            Row(
                name=name,
                s2_seeds=difference.shape[0],
                s2_problems=difference.shape[1],
                variances=v,
                s2_detectable=detectable(v, difference.shape[0], difference.shape[1]),
                seeds_for_target=seeds_needed(v, n, target),
                seeds_for_target_holm=seeds_needed(v, n, target, holm_alpha),
                detectable_by_seeds={
                    s: (detectable(v, s, n), detectable(v, s, n, holm_alpha)) for s in seed_counts
                },
            )
        )
    return rows


def markdown(rows: list[Row], problems: int | None, target: float, seed_counts: list[int]) -> str:
    n = problems or rows[0].s2_problems
    lines = [
        f"Seeds for 80% power against {target:.2f} on {n} problems, from S2's variance components "
        f"(main split; Holm's first step: α = 0.05 / {len(rows)}):",
        "",
        "| S2 primary | σ_seed² | σ_problem² | σ_residual² | MDE at S2's 5 seeds | seeds (α 0.05) | seeds (Holm) | "
        + " | ".join(f"MDE at {s} seeds (Holm)" for s in seed_counts)
        + " |",
        "|---|---|---|---|---|---|---|" + "---|" * len(seed_counts),
    ]
    for r in rows:
        cells = " | ".join(f"{a:.3f} ({h:.3f})" for a, h in r.detectable_by_seeds.values())
        need = [
            str(x) if x is not None else f"> {MAX_SEEDS}"
            for x in (r.seeds_for_target, r.seeds_for_target_holm)
        ]
        lines.append(
            f"| {r.name} | {r.variances.seed:.5f} | {r.variances.problem:.4f} | {r.variances.residual:.4f} | "
            f"{r.s2_detectable:.3f} | {need[0]} | {need[1]} | {cells} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "sweep", type=Path, help="S2's sweep directory, holding archive/VARIANT/seed_N.tar.gz"
    )
    parser.add_argument("--problems", type=int, default=None, help="S3's main-split problems (default: S2's)")
    parser.add_argument("--target", type=float, default=TARGET)
    parser.add_argument("--seeds", type=int, nargs="+", default=[5, 10, 15, 20, 30])
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        runs = unpacked_runs(args.sweep, Path(scratch))
        rows = plan(runs, args.problems, args.target, args.seeds)
    text = markdown(rows, args.problems, args.target, args.seeds)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        record = {
            "source": str(args.sweep), "target": args.target, "power": POWER, "alpha": ALPHA_LEVEL,
            "holm_alpha": ALPHA_LEVEL / len(rows), "problems": args.problems or rows[0].s2_problems,
            "rows": [asdict(r) for r in rows], "table": text,
        }  # fmt: skip
        args.out.write_text(json.dumps(record, indent=1) + "\n")
        print(f"written to {args.out}")


if __name__ == "__main__":
    main()

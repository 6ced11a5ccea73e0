"""How many held-out problems per split a sweep row needs, from a GRPO-only pilot.

A row's pass@1 is averaged over its seeds and the problems of a split; its interval (the sweep's
two-level bootstrap: seeds, then problems, resampled) has two sources of spread: training noise
(seeds) and the sample of problems. From the pilot's per-seed, per-problem outcomes this script
splits the variance into seeds, problems and their interaction (:func:`components`), predicts the
95% half-width of a row of ``S`` seeds on ``n`` problems (:func:`half_width`), and finds the fewest problems that keep it
within the target (:func:`problems_needed`)::

    python -m experiments.countdown.sizing benchmarks/results/countdown/pilot --variant grpo --seeds 3 5
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np

Z95 = 1.959964


def components(outcomes: np.ndarray) -> tuple[float, float, float]:
    """``(seed variance, problem variance, residual variance)`` of 0/1 outcomes ``[seeds, problems]``.

    The seeds share their problems, so a seed's mean carries no problem-to-problem variance: only
    the seed × problem interaction (with each outcome's own noise) adds to the spread of the seed
    means. The two-way ANOVA's mean squares separate the three
    (:func:`agon_lightning.experiments.stats.components`). S1's version subtracted the whole
    within-seed variance (problems included) from the seed means' spread, which set the seed
    variance to 0 on two pilot seeds that differed by 1.7 points.
    """
    from agon_lightning.experiments.stats import components as mean_squares

    c = mean_squares(outcomes)
    return c.seed_var, c.problem_var, c.residual_var


def half_width(
    seed_var: float, problem_var: float, seeds: int, problems: int, residual_var: float = 0.0
) -> float:
    """The predicted 95% half-width of a row's mean pass@1 over new seeds and new problems."""
    return Z95 * math.sqrt(seed_var / seeds + problem_var / problems + residual_var / (seeds * problems))


def problems_needed(
    seed_var: float,
    problem_var: float,
    seeds: int,
    target: float = 0.03,
    step: int = 100,
    residual_var: float = 0.0,
) -> int | None:
    """The fewest problems (a multiple of ``step``) keeping the half-width within ``target``, or
    ``None`` when the seeds alone already spread it wider."""
    room = (target / Z95) ** 2 - seed_var / seeds
    if room <= 0:
        return None
    return max(step, math.ceil((problem_var + residual_var / seeds) / room / step) * step)


def main(argv: list[str] | None = None) -> None:
    from agon_lightning.experiments.sweep_report import read_outcomes, resolve_key

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("pilot", type=Path, help="a sweep's --out holding VARIANT/seed_*/")
    parser.add_argument("--variant", default="grpo")
    parser.add_argument("--seeds", type=int, nargs="+", default=[3, 5], help="seeds per row to size for")
    parser.add_argument("--target", type=float, default=0.03)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    runs = sorted((args.pilot / args.variant).glob("seed_*"))
    logs = [sorted(r.glob("lightning_logs/version_*"), key=lambda p: int(p.name[8:]))[-1] for r in runs]
    outcomes = [read_outcomes(log, "deployed") for log in logs]
    record: dict = {"pilot": str(args.pilot), "variant": args.variant, "runs": [str(r) for r in runs],
                    "deployed": resolve_key(logs[0], "deployed"), "target": args.target, "splits": {}}  # fmt: skip
    print("| split | pilot seeds × problems | pass@1 | seed var | problem var | "
          + " | ".join(f"problems for ±{args.target:.2f} at {s} seeds" for s in args.seeds) + " |")  # fmt: skip
    print("|---|---|---|---|---|" + "---|" * len(args.seeds))
    for split in sorted(set.intersection(*(set(o) for o in outcomes))):
        questions = sorted(set.intersection(*(set(o[split]) for o in outcomes)))
        y = np.array([[o[split][q][0] for q in questions] for o in outcomes], dtype=float)
        seed_var, problem_var, residual_var = components(y)
        need = {s: problems_needed(seed_var, problem_var, s, args.target, residual_var=residual_var)
                for s in args.seeds}  # fmt: skip
        record["splits"][split] = {"seeds": len(y), "problems": len(questions), "pass@1": float(y.mean()),
                                   "seed_var": seed_var, "problem_var": problem_var, "residual_var": residual_var,
                                   "per_seed": y.mean(1).tolist(), "problems_needed": need}  # fmt: skip
        cells = " | ".join("none suffices" if n is None else str(n) for n in need.values())
        print(
            f"| {split} | {len(y)} × {len(questions)} | {y.mean():.3f} | {seed_var:.5f} | {problem_var:.4f} | {cells} |"
        )
    if args.out:
        args.out.write_text(json.dumps(record, indent=1) + "\n")
        print(f"written to {args.out}")


if __name__ == "__main__":
    main()

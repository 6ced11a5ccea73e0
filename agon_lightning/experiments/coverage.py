"""How often each interval for a paired pass@1 difference covers the truth, on simulated sweeps.

A sweep's difference between two rows varies with the seeds (training noise) and with the
problems (which part of the space was held out). This module simulates sweeps whose variance
components are known, so an interval's coverage is counted rather than argued::

    python -m agon_lightning.experiments.coverage --out benchmarks/results/countdown/s2/coverage.json

**The model.** Row R's outcome on problem i with seed s is Bernoulli(σ(μ_R + u_i + v_Ri + a_Rs +
e_Rsi)): u a problem's difficulty (shared by the rows), v how much the problem suits the row,
a the seed's effect on the row, e the seed × problem interaction; all normal with the standard
deviations of a cell. Every simulated sweep draws new problems and new seeds; the truth is
E[p_A] − E[p_B] over all of it (Gauss–Hermite quadrature).

**The intervals** (95%): S1's two-level percentile bootstrap
(:func:`~agon_lightning.experiments.stats.paired_bootstrap`, here vectorised), a t over the per-seed
means (:func:`~agon_lightning.experiments.stats.seed_t`), and the crossed t
(:func:`~agon_lightning.experiments.stats.crossed_t`).
"""

from __future__ import annotations

import argparse
import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from agon_lightning.experiments.stats import components, crossed_t, seed_t


@dataclass(frozen=True)
class Cell:
    """One simulated design: ``seeds`` × ``problems``, the rows' logit means and the components' SDs."""

    seeds: int
    problems: int
    mu_a: float = 0.3
    mu_b: float = 0.0
    problem_sd: float = 2.0  # u: difficulty, shared by both rows
    row_problem_sd: float = 1.0  # v: the row × problem effect
    seed_sd: float = 0.15  # a: the seed's effect on a row
    interaction_sd: float = 1.0  # e: seed × problem


def truth(cell: Cell) -> float:
    """E[p_A] − E[p_B]: each row's logit is its mean plus a normal of the summed variances."""
    nodes, weights = np.polynomial.hermite_e.hermegauss(121)
    sd = math.sqrt(cell.problem_sd**2 + cell.row_problem_sd**2 + cell.seed_sd**2 + cell.interaction_sd**2)

    def expected(mu: float) -> float:
        return float((weights / (1 + np.exp(-(mu + sd * nodes)))).sum() / weights.sum())

    return expected(cell.mu_a) - expected(cell.mu_b)


def simulate(cell: Cell, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """One sweep's 0/1 outcomes of rows A and B, ``[seeds, problems]`` each, paired."""
    s, n = cell.seeds, cell.problems
    u = rng.normal(0, cell.problem_sd, n)

    def row(mu: float) -> np.ndarray:
        logit = (mu + u[None, :] + rng.normal(0, cell.row_problem_sd, n)[None, :]
                 + rng.normal(0, cell.seed_sd, s)[:, None] + rng.normal(0, cell.interaction_sd, (s, n)))  # fmt: skip
        return (rng.random((s, n)) < 1 / (1 + np.exp(-logit))).astype(float)

    return row(cell.mu_a), row(cell.mu_b)


def percentile_bootstrap(
    d: np.ndarray, rng: np.random.Generator, resamples: int = 1000
) -> tuple[float, float]:
    """S1's interval: seeds, then problems, resampled with replacement; the 2.5 and 97.5 percentiles
    of the resampled means (the distribution of :func:`~agon_lightning.experiments.stats.paired_bootstrap`)."""
    s, n = d.shape
    seed_weights = rng.multinomial(s, np.full(s, 1 / s), size=resamples) / s  # [R, S]
    problem_weights = rng.multinomial(n, np.full(n, 1 / n), size=resamples) / n  # [R, n]
    means = ((seed_weights @ d) * problem_weights).sum(1)
    low, high = np.percentile(means, [2.5, 97.5])
    return float(low), float(high)


def run_cell(cell: Cell, sims: int, seed: int = 0) -> dict:
    """Coverage and mean half-width of each interval over ``sims`` simulated sweeps of ``cell``,
    and the crossed variance formula's predicted SD of the estimate against the simulated SD."""
    rng = np.random.default_rng(seed)
    target = truth(cell)
    hits = {"percentile_bootstrap": 0, "seed_t": 0, "crossed_t": 0}
    widths = {k: 0.0 for k in hits}
    estimates, predicted = [], []
    for _ in range(sims):
        a, b = simulate(cell, rng)
        d = a - b
        intervals = {
            "percentile_bootstrap": percentile_bootstrap(d, rng),
            "seed_t": (lambda r: (r.low, r.high))(seed_t(d)),
            "crossed_t": (lambda r: (r.low, r.high))(crossed_t(d)),
        }
        for name, (low, high) in intervals.items():
            hits[name] += low <= target <= high
            widths[name] += (high - low) / 2
        estimates.append(d.mean())
        c = components(d)
        predicted.append(
            c.seed_var / c.seeds + c.problem_var / c.problems + c.residual_var / (c.seeds * c.problems)
        )
    return {
        "cell": asdict(cell), "truth": target, "sims": sims,
        "coverage": {k: v / sims for k, v in hits.items()},
        "half_width": {k: v / sims for k, v in widths.items()},
        "sd_of_estimate": float(np.std(estimates, ddof=1)),
        "predicted_sd": float(math.sqrt(np.mean(predicted))),
    }  # fmt: skip


#: The grid, fixed before it was first run: S1's shape (3 and 5 seeds, ~500 problems) across seed
#: effects from none to twice S1's (GRPO's seeds spanned 8.4 points: a seed SD near 0.13 on the
#: logit) and a weak or strong row × problem effect.
GRID = [
    Cell(seeds=s, problems=500, seed_sd=a, row_problem_sd=v)
    for s in (3, 5)
    for a in (0.0, 0.15, 0.3)
    for v in (0.5, 1.5)
]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sims", type=int, default=400, help="simulated sweeps per cell")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    start = time.perf_counter()
    rows = [run_cell(cell, args.sims, seed=k) for k, cell in enumerate(GRID)]
    se = math.sqrt(0.95 * 0.05 / args.sims)
    print(f"coverage of 95% intervals over {args.sims} simulated sweeps per row (± {se:.3f} binomial SE)\n")
    print("| seeds × problems | seed SD | row × problem SD | percentile bootstrap | seed-level t | crossed t | "
          "SD of the estimate: simulated / predicted |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        c, cov, hw = r["cell"], r["coverage"], r["half_width"]
        cells = " | ".join(
            f"{cov[k]:.3f} (±{hw[k]:.3f})" for k in ("percentile_bootstrap", "seed_t", "crossed_t")
        )
        print(f"| {c['seeds']} × {c['problems']} | {c['seed_sd']} | {c['row_problem_sd']} | {cells} | "
              f"{r['sd_of_estimate']:.4f} / {r['predicted_sd']:.4f} |")  # fmt: skip
    print(f"\n{time.perf_counter() - start:.0f} s")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"sims": args.sims, "rows": rows}, indent=1) + "\n")
        print(f"written to {args.out}")


if __name__ == "__main__":
    main()

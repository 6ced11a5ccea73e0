"""The sweep's statistics: an exact interval per cell, and a bootstrap between runs.

**One cell.** k of n held-out answers right: :func:`clopper_pearson` is the exact binomial
interval the paper reports per row (95%, over its 300 problems).

**Two variants.** Two variants run with the same seeds on the same held-out problems give, per seed and problem,
a 0/1 outcome each; their difference in pass@1 varies with both the seed (training noise) and
the problem sample (evaluation noise). Resampling both levels — seeds with replacement, then
problems with replacement — gives a confidence interval that counts both, and pairing (same
seed, same problem) removes what the two runs share.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


def _binomial_cdf(k: int, n: int, p: float) -> float:
    """P(X ≤ k) for X ~ Binomial(n, p), summed in log space (exact for the n of a sweep)."""
    if k < 0:
        return 0.0
    if k >= n:
        return 1.0
    if p <= 0.0:
        return 1.0
    if p >= 1.0:
        return 0.0
    log_p, log_q = math.log(p), math.log1p(-p)
    terms = [math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * log_p + (n - i) * log_q
             for i in range(k + 1)]  # fmt: skip
    top = max(terms)
    return min(1.0, math.exp(top) * sum(math.exp(t - top) for t in terms))


def _solve(f, target: float) -> float:
    """The p in [0, 1] where the decreasing function ``f`` crosses ``target`` (bisection)."""
    low, high = 0.0, 1.0
    for _ in range(60):  # 2^-60: far below any printed digit
        mid = (low + high) / 2
        low, high = (mid, high) if f(mid) > target else (low, mid)
    return (low + high) / 2


def clopper_pearson(successes: int, trials: int, confidence: float = 0.95) -> tuple[float, float]:
    """The exact (Clopper–Pearson) interval for a binomial proportion: ``(low, high)``.

    ``low`` solves P(X ≥ k | low) = α/2 and ``high`` solves P(X ≤ k | high) = α/2, with
    α = 1 − confidence; ``low`` is 0 when k = 0 and ``high`` is 1 when k = n.

    Raises:
        ValueError: ``trials`` < 1, ``successes`` outside ``[0, trials]``, or a confidence outside (0, 1).
    """
    if trials < 1 or not 0 <= successes <= trials:
        raise ValueError(f"need 0 <= successes <= trials and trials >= 1, got {successes} of {trials}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    tail = (1 - confidence) / 2
    low = 0.0 if successes == 0 else _solve(lambda p: _binomial_cdf(successes - 1, trials, p), 1 - tail)
    high = 1.0 if successes == trials else _solve(lambda p: _binomial_cdf(successes, trials, p), tail)
    return low, high


@dataclass(frozen=True)
class PairedDifference:
    """Mean of ``a − b`` over seeds × problems, with a percentile bootstrap interval.

    Attributes:
        mean: The observed mean difference.
        low: Lower bound of the interval.
        high: Upper bound.
        seeds: Seeds paired.
        problems: Problems per seed.
    """

    mean: float
    low: float
    high: float
    seeds: int
    problems: int

    @property
    def excludes_zero(self) -> bool:
        return self.low > 0 or self.high < 0

    def __str__(self) -> str:
        return f"{self.mean:+.3f} [{self.low:+.3f}, {self.high:+.3f}]"


def paired_bootstrap(
    a: np.ndarray, b: np.ndarray, resamples: int = 4000, confidence: float = 0.95, seed: int = 0
) -> PairedDifference:
    """Bootstrap the mean of ``a − b`` (both ``[seeds, problems]``, rows paired by seed).

    Raises:
        ValueError: shapes that differ or are empty.
    """
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.shape != b.shape or a.ndim != 2 or 0 in a.shape:
        raise ValueError(f"need two equal [seeds, problems] arrays, got {a.shape} and {b.shape}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    diff = a - b  # [S, I]
    seeds, problems = diff.shape
    rng = np.random.default_rng(seed)
    rows = rng.integers(0, seeds, size=(resamples, seeds))
    cols = rng.integers(0, problems, size=(resamples, problems))
    # Mean over the resampled seeds of each seed's mean over the resampled problems.
    means = np.array([diff[r][:, c].mean() for r, c in zip(rows, cols)])
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(means, [tail, 100 - tail])
    return PairedDifference(float(diff.mean()), float(low), float(high), seeds, problems)

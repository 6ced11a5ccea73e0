"""Paired comparisons between runs: a bootstrap over seeds and problems.

Two variants run with the same seeds on the same held-out problems give, per seed and problem,
a 0/1 outcome each; their difference in pass@1 varies with both the seed (training noise) and
the problem sample (evaluation noise). Resampling both levels — seeds with replacement, then
problems with replacement — gives a confidence interval that counts both, and pairing (same
seed, same problem) removes what the two runs share.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


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

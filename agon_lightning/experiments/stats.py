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


# ---------------------------------------------------------------------- crossed seeds × problems
@dataclass(frozen=True)
class Components:
    """Mean squares of a seeds × problems table (two-way ANOVA, one value per cell).

    Under ``y[s, i] = μ + a_s + b_i + e_si`` (seed effect, problem effect, their interaction with
    the cell's own noise), ``seed`` estimates ``n·σ_a² + σ_e²``, ``problem`` ``S·σ_b² + σ_e²``
    and ``residual`` ``σ_e²``.
    """

    seeds: int
    problems: int
    seed: float
    problem: float
    residual: float

    @property
    def seed_var(self) -> float:
        """σ_a²: the seeds' own variance (0 when the table cannot tell it from the interaction)."""
        return max(0.0, (self.seed - self.residual) / self.problems)

    @property
    def problem_var(self) -> float:
        """σ_b²: the problems' own variance."""
        return max(0.0, (self.problem - self.residual) / self.seeds)

    @property
    def residual_var(self) -> float:
        """σ_e²: the seed × problem interaction and each outcome's own noise."""
        return self.residual


def components(y: np.ndarray) -> Components:
    """The mean squares of ``y`` (``[seeds, problems]``, at least 2 × 2)."""
    y = np.asarray(y, dtype=float)
    if y.ndim != 2 or y.shape[0] < 2 or y.shape[1] < 2:
        raise ValueError(f"need a table of at least 2 seeds × 2 problems, got shape {y.shape}")
    seeds, problems = y.shape
    grand, by_seed, by_problem = y.mean(), y.mean(1), y.mean(0)
    resid = y - by_seed[:, None] - by_problem[None, :] + grand
    return Components(
        seeds, problems,
        problems * float(((by_seed - grand) ** 2).sum()) / (seeds - 1),
        seeds * float(((by_problem - grand) ** 2).sum()) / (problems - 1),
        float((resid**2).sum()) / ((seeds - 1) * (problems - 1)),
    )  # fmt: skip


def mean_variance(c: Components) -> tuple[float, float]:
    """The variance of the table's grand mean as an estimate of the mean over new seeds and new
    problems, ``σ_a²/S + σ_b²/n + σ_e²/(S·n)``, estimated without bias by
    ``(MS_seed + MS_problem − MS_residual) / (S·n)``, and its Satterthwaite degrees of freedom.
    A negative estimate (rare: both effects near 0) is floored at ``MS_residual / (S·n)``."""
    s, n = c.seeds, c.problems
    terms = [(c.seed, s - 1), (c.problem, n - 1), (-c.residual, (s - 1) * (n - 1))]
    total = sum(ms for ms, _ in terms)
    if total <= c.residual:
        return c.residual / (s * n), float((s - 1) * (n - 1))
    df = total**2 / sum(ms**2 / d for ms, d in terms)
    return total / (s * n), float(df)


def _beta_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of the regularized incomplete beta function (modified Lentz)."""
    tiny, c, d = 1e-300, 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 500):
        for num in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                    -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):  # fmt: skip
            d = 1 + num * d
            d = 1 / (d if abs(d) > tiny else tiny)
            c = 1 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1) < 1e-15:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b)."""
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    front = math.exp(
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    if x < (a + 1) / (a + b + 2):
        return front * _beta_fraction(a, b, x) / a
    return 1 - front * _beta_fraction(b, a, 1 - x) / b


def t_two_sided(t: float, df: float) -> float:
    """P(|T| ≥ |t|) for Student's t with ``df`` degrees of freedom."""
    return _betainc(df / 2, 0.5, df / (df + t * t))


def t_quantile(p: float, df: float) -> float:
    """The ``p`` quantile (``p`` in (0.5, 1)) of Student's t with ``df`` degrees of freedom."""
    if not 0.5 < p < 1:
        raise ValueError(f"p must be in (0.5, 1), got {p}")
    low, high = 0.0, 1.0
    while t_two_sided(high, df) > 2 * (1 - p):
        high *= 2
    for _ in range(200):
        mid = (low + high) / 2
        low, high = (mid, high) if t_two_sided(mid, df) > 2 * (1 - p) else (low, mid)
    return (low + high) / 2


@dataclass(frozen=True)
class CrossedDifference(PairedDifference):
    """:class:`PairedDifference` with the crossed interval's standard error, df and two-sided p."""

    se: float = math.nan
    df: float = math.nan
    p: float = math.nan


def crossed_t(a: np.ndarray, b: np.ndarray | None = None, confidence: float = 0.95) -> CrossedDifference:
    """The mean of ``a − b`` (both ``[seeds, problems]``, paired by seed and problem; ``b=None``: of
    ``a``) with a t interval whose variance counts new seeds *and* new problems (:func:`mean_variance`).

    This is the interval S2 registers (``benchmarks/results/countdown/s2/README.md``): a percentile
    bootstrap over 3–5 seeds under-covers (its seed level has 3–5 values to resample), and a
    seed-level t holds the problems fixed; :mod:`agon_lightning.experiments.coverage` measures all three.
    """
    a = np.asarray(a, dtype=float)
    d = a if b is None else a - np.asarray(b, dtype=float)
    if b is not None and np.shape(b) != a.shape:
        raise ValueError(f"need two equal [seeds, problems] arrays, got {a.shape} and {np.shape(b)}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if d.ndim != 2 or d.shape[1] < 2:
        raise ValueError(f"need a [seeds, problems] table with at least 2 problems, got shape {d.shape}")
    if d.shape[0] == 1:  # one seed: only the problems' spread can be seen
        var, df = float(d.var(ddof=1)) / d.shape[1], float(d.shape[1] - 1)
    else:
        var, df = mean_variance(components(d))
    se = math.sqrt(var)
    half = t_quantile(1 - (1 - confidence) / 2, df) * se
    mean = float(d.mean())
    p = t_two_sided(mean / se, df) if se > 0 else (0.0 if mean != 0 else 1.0)
    return CrossedDifference(mean, mean - half, mean + half, d.shape[0], d.shape[1], se, df, p)


def seed_t(a: np.ndarray, b: np.ndarray | None = None, confidence: float = 0.95) -> PairedDifference:
    """A t interval over the per-seed means of ``a − b`` (``S − 1`` df): the problems held fixed."""
    d = np.asarray(a, dtype=float) - (0 if b is None else np.asarray(b, dtype=float))
    per_seed = d.mean(1)
    s = len(per_seed)
    if s < 2:
        raise ValueError("a seed-level t needs at least 2 seeds")
    half = t_quantile(1 - (1 - confidence) / 2, s - 1) * float(per_seed.std(ddof=1)) / math.sqrt(s)
    return PairedDifference(float(d.mean()), float(d.mean()) - half, float(d.mean()) + half, s, d.shape[1])


def holm(p_values: dict[str, float]) -> dict[str, float]:
    """Holm's step-down adjusted p-values (family-wise error held at α by rejecting adjusted p < α)."""
    order = sorted(p_values, key=p_values.get)
    m, running, out = len(order), 0.0, {}
    for k, name in enumerate(order):
        running = max(running, min(1.0, (m - k) * p_values[name]))
        out[name] = running
    return out

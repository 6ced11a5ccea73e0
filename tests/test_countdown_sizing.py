"""The sizing of a sweep's held-out sets from a pilot (benchmarks/countdown_sizing.py)."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.countdown_sizing import components, half_width, problems_needed


def test_components_recover_seed_and_problem_spread() -> None:
    rng = np.random.default_rng(0)
    difficulty = rng.uniform(0.1, 0.9, size=4000)  # each problem's chance of being solved
    shifts = np.array([-0.05, 0.0, 0.05])  # each seed's training moves every problem the same way
    y = (rng.random((3, 4000)) < np.clip(difficulty + shifts[:, None], 0, 1)).astype(float)
    seed_var, problem_var = components(y)
    assert seed_var == pytest.approx(shifts.var(ddof=1), rel=0.2)
    assert problem_var == pytest.approx(
        difficulty.var() + np.mean(difficulty * (1 - difficulty)) / 3, rel=0.1
    )
    same = np.tile(y[:1], (3, 1))  # three identical seeds: no training noise
    assert components(same)[0] == 0.0


def test_problems_needed_meets_the_target_or_says_none_can() -> None:
    n = problems_needed(0.0001, 0.2, seeds=3, target=0.03)
    assert n % 100 == 0 and half_width(0.0001, 0.2, 3, n) <= 0.03 < half_width(0.0001, 0.2, 3, n - 100)
    assert problems_needed(0.001, 0.2, seeds=3, target=0.03) is None  # seeds alone: ±3.6 points
    assert problems_needed(0.001, 0.2, seeds=5, target=0.03) is not None
    with pytest.raises(ValueError, match="at least 2 seeds"):
        components(np.zeros((1, 10)))

"""The sizing of a sweep's held-out sets from a pilot (experiments/countdown/sizing.py)."""

from __future__ import annotations

import numpy as np
import pytest

from experiments.countdown.sizing import components, half_width, problems_needed


def test_components_recover_seed_and_problem_spread() -> None:
    rng = np.random.default_rng(0)
    difficulty = rng.uniform(0.1, 0.9, size=4000)  # each problem's chance of being solved
    shifts = np.array([-0.05, 0.0, 0.05])  # each seed's training moves every problem the same way
    y = (rng.random((3, 4000)) < np.clip(difficulty + shifts[:, None], 0, 1)).astype(float)
    seed_var, problem_var, residual_var = components(y)
    assert seed_var == pytest.approx(shifts.var(ddof=1), rel=0.2)
    assert problem_var == pytest.approx(difficulty.var(), rel=0.1)
    assert residual_var == pytest.approx(np.mean(difficulty * (1 - difficulty)), rel=0.1)  # the coin flips
    same = np.tile(y[:1], (3, 1))  # three identical seeds: no training noise
    assert components(same)[0] == 0.0


def test_seeds_that_share_their_problems_keep_their_spread() -> None:
    # Greedy runs solve mostly the same problems; each seed solves about 0.4 points more than the last.
    # The seed means differ by far less than one problem's coin flip over n problems, which S1's
    # sizing subtracted whole (and so read 0); only the seed × problem disagreement belongs there.
    rng = np.random.default_rng(1)
    solved = rng.random(4000) < 0.5
    y = np.array([solved | (rng.random(4000) < 0.008 * k) for k in range(4)], dtype=float)
    seed_var, _, _ = components(y)
    per_seed = y.mean(1)
    old = max(0.0, per_seed.var(ddof=1) - np.mean([row.var(ddof=1) for row in y]) / y.shape[1])
    assert old == 0.0  # what S1's formula said
    assert seed_var == pytest.approx(per_seed.var(ddof=1), rel=0.25) and seed_var > 1e-5


def test_problems_needed_meets_the_target_or_says_none_can() -> None:
    n = problems_needed(0.0001, 0.2, seeds=3, target=0.03)
    assert n % 100 == 0 and half_width(0.0001, 0.2, 3, n) <= 0.03 < half_width(0.0001, 0.2, 3, n - 100)
    assert problems_needed(0.001, 0.2, seeds=3, target=0.03) is None  # seeds alone: ±3.6 points
    assert problems_needed(0.001, 0.2, seeds=5, target=0.03) is not None
    with pytest.raises(ValueError, match="at least 2 seeds"):
        components(np.zeros((1, 10)))

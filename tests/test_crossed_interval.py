"""The interval S2 registers for a paired pass@1 difference: seeds and problems both resampled."""

from __future__ import annotations

import math

import numpy as np
import pytest

from agon_lightning.experiments.coverage import Cell, run_cell, simulate, truth
from agon_lightning.experiments.stats import (
    components,
    crossed_t,
    holm,
    mean_variance,
    seed_t,
    t_quantile,
    t_two_sided,
)


def test_student_t_against_its_tables():
    assert t_quantile(0.975, 4) == pytest.approx(2.7764, abs=1e-4)
    assert t_quantile(0.975, 1) == pytest.approx(12.7062, abs=1e-4)
    assert t_quantile(0.975, 1e7) == pytest.approx(1.95996, abs=1e-4)
    assert t_two_sided(2.7764451, 4) == pytest.approx(0.05, abs=1e-6)
    assert t_two_sided(0.0, 3) == pytest.approx(1.0)


def test_mean_squares_of_a_hand_table():
    y = np.array([[1.0, 0.0, 1.0], [1.0, 1.0, 1.0]])  # 2 seeds × 3 problems
    c = components(y)
    # grand 5/6; seed means 2/3, 1; problem means 1, 1/2, 1
    assert c.seed == pytest.approx(3 * ((2 / 3 - 5 / 6) ** 2 + (1 - 5 / 6) ** 2) / 1)
    assert c.problem == pytest.approx(2 * ((1 / 6) ** 2 * 2 + (1 / 3) ** 2) / 2)
    resid = y - y.mean(1, keepdims=True) - y.mean(0, keepdims=True) + y.mean()
    assert c.residual == pytest.approx((resid**2).sum() / 2)
    var, df = mean_variance(c)
    assert var == pytest.approx((c.seed + c.problem - c.residual) / 6)
    terms = [(c.seed, 1), (c.problem, 2), (-c.residual, 2)]
    assert df == pytest.approx(sum(m for m, _ in terms) ** 2 / sum(m * m / d for m, d in terms))


def test_the_crossed_interval_widens_with_seed_spread_the_problems_alone_do_not_show():
    rng = np.random.default_rng(0)
    problems = rng.random(600) < 0.5
    flat = np.array([problems] * 5, dtype=float) - 0.0  # five seeds that agree: only problems vary
    spread = flat + np.array([-0.1, -0.05, 0.0, 0.05, 0.1])[:, None]  # seeds shift every problem
    quiet, loud = crossed_t(flat), crossed_t(spread)
    assert loud.high - loud.low > 2 * (quiet.high - quiet.low)
    assert quiet.df > 100 and loud.df < 10  # few seeds: few degrees of freedom
    # the seed-level t cannot see the problems: with identical seeds it has no width at all
    assert seed_t(flat).high == seed_t(flat).low
    d = crossed_t(spread, flat)
    assert d.mean == pytest.approx(0.0, abs=1e-12) and d.p == pytest.approx(1.0)


def test_holm_adjusts_in_step_down_order():
    adjusted = holm({"a": 0.01, "b": 0.04, "c": 0.03})
    assert adjusted == pytest.approx({"a": 0.03, "c": 0.06, "b": 0.06})
    assert holm({"only": 0.2}) == {"only": 0.2}


def test_simulated_sweeps_have_the_truth_the_model_says():
    cell = Cell(seeds=3, problems=50, mu_a=0.0, mu_b=0.0)
    assert truth(cell) == 0.0
    far = Cell(seeds=3, problems=50, mu_a=2.0, mu_b=-2.0, problem_sd=0.0, row_problem_sd=0.0, seed_sd=0.0,
               interaction_sd=0.0)  # fmt: skip
    assert truth(far) == pytest.approx(1 / (1 + math.exp(-2)) - 1 / (1 + math.exp(2)))
    a, b = simulate(far, np.random.default_rng(0))
    assert a.shape == b.shape == (3, 50) and set(np.unique(a)) <= {0.0, 1.0}
    assert a.mean() - b.mean() == pytest.approx(truth(far), abs=0.1)
    row = run_cell(Cell(seeds=3, problems=60), sims=40)
    assert set(row["coverage"]) == {"percentile_bootstrap", "seed_t", "crossed_t"}
    assert all(0.0 <= v <= 1.0 for v in row["coverage"].values())
    assert row["predicted_sd"] == pytest.approx(row["sd_of_estimate"], rel=0.5)

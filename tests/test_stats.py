"""The exact binomial interval of one cell, and the paired bootstrap between runs."""

import numpy as np
import pytest

from agon_lightning.experiments.stats import clopper_pearson, paired_bootstrap


def test_identical_runs_differ_by_exactly_zero():
    a = np.random.default_rng(0).integers(0, 2, (3, 50))
    d = paired_bootstrap(a, a)
    assert (d.mean, d.low, d.high) == (0.0, 0.0, 0.0) and not d.excludes_zero


def test_a_clear_gain_is_found_and_noise_is_not():
    rng = np.random.default_rng(1)
    b = rng.random((3, 200)) < 0.4
    better = b | (rng.random((3, 200)) < 0.3)  # the same problems, plus some more solved
    gain = paired_bootstrap(better, b)
    assert (
        gain.excludes_zero and gain.low > 0 and gain.mean == pytest.approx((better.astype(float) - b).mean())
    )
    noise = paired_bootstrap(rng.random((3, 200)) < 0.4, rng.random((3, 200)) < 0.4)
    assert noise.low < noise.mean < noise.high
    assert noise.high - noise.low > 0.03  # two independent 40% runs: the interval is not tiny


def test_bad_shapes_are_named():
    with pytest.raises(ValueError, match=r"\(2, 3\) and \(3, 2\)"):
        paired_bootstrap(np.zeros((2, 3)), np.zeros((3, 2)))


@pytest.mark.parametrize(
    "k,n,low,high",
    [
        (0, 10, 0.0, 1 - 0.025**0.1),  # closed forms at the ends: (α/2)^(1/n)
        (10, 10, 0.025**0.1, 1.0),
        (1, 1, 0.025, 1.0),
        (5, 10, 0.187086, 0.812914),  # the textbook value
        (183, 300, 0.5523, 0.6655),  # the paper's Agon row: 61% of 300, 55.2–66.6
        (138, 300, 0.4026, 0.5182),  # its cooperative row: 46%, 40.3–51.8
        (105, 300, 0.2961, 0.4069),  # its self-cascade row: 35%, 29.7–40.7
    ],
)
def test_clopper_pearson_against_known_intervals(k, n, low, high):
    got = clopper_pearson(k, n)
    assert got == pytest.approx((low, high), abs=1e-4)
    assert clopper_pearson(n - k, n) == pytest.approx((1 - high, 1 - low), abs=1e-4)  # symmetric


def test_clopper_pearson_narrows_with_more_trials_and_widens_with_confidence():
    width = [b - a for a, b in (clopper_pearson(40 * m, 100 * m) for m in (1, 3, 9))]
    assert width[0] > width[1] > width[2]
    (a95, b95), (a99, b99) = clopper_pearson(40, 100), clopper_pearson(40, 100, 0.99)
    assert a99 < a95 < 0.4 < b95 < b99


@pytest.mark.parametrize("k,n", [(3, 2), (-1, 5), (0, 0)])
def test_clopper_pearson_names_bad_counts(k, n):
    with pytest.raises(ValueError, match=f"got {k} of {n}"):
        clopper_pearson(k, n)

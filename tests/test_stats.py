"""The paired bootstrap: exact where it must be, wide where the data are noisy."""

import numpy as np
import pytest

from agon_lightning.stats import paired_bootstrap


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

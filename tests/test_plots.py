"""The shared plots: policies found in the metrics, a column per split, one colour per policy."""

from __future__ import annotations

import math

from agon_lightning.experiments.plots import colours, plot_validation, split_metrics

HISTORY = [
    (0, {"val/base/pass@1": 0.3, "val/base/length": 40.0, "val/cascade_ab/pass@1": 0.3, "val/cascade_ab/length": 41.0,
         "val/deployed/pass@1": 0.3, "val/hard/cascade_ab/pass@1": 0.1, "val/hard/cascade_ab/length": 50.0,
         "val/overlap/jaccard": 0.5, "val/hard/overlap/alpha/jaccard": 0.2}),
    (10, {"val/base/pass@1": 0.3, "val/base/length": 40.0, "val/cascade_ab/pass@1": 0.55,
          "val/cascade_ab/length": 35.0, "val/hard/cascade_ab/pass@1": 0.2}),
]  # fmt: skip


def test_policies_and_splits_come_from_the_metrics_and_diagnostics_are_skipped():
    found = split_metrics(HISTORY)
    assert set(found) == {"", "hard"}
    assert set(found[""]) == {"base", "cascade_ab"}  # no "deployed" alias, no "overlap" diagnostic
    assert set(found["hard"]) == {"cascade_ab"}
    assert found["hard"]["cascade_ab"]["pass@1"] == [0.1, 0.2]
    assert found["hard"]["cascade_ab"]["length"][0] == 50.0 and math.isnan(
        found["hard"]["cascade_ab"]["length"][1]
    )


def test_each_policy_keeps_one_colour_and_no_two_share_one():
    keys = ["base", "alpha", "beta", "cascade_ab", "cascade_ba", "moa", "x", "y"]
    palette = colours(keys)
    assert len(set(palette.values())) == len(keys)
    assert colours(["cascade_ab"])["cascade_ab"] == palette["cascade_ab"]  # the same in every plot


def test_validation_png_is_written(tmp_path):
    path = plot_validation(HISTORY, tmp_path / "v.png", deployed="cascade_ab")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

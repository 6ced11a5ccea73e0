"""S3's seeds from power: the predicted test agrees with the registered one, and the seeds it asks for suffice."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from agon_lightning.experiments.stats import components, mean_variance
from experiments.countdown.s3_power import Variances, detectable, main, predicted, seeds_needed, variances

S2_SWEEP = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "countdown" / "s2" / "sweep"
S3 = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "countdown" / "s3"


def table(seeds: int, problems: int, seed_sd: float, rng: np.random.Generator) -> np.ndarray:
    """0/1 differences of two rows: problems of varied difficulty, a per-seed shift."""
    difficulty = rng.uniform(0.2, 0.8, problems)
    a = rng.random((seeds, problems)) < np.clip(difficulty + rng.normal(0, seed_sd, (seeds, 1)), 0, 1)
    b = rng.random((seeds, problems)) < difficulty
    return a.astype(float) - b.astype(float)


@pytest.mark.parametrize("seed_sd", [0.05, 0.1])
def test_at_the_tables_own_shape_the_prediction_is_the_registered_tests_variance_and_df(seed_sd):
    y = table(5, 300, seed_sd, np.random.default_rng(1))
    var, df = mean_variance(components(y))
    se, predicted_df = predicted(variances(y), 5, 300)
    assert se**2 == pytest.approx(var, rel=1e-9)
    assert predicted_df == pytest.approx(df, rel=1e-9)


def test_more_seeds_detect_smaller_effects_and_a_fixed_reference_keeps_its_problem_floor():
    v = Variances(seed=0.002, problem=0.05, residual=0.07)
    mdes = [detectable(v, s, 523) for s in (5, 10, 20, 40, 160)]
    assert mdes == sorted(mdes, reverse=True)
    floor = 1.96 * np.sqrt(v.problem / 523)  # what no number of seeds removes
    assert mdes[-1] > floor


def test_the_seeds_needed_are_the_fewest_that_reach_the_target():
    v = Variances(seed=0.0018, problem=0.003, residual=0.14)
    need = seeds_needed(v, 523, 0.04, alpha=0.05 / 3)
    assert need is not None and need > 2
    assert detectable(v, need, 523, 0.05 / 3) <= 0.04 < detectable(v, need - 1, 523, 0.05 / 3)
    assert seeds_needed(Variances(0.0, 1.0, 0.0), 20, 0.01) is None  # the problems alone spread it wider


def test_the_committed_power_table_is_recomputed_from_s2s_archive_and_gives_back_s2s_mdes(tmp_path):
    out = tmp_path / "power.json"
    main([str(S2_SWEEP), "--out", str(out), "--seeds", "5", "10", "15", "17", "20", "30", "40"])
    fresh, committed = json.loads(out.read_text()), json.loads((S3 / "power.json").read_text())
    assert [r["seeds_for_target_holm"] for r in fresh["rows"]] == [
        r["seeds_for_target_holm"] for r in committed["rows"]
    ]
    assert fresh["table"] == committed["table"]
    s2 = json.loads((S2_SWEEP / "endpoints.json").read_text())["endpoints"]
    registered = {e["name"]: e["mde"] for e in s2 if e["primary"] and e["split"] == "main"}
    for row in fresh["rows"]:
        assert row["s2_detectable"] == pytest.approx(registered[row["name"]], abs=5e-4)

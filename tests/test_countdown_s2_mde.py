"""S2's minimum detectable effects: the exact power of the registered t test, and where the endpoints print them."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from test_countdown_s2_endpoints import finished

from agon_lightning.experiments.stats import t_quantile
from experiments.countdown.s2_endpoints import SECONDARY, main, minimum_detectable

ENDPOINTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "countdown" / "s2" / "sweep"


def simulated_power(effect: float, df: float, alpha: float, draws: int = 400_000) -> float:
    """The share of noncentral t draws (unit se) beyond the two-sided critical value."""
    rng = np.random.default_rng(0)
    t = (rng.standard_normal(draws) + effect) / np.sqrt(rng.chisquare(df, draws) / df)
    return float(np.mean(np.abs(t) > t_quantile(1 - alpha / 2, df)))


@pytest.mark.parametrize("df,alpha", [(1.0, 0.05), (4.06, 0.05), (4.06, 0.05 / 3), (15.4, 0.05)])
def test_the_effect_found_with_80_percent_power_is_found_80_percent_of_the_time(df, alpha):
    assert simulated_power(minimum_detectable(1.0, df, alpha), df, alpha) == pytest.approx(0.8, abs=0.005)


def test_it_scales_with_the_standard_error_and_meets_the_normal_formula_at_many_degrees_of_freedom():
    assert minimum_detectable(0.02, 4.0) == pytest.approx(2 * minimum_detectable(0.01, 4.0))
    assert minimum_detectable(1.0, 1e6) == pytest.approx(1.959964 + 0.841621, abs=1e-3)  # z_.975 + z_.8
    # the shortcut t_{1-α/2} + t_{0.8} falls short at few degrees of freedom
    assert minimum_detectable(1.0, 4.0, 0.05 / 3) > t_quantile(1 - 0.05 / 6, 4.0) + t_quantile(0.8, 4.0) + 0.1


@pytest.mark.parametrize(
    "se,df,alpha,power", [(0.0, 4, 0.05, 0.8), (0.02, 0.5, 0.05, 0.8), (0.02, 4, 1.0, 0.8)]
)
def test_a_value_out_of_range_is_named(se, df, alpha, power):
    with pytest.raises(ValueError, match=f"se={se}, df={df}, alpha={alpha}"):
        minimum_detectable(se, df, alpha, power)


def test_the_committed_primaries_detect_what_the_audit_found():
    """The audit of S2: 6.6–7.7 points at α = 0.05 and 9.0–10.3 at Holm's first step (α / 3)."""
    record = json.loads((ENDPOINTS / "endpoints.json").read_text())["endpoints"]
    primaries = [e for e in record if e["primary"] and e["split"] == "main"]
    for e in primaries:  # the se behind each interval, as its half-width says
        assert e["se"] == pytest.approx((e["high"] - e["low"]) / 2 / t_quantile(0.975, e["df"]), rel=1e-6)
    assert [round(100 * min(e[k] for e in primaries), 1) for k in ("mde", "mde_holm")] == [6.6, 9.0]
    assert [round(100 * max(e[k] for e in primaries), 1) for k in ("mde", "mde_holm")] == [7.7, 10.3]


def test_the_endpoints_print_each_mde_and_leave_secondaries_undecided(tmp_path):
    out = tmp_path / "sweep"
    for v in ("agon", "cooperative", "grpo"):
        for s in range(3):
            finished(out, v, s)
    finished(out, "moa_untrained", 0)
    main([str(out)])
    record = json.loads((out / "endpoints.json").read_text())["endpoints"]
    text = (out / "endpoints.md").read_text()
    for e in record:
        assert e["mde"] == pytest.approx(minimum_detectable(e["se"], e["df"]))
        if e["primary"] and e["split"] == "main":
            assert e["mde_holm"] == pytest.approx(minimum_detectable(e["se"], e["df"], 0.05 / 3))
            assert e["decision"] != SECONDARY and f"{e['mde']:.3f} ({e['mde_holm']:.3f})" in text
        else:
            assert e["decision"] == SECONDARY and e["mde_holm"] is None
    assert "MDE, 80% power (Holm)" in text

"""S3's diagnostics per row over training (part 2): windows of training metrics, held-out reads, the ablation."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from experiments.countdown.s3_diagnostics import ablation, main, row_curve, run_diagnostics, window_means


def test_a_training_metric_is_averaged_over_the_steps_since_the_previous_evaluation():
    by_step = {0: 0.1, 1: 0.2, 2: 0.4, 3: 0.6, 4: 1.0}
    assert window_means(by_step, [0, 2, 4]) == pytest.approx({0: 0.1, 2: 0.3, 4: 0.8})
    assert window_means({}, [0, 2]) == {}  # a row that does not log it (GRPO's conversions)
    assert window_means({5: 1.0}, [0, 4]) == {}  # nothing logged in either window


def write_run(run_dir: Path, rows: list[dict[str, float]]) -> Path:
    version = run_dir / "lightning_logs" / "version_0"
    version.mkdir(parents=True)
    columns = sorted({k for r in rows for k in r})
    with open(version / "metrics.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, columns)
        writer.writeheader()
        writer.writerows(rows)
    return run_dir


def agon_run(run_dir: Path, conversion: float) -> Path:
    rows = [{"step": 0, "val/deployed/pass@1": 0.70, "val/deployed/conversion_rate": 0.5,
             "val/alpha/pass@1": 0.5, "val/beta/pass@1": 0.52, "val/hard/deployed/conversion_rate": 0.07}]  # fmt: skip
    rows += [
        {"step": s, "train/conversion_rate": conversion, "train/frac_zero_std_groups": s / 10}
        for s in range(4)
    ]
    rows += [{"step": 4, "val/deployed/pass@1": 0.75, "val/deployed/conversion_rate": 0.4,
              "val/alpha/pass@1": 0.6, "val/beta/pass@1": 0.58}]  # fmt: skip
    return write_run(run_dir, rows)


def test_a_run_reads_its_training_windows_and_each_split_at_each_evaluation(tmp_path):
    d = run_diagnostics(agon_run(tmp_path / "agon" / "seed_0", 0.4), "deployed")
    assert sorted(d) == [0, 4]
    assert d[0]["zero-variance groups"] == pytest.approx(0.0)  # the first step's rollouts, from the start
    assert d[4]["zero-variance groups"] == pytest.approx(0.2)  # steps 1..3: 0.1, 0.2, 0.3
    assert d[0]["conversion, held out (hard)"] == pytest.approx(0.07)
    assert "conversion, held out (hard)" not in d[4]  # not logged there: left out, not zero
    assert (d[4]["alpha alone (main)"], d[4]["beta alone (main)"], d[4]["cascade (main)"]) == (
        0.6,
        0.58,
        0.75,
    )


def test_a_row_curve_averages_the_seeds_that_logged_each_value():
    curve = row_curve([{0: {"a": 0.2}, 4: {"a": 0.4}}, {0: {"a": 0.4}}])
    assert curve[0]["a"] == pytest.approx((0.3, 2)) and curve[4]["a"] == pytest.approx((0.4, 1))


def test_the_ablation_reads_each_measured_bundle_per_split(tmp_path):
    values = {"failed_drafts": 100, "failed_real": 0.5, "failed_other": 0.3, "failed_empty": 0.1,
              "real_minus_other": 0.2, "real_minus_empty": 0.4}  # fmt: skip
    (tmp_path / "ablation" / "agon").mkdir(parents=True)
    for seed, shift in ((0, 0.0), (1, 0.1)):
        by_split = {"main": {k: v + shift for k, v in values.items()}}
        (tmp_path / "ablation" / "agon" / f"seed_{seed}.json").write_text(
            json.dumps({"values": {"by_split": by_split}})
        )
    a = ablation(tmp_path, "agon")
    assert list(a) == ["main"]  # no hard split measured: none reported
    assert a["main"]["real − other"] == pytest.approx((0.25, 2))
    assert ablation(tmp_path, "grpo") == {}


def test_the_command_reads_the_archive_and_writes_its_tables(tmp_path, capsys):
    from agon_lightning.experiments.archive import archive_path, archive_run

    sweep = tmp_path / "sweep"
    for seed, conversion in ((0, 0.4), (1, 0.6)):
        run = agon_run(tmp_path / "runs" / f"seed_{seed}", conversion)
        (run / "sweep_done.json").write_text("{}")
        archive_run(run, archive_path(sweep, "agon", seed))
    main([str(sweep)])
    table = (sweep / "diagnostics.md").read_text()
    assert "## agon (deployed; seeds 0, 1)" in table and "No bundle measured yet" in table
    payload = json.loads((sweep / "diagnostics.json").read_text())
    assert payload["curves"]["agon"]["4"]["conversion, training"] == pytest.approx(0.5)
    assert payload["seeds"]["grpo"] == []

"""S3's plateau rule for the training length, registered before its pilot runs."""

from __future__ import annotations

import pytest

from experiments.countdown.s3_pilot import training_length

STEPS = range(0, 481, 40)


def test_a_curve_that_flattens_is_read_at_the_first_flat_step_near_its_top():
    curve = {s: 0.5 + 0.1 * min(s, 200) / 200 for s in STEPS}  # rises to step 200, flat after
    reading = training_length(curve)
    assert reading["T"] == 200 and not reading["capped"]


def test_no_t_before_120_even_when_the_curve_tops_out_early():
    curve = {s: 0.5 + (0.1 if s >= 40 else 0.0) for s in STEPS}
    assert training_length(curve)["T"] == 120


def test_a_curve_still_rising_at_the_cap_is_capped():
    curve = {s: 0.5 + 0.0003 * s for s in STEPS}  # +2.4 points every 80 steps, to the end
    reading = training_length(curve)
    assert reading["capped"] and reading["T"] == 480


def test_a_dip_then_a_rise_within_the_window_is_not_flat():
    curve = {s: 0.5 + 0.1 * min(s, 160) / 160 for s in STEPS}
    curve[240] = 0.63  # 3 points above 200's level, within 80 steps of 160 and of 200
    reading = training_length(curve)
    assert reading["T"] == 240 and not reading["capped"]


def test_no_room_is_flagged():
    curve = {s: 0.85 + 0.06 * min(s, 160) / 160 for s in STEPS}
    assert training_length(curve)["main_split"] == "no room (amendment)"


def test_the_command_reads_the_archived_seeds_their_curve_and_seconds_per_step(tmp_path, capsys):
    import csv
    import json

    from agon_lightning.experiments.archive import archive_path, archive_run
    from experiments.countdown.s3_pilot import main

    curve = {0: 0.50, 40: 0.55, 80: 0.60, 120: 0.70, 160: 0.70, 200: 0.71, 240: 0.71}
    for seed, seconds in ((1000, 2.0), (1001, 4.0)):
        run = tmp_path / "runs" / f"seed_{seed}"
        (run / "lightning_logs" / "version_0").mkdir(parents=True)
        rows = [
            {"step": s, "val/deployed/pass@1": p, "val/hard/deployed/pass@1": p / 4} for s, p in curve.items()
        ]
        rows += [{"step": s, "time/generate_s": seconds - 0.5, "time/update_s": 0.5} for s in range(240)]
        with open(run / "lightning_logs" / "version_0" / "metrics.csv", "w", newline="") as f:
            writer = csv.DictWriter(f, sorted({k for r in rows for k in r}))
            writer.writeheader()
            writer.writerows(rows)
        (run / "sweep_done.json").write_text("{}")
        archive_run(run, archive_path(tmp_path / "pilot", "grpo", seed))
    main([str(tmp_path / "pilot"), "--cap", "240"])
    record = json.loads((tmp_path / "pilot" / "pilot.json").read_text())
    assert (record["T"], record["capped"]) == (120, False)  # +0.20 of +0.21; +0.01 over the next 80
    assert record["seconds_per_step"] == pytest.approx(3.0)
    assert record["per_seed_seconds_per_step"] == pytest.approx([2.0, 4.0])
    assert "seconds per training step" in capsys.readouterr().out

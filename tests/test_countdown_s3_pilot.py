"""S3's plateau rule for the training length, registered before its pilot runs."""

from __future__ import annotations

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

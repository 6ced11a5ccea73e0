"""The rule that fixes S2's training length from the GRPO pilot's curve (part 1, section 5)."""

from __future__ import annotations

import pytest

from experiments.countdown.s2_pilot import training_length


def test_the_first_step_with_nine_tenths_of_the_largest_gain():
    r = training_length({0: 0.5, 20: 0.6, 40: 0.68, 60: 0.70, 80: 0.70, 100: 0.71, 120: 0.70}, cap=120)
    # largest gain +0.21 at step 100; 90% of it is 0.189, first reached at step 60 (+0.20)
    assert (r["T"], r["capped"], r["largest_gain_step"]) == (60, False, 100)
    assert r["largest_gain"] == pytest.approx(0.21) and r["main_split"] == "3 numbers"


def test_a_curve_still_rising_at_the_cap_trains_to_the_cap():
    r = training_length({0: 0.5, 20: 0.55, 40: 0.6, 60: 0.62, 80: 0.66, 100: 0.70, 120: 0.75}, cap=120)
    assert (r["T"], r["capped"]) == (120, True)
    flat_end = training_length({0: 0.5, 60: 0.70, 100: 0.74, 120: 0.75}, cap=120)  # +1 point: stopped
    assert (flat_end["T"], flat_end["capped"]) == (100, False)


def test_no_room_moves_the_main_split_to_four_numbers():
    r = training_length({0: 0.6, 20: 0.93, 40: 0.95}, cap=40)
    assert r["T"] == 20 and r["main_split"] == "4 numbers"
    assert training_length({0: 0.5, 20: 0.45}, cap=20)["T"] == 20  # no gain at all: the whole pilot

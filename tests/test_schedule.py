import pytest

from agon_lightning.games.schedule import adapters_for, roles_for_step


def test_rotate_alternates_every_step():
    assert [roles_for_step(s, "rotate") for s in range(4)] == [
        ("alpha", "beta"), ("beta", "alpha"), ("alpha", "beta"), ("beta", "alpha"),
    ]  # fmt: skip


def test_fixed_keeps_alpha_drafting():
    assert {roles_for_step(s, "fixed") for s in range(5)} == {("alpha", "beta")}


def test_self_play_uses_one_adapter():
    assert roles_for_step(3, "self_play") == ("alpha", "alpha")
    assert adapters_for("self_play", "agon") == ("alpha",)
    assert adapters_for("rotate", "grpo") == ("alpha",)
    assert adapters_for("rotate", "agon") == ("alpha", "beta")


def test_bad_schedule_and_step_are_named():
    with pytest.raises(ValueError, match="'sometimes'"):
        roles_for_step(0, "sometimes")
    with pytest.raises(ValueError, match="-1"):
        roles_for_step(-1)

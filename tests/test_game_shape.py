"""The planner and the server command count a config's game: its adapters and roles, whatever the game."""

from __future__ import annotations

import pytest

from agon_lightning.infra.errors import UsageError
from agon_lightning.infra.game_shape import game_shape
from agon_lightning.infra.plan import run_of
from agon_lightning.rollout.server_command import server_command

PANEL = {"class_path": "engine_games.PanelGame"}


def test_the_built_in_names_and_a_class_path_are_counted():
    assert game_shape({}) == (2, 2) and game_shape({"game": "agon", "schedule": "self_play"}) == (1, 2)
    assert game_shape({"game": "grpo"}) == (1, 1)
    assert game_shape({"game": PANEL}) == (3, 3)
    assert game_shape(
        {"game": {"class_path": "agon_lightning.games.agon.AgonGame", "init_args": {"schedule": "fixed"}}}
    ) == (2, 2)


def test_a_game_that_cannot_be_built_is_named():
    with pytest.raises(UsageError, match="model.game='nowhere.Game' could not be built"):
        game_shape({"game": {"class_path": "nowhere.Game"}})


def test_a_three_adapter_game_plans_three_adapters_and_three_roles_in_a_backward():
    agon = run_of({"model": {}}, devices=1, prompt_tokens=64)
    panel = run_of({"model": {"game": PANEL}}, devices=1, prompt_tokens=64)
    assert (agon.adapters, agon.roles) == (2, 2) and (panel.adapters, panel.roles) == (3, 3)


def test_the_server_holds_every_adapter_twice_and_the_league_slots():
    def loras(model):
        _, argv = server_command({"model": model}, device="cpu")
        return int(argv[argv.index("--max-loras") + 1])

    assert loras({}) == 4 and loras({"game": "grpo"}) == 2
    assert loras({"game": PANEL}) == 6 and loras({"game": PANEL, "league": {"probability": 0.5}}) == 12

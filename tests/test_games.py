"""The game as a component: the built-ins by name and by class, a user's game by class path or entry point."""

from __future__ import annotations

import pytest

from agon_lightning.cli.registry import GROUPS, load_plugins
from agon_lightning.game.names import ALPHA, BETA
from agon_lightning.games import AgonGame, Game, GameSpec, GRPOGame, as_game
from agon_lightning.training.module import AgonModule


def test_the_names_are_the_built_in_games_with_the_modules_settings():
    game = as_game("agon", "fixed", "shared")
    assert isinstance(game, AgonGame) and (game.schedule, game.pairing) == ("fixed", "shared")
    cast = {"drafter": ALPHA, "challenger": BETA}
    assert game.adapters == (ALPHA, BETA) and [game.cast(s) for s in (0, 1)] == [cast] * 2
    assert AgonGame().cast(1) == {"drafter": BETA, "challenger": ALPHA} and AgonGame(
        "self_play"
    ).adapters == (ALPHA,)
    assert isinstance(as_game("grpo", "rotate", "per_rollout"), GRPOGame) and GRPOGame().adapters == (ALPHA,)
    module = AgonModule(game=AgonGame(schedule="self_play"))
    assert module.adapter_names == (ALPHA,) and module.evaluator.deployed_key == "cascade_aa"
    assert AgonModule(game="grpo").evaluator.deployed_key == ALPHA


def test_bad_games_name_the_value():
    with pytest.raises(ValueError, match="game must be 'agon', 'grpo' or a Game, got 'chess'"):
        AgonModule(game="chess")
    with pytest.raises(ValueError, match="schedule must be one of .* got 'random'"):
        AgonGame(schedule="random")
    with pytest.raises(ValueError, match="pairing='shared' pairs challenges with drafts, but game='grpo'"):
        AgonModule(game="grpo", pairing="shared")
    with pytest.raises(
        ValueError, match="settings of the game; with model.game=AgonGame, set them on the game"
    ):
        AgonModule(game=AgonGame(), schedule="fixed")


def test_the_built_in_games_register_by_entry_point():
    found = load_plugins()["agon_lightning.games"]
    assert GROUPS["agon_lightning.games"] is Game
    assert found["agon"] is AgonGame and found["grpo"] is GRPOGame


def test_a_game_of_ones_own_is_played_by_the_module(tiny_model_dir):
    import torch

    from agon_lightning.adapters.policy import LoraOptions
    from agon_lightning.data.reasoning_gym import ReasoningGymDataModule
    from agon_lightning.games import draft_stage
    from agon_lightning.rollout.hf import HFRollout
    from agon_lightning.training.module import GRPOOptions

    class EchoGame(Game):
        """beta drafts every step, paid for short drafts: nothing Agon does."""

        spec = GameSpec(policies=(BETA,), roles=("drafter",), first_stage="drafter")

        def play(self, player, problems):
            record, _ = draft_stage(player, problems, BETA)
            record.draft.rewards = -record.draft.rollouts.lengths.float()
            return record

    module = AgonModule(
        model_name_or_path=str(tiny_model_dir), game=EchoGame(), lora=LoraOptions(r=2, target_modules=["q_proj"]),
        grpo=GRPOOptions(num_generations=2), rollout=HFRollout(max_new_tokens=6), validate_at_start=False,
    )  # fmt: skip
    module.configure_model()
    assert module.adapter_names == (BETA,) and module.evaluator.deployed_key == BETA
    problems = ReasoningGymDataModule(train_size=4, val_size=1, batch_size=2).train_problems[:2]
    record = module.play(problems)
    assert record.draft.adapter == BETA and record.challenge is None
    torch.testing.assert_close(record.draft.rewards, -record.draft.rollouts.lengths.float())


def test_a_game_still_declaring_kind_is_told_what_replaced_it():
    with pytest.raises(TypeError, match="OldGame.kind is gone: a game declares a GameSpec"):

        class OldGame(Game):
            kind = "grpo"


def test_a_spec_refuses_names_it_cannot_use():
    with pytest.raises(ValueError, match="GameSpec.policies repeats a name"):
        GameSpec(policies=("a", "a"), roles=("r",))
    with pytest.raises(ValueError, match="'alpha_ref' ends like a snapshot slot"):
        GameSpec(policies=("alpha_ref",), roles=("r",))
    with pytest.raises(ValueError, match="GameSpec.first_stage: 'drafter' is not one of the roles"):
        GameSpec(policies=("a",), roles=("r",), first_stage="drafter")
    with pytest.raises(ValueError, match="'base' is not a usable name"):
        GameSpec(policies=("base",), roles=("r",))

"""``from_config``: a shipped config as objects, with a script's dataset and reward functions in place.

The full script (two steps of training) runs on the home page (tests/test_docs.py); here, what it
builds and the errors a script can make, without training.
"""

from __future__ import annotations

import pytest

from agon_lightning import from_config
from agon_lightning.callbacks import STANDARD
from agon_lightning.game.rewards import GradedReward
from agon_lightning.games import GRPOGame
from agon_lightning.infra.errors import UsageError
from agon_lightning.verifiers.exact import ExactMatchVerifier
from agon_lightning.verifiers.reward_function import RewardFunctionVerifier


def accuracy(completions, solution, **kwargs):
    return [float(s in c[0]["content"]) for c, s in zip(completions, solution)]


def brevity(completions, **kwargs):
    return [-len(c[0]["content"]) / 100 for c in completions]


@pytest.fixture
def dataset():
    datasets = pytest.importorskip("datasets")
    rows = [
        {"prompt": [{"role": "user", "content": f"{a} + {b} ="}], "solution": str(a + b)}
        for a in range(6)
        for b in range(6)
    ]
    return datasets.Dataset.from_list(rows).train_test_split(test_size=6, seed=0)


def test_the_config_is_built_with_the_scripts_data_and_reward_functions(dataset, tmp_path):
    model, data, trainer = from_config(
        "agon:agon.yaml", f"--trainer.default_root_dir={tmp_path}", "--trainer.max_steps=2",
        train_dataset=dataset, reward_funcs=[accuracy, brevity], reward_weights=[1.0, 0.1],
    )  # fmt: skip
    assert isinstance(model.verifier, RewardFunctionVerifier) and isinstance(model.reward, GradedReward)
    assert (model.reward.conversion_bonus, model.reward.form) == (1.0, "bonus")  # the config's λ and form
    assert model.verifier.names == ["accuracy", "brevity"] and model.verifier.reward_weights == [1.0, 0.1]
    assert type(data).__name__ == "DatasetDataModule" and data.batch_size == 16  # the config's batch size
    assert len(data.train_problems) == 30 and len(data.val_problems) == 6  # the test split is held out
    assert data.train_problems[0].messages[0]["role"] == "user"
    assert trainer.max_steps == 2
    kinds = {type(cb) for cb in trainer.callbacks}
    assert all(any(issubclass(k, cls) for k in kinds) for cls in STANDARD)  # the same run agon fit builds


def test_the_configs_competitive_settings_carry_over_to_the_graded_reward(dataset, tmp_path):
    model, _, _ = from_config(
        "agon:agon.yaml", "--model.reward.init_args.conversion_bonus=0.25", "--model.reward.init_args.form=margin",
        f"--trainer.default_root_dir={tmp_path}", train_dataset=dataset, reward_funcs=[accuracy],
    )  # fmt: skip
    assert (model.reward.conversion_bonus, model.reward.form) == (0.25, "margin")


def test_any_module_option_takes_an_object_or_a_value(tmp_path):
    verifier = ExactMatchVerifier()
    model, _, _ = from_config(
        "agon:agon.yaml", f"--trainer.default_root_dir={tmp_path}", verifier=verifier, game="grpo"
    )
    assert model.verifier is verifier and isinstance(model.game, GRPOGame)  # the name, as its game


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"verifer": ExactMatchVerifier()}, "'verifer' is no AgonModule option"),
        ({"reward_weights": [1.0]}, "reward_weights without reward_funcs"),
        ({"reward_funcs": [accuracy], "verifier": ExactMatchVerifier()}, "drop verifier or reward_funcs"),
        ({"eval_dataset": object()}, "eval_dataset without train_dataset"),
        ({"data": object()}, "data must be a ProblemDataModule"),
    ],
)
def test_a_scripts_mistake_is_one_message_naming_it(kwargs, message):
    with pytest.raises(UsageError, match=message):
        from_config("agon:agon.yaml", **kwargs)

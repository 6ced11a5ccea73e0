"""Every import path and class path from before the job folders still loads, as the same object.

Configs, bundles' ``agon.json``, checkpoints and plugins name classes by the paths they had when
they were written; each old module path must give the module now at its new path, and each old
class path must resolve — by import, through jsonargparse, and through a bundle's component
loader — to the very class the new path names.
"""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path

import pytest
from jsonargparse import ArgumentParser

from agon_lightning.deploy.bundle import build_component
from agon_lightning.moved import MOVED

# every class path the shipped configs, bundles and docs used before the move
OLD_CLASS_PATHS = {
    "agon_lightning.rollout.HFRollout": "agon_lightning.rollout.hf.HFRollout",
    "agon_lightning.vllm_rollout.VLLMRollout": "agon_lightning.rollout.vllm.VLLMRollout",
    "agon_lightning.cascade.Cascade": "agon_lightning.deploy.cascade.Cascade",
    "agon_lightning.predict.JsonlPredictionWriter": "agon_lightning.deploy.predict.JsonlPredictionWriter",
    "agon_lightning.module.AgonModule": "agon_lightning.training.module.AgonModule",
    "agon_lightning.module.GRPOOptions": "agon_lightning.training.module.GRPOOptions",
    "agon_lightning.policy.LoraOptions": "agon_lightning.adapters.policy.LoraOptions",
    "agon_lightning.lr_schedule.WarmupLinearDecay": "agon_lightning.training.lr_schedule.WarmupLinearDecay",
    "agon_lightning.sft.StopAtThreshold": "agon_lightning.training.sft.StopAtThreshold",
    "agon_lightning.game_cli.AgonCLI": "agon_lightning.cli.game.AgonCLI",
    "agon_lightning.cli.AgonCLI": "agon_lightning.cli.game.AgonCLI",
}
# what the old ``agon_lightning.rollout`` module defined, now in the package's backends
OLD_ROLLOUT_NAMES = [
    "Rollout",
    "RolloutBatch",
    "HFRollout",
    "stop_token_ids",
    "completion_mask",
    "encode_prompts",
]

# names that modules defined before they moved to another module: old dotted name → new one
OLD_NAMES = {
    "agon_lightning.adapters.fast_lora.merged_for_sampling": "agon_lightning.rollout.merged.merged_for_sampling",
    "agon_lightning.fast_lora.merged_for_sampling": "agon_lightning.rollout.merged.merged_for_sampling",
    "agon_lightning.rollout.hf.Rollout": "agon_lightning.rollout.base.Rollout",
    "agon_lightning.rollout.hf.RolloutBatch": "agon_lightning.rollout.base.RolloutBatch",
    "agon_lightning.rollout.hf.stop_token_ids": "agon_lightning.rollout.base.stop_token_ids",
    "agon_lightning.rollout.hf.completion_mask": "agon_lightning.rollout.base.completion_mask",
    "agon_lightning.rollout.hf.encode_prompts": "agon_lightning.rollout.base.encode_prompts",
    "agon_lightning.sampling.LogprobRecorder": "agon_lightning.rollout.sampling.LogprobRecorder",
    "agon_lightning.sampling.is_sharded": "agon_lightning.rollout.sampling.is_sharded",
    "agon_lightning.Rollout": "agon_lightning.rollout.base.Rollout",
    "agon_lightning.cli.COMMANDS": "agon_lightning.cli.commands.COMMANDS",
    "agon_lightning.cli.LIGHTNING_MAIN": "agon_lightning.cli.commands.LIGHTNING_MAIN",
    "agon_lightning.config_files.PREFIX": "agon_lightning.game.names.SHIPPED",
}


def load(path: str) -> object:
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


@pytest.mark.parametrize("old", sorted(MOVED))
def test_each_old_module_path_is_the_module_at_its_new_path(old):
    new = importlib.import_module(MOVED[old])
    assert importlib.import_module(old) is new
    assert new.__name__ == MOVED[old]
    parent, _, child = old.rpartition(".")
    assert getattr(importlib.import_module(parent), child) is new  # ``from agon_lightning import cascade``


@pytest.mark.parametrize("name", OLD_ROLLOUT_NAMES)
def test_the_old_rollout_module_names_resolve_from_the_rollout_package(name):
    import agon_lightning.rollout as package
    import agon_lightning.rollout.hf as hf

    assert getattr(package, name) is getattr(hf, name)
    assert name in hf.__all__  # ``from agon_lightning.rollout.hf import *`` still gives it


def test_an_unknown_name_of_the_rollout_package_is_an_attribute_error_naming_it():
    import agon_lightning.rollout as package

    with pytest.raises(AttributeError, match="'Nope'"):
        package.Nope  # noqa: B018


@pytest.mark.parametrize("old", sorted(OLD_NAMES))
def test_each_name_that_moved_to_another_module_loads_from_its_old_one(old):
    assert load(old) is load(OLD_NAMES[old])


def test_an_unknown_name_of_fast_lora_is_an_attribute_error_naming_it():
    from agon_lightning.adapters import fast_lora

    with pytest.raises(AttributeError, match="'merged_for_nothing'"):
        fast_lora.merged_for_nothing  # noqa: B018


@pytest.mark.parametrize("old", sorted(OLD_CLASS_PATHS))
def test_each_old_class_path_resolves_to_the_class_at_its_new_path(old):
    assert load(old) is load(OLD_CLASS_PATHS[old])


@pytest.mark.parametrize(
    "old",
    [
        "agon_lightning.rollout.HFRollout",
        pytest.param("agon_lightning.vllm_rollout.VLLMRollout", marks=pytest.mark.vllm),  # builds an engine
    ],
)
def test_an_old_rollout_class_path_in_a_config_instantiates_the_new_class(old):
    from agon_lightning.rollout import Rollout

    parser = ArgumentParser(exit_on_error=False)
    parser.add_argument("--rollout", type=Rollout)
    cfg = parser.parse_args([f"--rollout={{'class_path': '{old}', 'init_args': {{'max_new_tokens': 5}}}}"])
    rollout = parser.instantiate(cfg).rollout
    assert type(rollout) is load(OLD_CLASS_PATHS[old])
    assert rollout.max_new_tokens == 5


def test_an_old_class_path_in_a_bundles_agon_json_builds_the_component():
    rollout = build_component(
        {"class_path": "agon_lightning.rollout.HFRollout", "init_args": {"max_new_tokens": 7}}
    )
    assert type(rollout) is load("agon_lightning.rollout.hf.HFRollout")
    assert rollout.max_new_tokens == 7


def test_no_file_is_left_at_an_old_path():
    import agon_lightning

    root = Path(agon_lightning.__file__).parent
    for old, new in MOVED.items():
        assert importlib.util.find_spec(new) is not None, new
        assert not (root / f"{old.rsplit('.', 1)[1]}.py").exists(), old

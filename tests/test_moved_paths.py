"""Every import path and class path from before the job folders still loads, as the same object,
with a dated deprecation; nothing of ours uses one.

Configs, bundles' ``agon.json``, checkpoints and plugins name classes by the paths they had when
they were written; each old module path must give the module now at its new path, and each old
class path must resolve — by import, through jsonargparse, and through a bundle's component
loader — to the very class the new path names. The first use of an old path or name warns once,
naming the new one and the date after which the old one goes (``moved.REMOVED_AFTER``); after
that date this test fails until ``moved.py`` is removed.
"""

from __future__ import annotations

import datetime
import importlib
import importlib.util
import re
import sys
import warnings
from pathlib import Path

import pytest
from jsonargparse import ArgumentParser

from agon_lightning import moved
from agon_lightning.deploy.bundle import build_component
from agon_lightning.moved import MOVED, MOVED_NAMES, REMOVED_AFTER

# The old paths are used here on purpose: their warning is tested below, once.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")
REPO = Path(__file__).resolve().parents[1]

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
    "agon_lightning.training.sft_data.build_examples": "agon_lightning.testbeds.chain_sum.sft.build_examples",
    "agon_lightning.sft_data.DEFAULT_RIVAL_MIX": "agon_lightning.testbeds.chain_sum.sft.DEFAULT_RIVAL_MIX",
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


@pytest.fixture
def fresh(monkeypatch):
    """No old path or name has warned yet in this process; ``fresh(old)`` forgets an imported old module."""
    monkeypatch.setattr(moved, "_WARNED", set())
    return lambda old: monkeypatch.delitem(sys.modules, old, raising=False)


@pytest.mark.filterwarnings("default::DeprecationWarning")
@pytest.mark.parametrize(
    "old", ["agon_lightning.cascade", "agon_lightning.game_cli", "agon_lightning.countdown"]
)
def test_an_old_module_path_warns_once_naming_the_new_path_and_the_date(old, fresh):
    fresh(old)
    with pytest.warns(DeprecationWarning) as caught:
        assert importlib.import_module(old) is importlib.import_module(MOVED[old])
    (warning,) = [w for w in caught if w.category is DeprecationWarning]
    assert f"{old} has moved to {MOVED[old]}" in str(warning.message) and REMOVED_AFTER in str(
        warning.message
    )
    assert warning.filename == __file__  # it points at the import, not into the import machinery
    fresh(old)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        importlib.import_module(old)  # once per process: the second import is quiet


@pytest.mark.filterwarnings("default::DeprecationWarning")
def test_an_old_name_warns_once_naming_its_new_module(fresh):
    from agon_lightning.adapters import fast_lora
    from agon_lightning.rollout.merged import merged_for_sampling

    with pytest.warns(DeprecationWarning, match=re.escape(
        "agon_lightning.adapters.fast_lora.merged_for_sampling has moved to "
        f"agon_lightning.rollout.merged.merged_for_sampling; the old path stops working after {REMOVED_AFTER}"
    )):  # fmt: skip
        assert fast_lora.merged_for_sampling is merged_for_sampling
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        assert fast_lora.merged_for_sampling is merged_for_sampling


def test_every_moved_name_is_listed_where_its_old_module_answers_it():
    for module, names in MOVED_NAMES.items():
        for name, source in names.items():
            assert load(f"{module}.{name}") is load(f"{source}.{name}")


def test_the_old_paths_are_removed_after_their_date():
    assert datetime.date.today() <= datetime.date.fromisoformat(REMOVED_AFTER), (
        f"the old paths were kept until {REMOVED_AFTER}: remove agon_lightning/moved.py, its install() "
        "in agon_lightning/__init__.py, the moved_names hooks and this file"
    )


# Files that use old paths on purpose: this test, and the benchmark that runs its worker on older
# revisions (bench_sampler_precision --against), whose imports must work at those revisions too.
OLD_ON_PURPOSE = {"tests/test_moved_paths.py", "benchmarks/bench_sampler_precision.py"}


def test_nothing_of_ours_imports_or_names_an_old_path():
    from agon_lightning.cli.registry import GROUPS

    old = re.compile(
        r"\b(" + "|".join(re.escape(m) for m in sorted(MOVED, key=len, reverse=True)) + r")(\.\w+)?\b"
    )
    files = [
        *REPO.glob("agon_lightning/**/*.py"), *REPO.glob("callbacks/**/*.py"), *REPO.glob("tests/**/*.py"),
        *REPO.glob("benchmarks/**/*.py"), *REPO.glob("experiments/**/*.py"), *REPO.glob("scripts/**/*.py"),
        *REPO.glob("docs/**/*.py"), *REPO.glob("configs/**/*.yaml"), *REPO.glob("agon_lightning/assets/**/*.json"),
    ]  # fmt: skip
    found = [
        f"{path.relative_to(REPO)}: {match[0]}"
        for path in files
        if path.relative_to(REPO).as_posix() not in OLD_ON_PURPOSE and path.name != "moved.py"
        for match in old.finditer(path.read_text())
        if not (match[1] in GROUPS and match[2] is None)  # an entry-point group keeps its name
    ]
    assert found == []

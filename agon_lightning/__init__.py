"""agon-lightning: games of LoRA policies on one base (Agon's drafter and challenger first) on PyTorch Lightning.

The public API, importable from the package itself::

    from agon_lightning import AgonModule, Cascade, Problem, Verifier, Summarizer, Reward, Rollout

Every name is imported on first use (PEP 562 ``__getattr__``), so ``import agon_lightning.game.text``
or ``agon --help`` do not load torch and Lightning. The names stay where they are when modules
move: code that imports them from here keeps working.
"""

from __future__ import annotations

from agon_lightning import moved
from agon_lightning.infra.lazy import lazy_names

# the old module paths (moved.MOVED) load the moved modules, with a DeprecationWarning, until
# moved.REMOVED_AFTER
moved.install()

# public name → the module that defines it. The built-in components (ExactMatchVerifier,
# HFRollout, ...) stay in their modules: LightningCLI prints a class chosen by its bare name
# (``--model.verifier=ExactMatchVerifier``) under the shortest path that imports it, and their
# full paths are what configs, bundles and docs say.
_EXPORTS: dict[str, str] = {
    # the game and the deployed pair
    "AgonModule": "agon_lightning.training.module",
    "GRPOOptions": "agon_lightning.training.module",
    "LoraOptions": "agon_lightning.adapters.policy",
    "Prompts": "agon_lightning.game.prompts",
    "Cascade": "agon_lightning.deploy.cascade",
    "from_config": "agon_lightning.cli.build",
    "CascadeResult": "agon_lightning.rollout.pipeline",
    "CascadeSample": "agon_lightning.rollout.pipeline",
    # the contract of a game of several policies, and the feature plug-in
    "Game": "agon_lightning.games.base",
    "GameSpec": "agon_lightning.games.spec",
    "Player": "agon_lightning.games.player",
    "RoleRollout": "agon_lightning.games.records",
    "StepRecord": "agon_lightning.games.records",
    "Feature": "agon_lightning.training.features.base",
    # the data that flows between components
    "Problem": "agon_lightning.game.types",
    "Verdict": "agon_lightning.game.types",
    # the component interfaces
    "Verifier": "agon_lightning.verifiers.base",
    "Summarizer": "agon_lightning.summarizers.base",
    "Reward": "agon_lightning.game.rewards",
    "RoleRewards": "agon_lightning.game.rewards",
    "Rollout": "agon_lightning.rollout.base",
    "RolloutBatch": "agon_lightning.rollout.base",
    # data modules
    "ProblemDataModule": "agon_lightning.data.base",
    "ReasoningGymDataModule": "agon_lightning.data.reasoning_gym",
    "FileProblemDataModule": "agon_lightning.data.files",
    "DatasetDataModule": "agon_lightning.data.dataset",
    "DeepMathDataModule": "agon_lightning.data.deepmath",
    "CodeContestsDataModule": "agon_lightning.data.codecontests",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_names(__name__, _EXPORTS)

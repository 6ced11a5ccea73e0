"""The import paths of modules that moved into the job folders keep working.

Configs, bundles (``agon.json``), checkpoints and plugins written before the package was
laid out by job name classes by their old paths (``agon_lightning.cascade.Cascade``,
``agon_lightning.vllm_rollout.VLLMRollout``). A finder on ``sys.meta_path`` answers each old
module name in :data:`MOVED` with the module at its new path — the same module object, so
its classes are the same classes, and patching one path patches the other. There is no file
at an old path (the move stays a move in the history); the table below is the whole alias.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

# old module → where it lives now
MOVED: dict[str, str] = {
    "agon_lightning.decode": "agon_lightning.rollout.decode_loop",
    "agon_lightning.vllm_rollout": "agon_lightning.rollout.vllm",
    "agon_lightning.sampling": "agon_lightning.rollout.sampling",
    "agon_lightning.fast_lora": "agon_lightning.adapters.fast_lora",
    "agon_lightning.policy": "agon_lightning.adapters.policy",
    "agon_lightning.shared_prompt": "agon_lightning.adapters.shared_prompt",
    "agon_lightning.bundle": "agon_lightning.deploy.bundle",
    "agon_lightning.cascade": "agon_lightning.deploy.cascade",
    "agon_lightning.predict": "agon_lightning.deploy.predict",
    "agon_lightning.export": "agon_lightning.deploy.export",
    "agon_lightning.serve": "agon_lightning.deploy.serve",
    "agon_lightning.serve_api": "agon_lightning.deploy.serve_api",
    "agon_lightning.serve_engine": "agon_lightning.deploy.serve_engine",
    "agon_lightning.serve_queue": "agon_lightning.deploy.serve_queue",
    "agon_lightning.serve_responses": "agon_lightning.deploy.serve_responses",
    "agon_lightning.serve_stream": "agon_lightning.deploy.serve_stream",
    "agon_lightning.module": "agon_lightning.training.module",
    "agon_lightning.grpo": "agon_lightning.training.grpo",
    "agon_lightning.schedule": "agon_lightning.training.schedule",
    "agon_lightning.lr_schedule": "agon_lightning.training.lr_schedule",
    "agon_lightning.validation": "agon_lightning.training.validation",
    "agon_lightning.sft": "agon_lightning.training.sft",
    "agon_lightning.sft_data": "agon_lightning.training.sft_data",
    "agon_lightning.cli_base": "agon_lightning.cli.base",
    "agon_lightning.game_cli": "agon_lightning.cli.game",
    "agon_lightning.config_files": "agon_lightning.cli.config_files",
    "agon_lightning.sweep": "agon_lightning.experiments.sweep",
    "agon_lightning.sweep_report": "agon_lightning.experiments.sweep_report",
    "agon_lightning.paper_table": "agon_lightning.experiments.paper_table",
    "agon_lightning.stats": "agon_lightning.experiments.stats",
    "agon_lightning.plots": "agon_lightning.experiments.plots",
    # the Countdown testbed, gathered into its folder
    "agon_lightning.countdown": "agon_lightning.testbeds.countdown.task",
    "agon_lightning.summarizers.countdown": "agon_lightning.testbeds.countdown.summarizer",
    "agon_lightning.training.sft_countdown": "agon_lightning.testbeds.countdown.sft",
    # the root's loose modules, grouped: the game's pieces, the infrastructure, their job folders
    **{
        f"agon_lightning.{m}": f"agon_lightning.game.{m}"
        for m in ("types", "text", "formats", "prompts", "rewards", "names")
    },
    **{
        f"agon_lightning.{m}": f"agon_lightning.infra.{m}"
        for m in (
            "allocator",
            "errors",
            "logprobs",
            "model_source",
            "plan",
            "shapes",
            "shipped_configs",
            "tiny",
            "workers",
        )
    },
    "agon_lightning.report": "agon_lightning.experiments.report",
    "agon_lightning.pipeline": "agon_lightning.rollout.pipeline",
    "agon_lightning.registry": "agon_lightning.cli.registry",
    # the chain_sum testbed, gathered into its folder
    "agon_lightning.traces": "agon_lightning.testbeds.chain_sum.traces",
}
# ``agon_lightning.rollout`` became the package of the backends: its ``__init__`` re-exports
# what the old module defined (``agon_lightning.rollout.HFRollout`` still resolves). Likewise
# ``agon_lightning.cli`` became the package of the CLI: its ``__init__`` is the old module's
# ``agon`` command (``agon_lightning.cli:main``, ``COMMANDS``, ``AgonCLI``) and the table's one
# name that moved out of it, ``LIGHTNING_MAIN``, is imported back.


class MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old module name of :data:`MOVED` and loads it as the module at its new path."""

    def find_spec(
        self, fullname: str, path: Any = None, target: Any = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return importlib.import_module(MOVED[spec.name])

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run: the module at the new path is already imported."""


def install() -> None:
    """Put the finder on ``sys.meta_path`` (once); the regular finders still come first."""
    if not any(isinstance(finder, MovedModules) for finder in sys.meta_path):
        sys.meta_path.append(MovedModules())


def lazy_names(module: str, where: dict[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``module`` (PEP 562): each name of ``where`` (name → the
    module that defines it) is imported from there on first use and kept in ``module``.

    For a package's public names and for names a module defined before they moved to another:
    ``from module import name`` gives the object at its new place, and importing ``module`` loads
    nothing more.
    """
    namespace = sys.modules[module].__dict__

    def __getattr__(name: str) -> Any:
        source = where.get(name)
        if source is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(source), name)
        namespace[name] = value  # later look-ups skip this function
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(where))

    return __getattr__, __dir__

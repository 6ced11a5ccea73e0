"""The import paths of modules and names that moved, kept working until :data:`REMOVED_AFTER`.

Configs, bundles (``agon.json``), checkpoints and plugins written before the package was
laid out by job name classes by their old paths (``agon_lightning.cascade.Cascade``,
``agon_lightning.vllm_rollout.VLLMRollout``). A finder on ``sys.meta_path`` answers each old
module name in :data:`MOVED` with the module at its new path — the same module object, so
its classes are the same classes, and patching one path patches the other. There is no file
at an old path (the move stays a move in the history); the table below is the whole alias.
A name a module defined before it moved to another module is answered by that module's
``__getattr__`` (:func:`moved_names`, :data:`MOVED_NAMES`).

Each old path and name warns the first time it is used (a ``DeprecationWarning`` naming the new
one and the date), and stops working after :data:`REMOVED_AFTER`: this module goes then, with its
``install()`` in the package's ``__init__`` and the ``moved_names`` hooks. Nothing of the package,
its configs, tests or docs uses an old path (``tests/test_moved_paths.py`` holds it to that).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from collections.abc import Callable
from types import ModuleType
from typing import Any

#: The last day the old paths and names work; the next release after it removes them.
REMOVED_AFTER = "2027-06-01"

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
    "agon_lightning.schedule": "agon_lightning.games.schedule",
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
    # before the games had a floor of their own (the engine: contracts, features as plug-ins)
    "agon_lightning.training.games": "agon_lightning.games",
    "agon_lightning.training.records": "agon_lightning.games.records",
    "agon_lightning.training.schedule": "agon_lightning.games.schedule",
    "agon_lightning.training.league": "agon_lightning.training.features.league",
    "agon_lightning.training.anchor": "agon_lightning.training.features.kl",
}
# ``agon_lightning.rollout`` became the package of the backends: its ``__init__`` re-exports
# what the old module defined (``agon_lightning.rollout.HFRollout`` still resolves). Likewise
# ``agon_lightning.cli`` became the package of the CLI: its ``__init__`` is the old module's
# ``agon`` command (``agon_lightning.cli:main``, ``COMMANDS``, ``AgonCLI``) and the table's one
# name that moved out of it, ``LIGHTNING_MAIN``, is imported back.

# names a module defined before they moved to another module: module → {name: the module that defines it now}
MOVED_NAMES: dict[str, dict[str, str]] = {
    # before sampling had a package of its own
    "agon_lightning.adapters.fast_lora": {"merged_for_sampling": "agon_lightning.rollout.merged"},
    # before the arithmetic examples moved to their testbed's folder
    "agon_lightning.training.sft_data": dict.fromkeys(
        ("DEFAULT_RIVAL_MIX", "rival_draft", "build_examples", "eval_examples"),
        "agon_lightning.testbeds.chain_sum.sft",
    ),
}
_WARNED: set[str] = set()  # the old paths and names that have warned in this process


def warn_moved(old: str, new: str) -> None:
    """A ``DeprecationWarning`` that ``old`` is now ``new`` (once per process and old path),
    pointing at the first caller outside this module and the import machinery."""
    if old in _WARNED:
        return
    _WARNED.add(old)
    message = f"{old} has moved to {new}; the old path stops working after {REMOVED_AFTER}: use {new}"
    warnings.warn(message, DeprecationWarning, stacklevel=_caller_level())


def _caller_level() -> int:
    """The ``stacklevel`` (for :func:`warn_moved`) of the first frame outside this module and importlib.

    ``warnings`` itself steps over the import system's frozen ``_bootstrap`` frames: only the others count.
    """
    frame, level = sys._getframe(2), 2
    while frame is not None and (
        frame.f_code.co_filename == __file__ or frame.f_globals.get("__name__", "").startswith("importlib")
    ):
        frame = frame.f_back
        if frame is not None and not (
            "importlib" in frame.f_code.co_filename and "_bootstrap" in frame.f_code.co_filename
        ):
            level += 1
    return level


class MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old module name of :data:`MOVED` and loads it as the module at its new path."""

    def find_spec(
        self, fullname: str, path: Any = None, target: Any = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MOVED:
            return None
        warn_moved(fullname, MOVED[fullname])
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return importlib.import_module(MOVED[spec.name])

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run: the module at the new path is already imported."""


def install() -> None:
    """Put the finder on ``sys.meta_path`` (once); the regular finders still come first."""
    if not any(isinstance(finder, MovedModules) for finder in sys.meta_path):
        sys.meta_path.append(MovedModules())


def moved_names(module: str) -> Callable[[str], Any]:
    """``__getattr__`` for ``module`` (PEP 562): each of its :data:`MOVED_NAMES`, from the module
    that defines it now, with :func:`warn_moved`."""
    where = MOVED_NAMES[module]

    def __getattr__(name: str) -> Any:
        if name not in where:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        warn_moved(f"{module}.{name}", f"{where[name]}.{name}")
        return getattr(importlib.import_module(where[name]), name)

    return __getattr__

"""The ``agon`` command: LightningCLI for the game, plus a few subcommands of our own.

``agon fit|validate|test|predict`` are LightningCLI's, over :class:`AgonModule` and any
:class:`ProblemDataModule`; ``agon sft``, ``sweep``, ``export`` and ``config`` are ours, and
``agon predict --bundle`` is the deployed cascade. Plugins are loaded before the parser is
built so their short class names resolve. A mistake in a command is one line and exit
status 2 (:mod:`agon_lightning.errors`); ``agon --verbose ...`` shows the traceback.
"""

from __future__ import annotations

import importlib
import os
import sys
from importlib.metadata import version
from typing import Any

from lightning.pytorch import Trainer
from lightning.pytorch.callbacks import ModelCheckpoint

from agon_lightning.allocator import reuse_freed_memory
from agon_lightning.cli_base import BaseCLI, compact_usage
from agon_lightning.config_files import expand_config_args
from agon_lightning.data.base import ProblemDataModule
from agon_lightning.errors import UsageError, fail, reporting_usage_errors, set_verbose, take_verbose_flag
from agon_lightning.module import AgonModule


def default_loggers(save_dir: str) -> list[Any]:
    """CSV always (``metrics.csv`` in the run directory), TensorBoard too when installed."""
    from lightning.pytorch.loggers import CSVLogger

    loggers: list[Any] = [CSVLogger(save_dir, name="lightning_logs")]
    try:
        from lightning.pytorch.loggers import TensorBoardLogger

        loggers.append(TensorBoardLogger(save_dir, name="lightning_logs", version=loggers[0].version))
    except ModuleNotFoundError:
        pass
    return loggers


class AgonCLI(BaseCLI):
    """LightningCLI over :class:`AgonModule` and any :class:`ProblemDataModule`; ``--ckpt_path last``
    must find a checkpoint."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("model_class", AgonModule)
        kwargs.setdefault("datamodule_class", ProblemDataModule)
        kwargs.setdefault("subclass_mode_data", True)
        kwargs.setdefault("save_config_kwargs", {"overwrite": True})
        kwargs.setdefault(
            "parser_kwargs",
            {"prog": "agon"}
            | {
                command: {"usage": compact_usage(f"agon {command}"), "description": COMMANDS[command][1]}
                for command in self.subcommands()
            },
        )
        super().__init__(*args, **kwargs)

    def instantiate_trainer(self, **kwargs: Any) -> Trainer:
        trainer_config = self._get(self.config_init, "trainer", default={})
        if trainer_config.get("logger") in (None, True):
            kwargs["logger"] = default_loggers(trainer_config.get("default_root_dir") or ".")
        return super().instantiate_trainer(**kwargs)

    def require_last_checkpoint(self) -> None:
        """``--ckpt_path last`` with nothing to resume is an error, not a silent fresh start."""
        if self.config[self.subcommand].get("ckpt_path") != "last":
            return
        callbacks = [cb for cb in self.trainer.checkpoint_callbacks if isinstance(cb, ModelCheckpoint)]
        if not callbacks:
            raise UsageError(
                "--ckpt_path last: no checkpoint callback is configured, so there is no last checkpoint "
                "(agon_lightning.callbacks.AgonCheckpoint writes one)"
            )
        found = [p for cb in callbacks for p in cb._find_last_checkpoints(self.trainer) if os.path.exists(p)]
        if not found:
            searched = ", ".join(sorted({str(cb.dirpath) for cb in callbacks if cb.dirpath}))
            raise UsageError(
                f"--ckpt_path last: no last checkpoint to resume in {searched or 'the logger directory'}; "
                "drop --ckpt_path to start from scratch, or give --trainer.default_root_dir of the run"
            )

    before_fit = before_validate = before_test = before_predict = require_last_checkpoint


def lightning_main(argv: list[str]) -> None:
    """``agon fit|validate|test|predict ARGS``: LightningCLI over the game."""
    AgonCLI(args=argv)


# name → (entry point "module:function" taking the command's arguments, one line of help)
COMMANDS: dict[str, tuple[str, str]] = {
    "fit": ("agon_lightning.cli:lightning_main", "train the drafter/challenger pair (start from --config agon:agon.yaml)"),
    "validate": ("agon_lightning.cli:lightning_main", "held-out pass@1 and length of the base, both adapters and both cascades"),
    "test": ("agon_lightning.cli:lightning_main", "the same evaluation through Lightning's test loop"),
    "predict": ("agon_lightning.predict:predict_main", "run a bundle's two-stage cascade over a problem file (JSON lines out)"),
    "sft": ("agon_lightning.sft:sft_main", "supervised warm-start: teach a base model the answer format"),
    "sweep": ("agon_lightning.sweep:sweep_main", "the paper's variants x seeds, one `agon fit` each, resumable; results table and plots"),
    "export": ("agon_lightning.export:export_main", "merge an adapter into its base, or lay out both for a multi-LoRA server"),
    "config": ("agon_lightning.config_files:config_main", "list the configs shipped with the package, or print one"),
}  # fmt: skip


def root_help() -> str:
    """What ``agon --help`` prints: every command with one line."""
    width = max(map(len, COMMANDS))
    commands = "\n".join(f"  {name:<{width}}  {line}" for name, (_, line) in COMMANDS.items())
    return (
        "usage: agon [--verbose] COMMAND [ARGS ...]\n"
        "       agon --version\n\n"
        "Agon: two LoRA policies on one frozen base, trained by a drafter/challenger game.\n\n"
        f"commands:\n{commands}\n\n"
        "options:\n"
        "  -h, --help  this list; `agon COMMAND --help` shows a command's options\n"
        "  --version   print the version\n"
        "  --verbose   tracebacks for input errors too (or set AGON_VERBOSE=1)\n\n"
        "Start: agon fit --config agon:agon.yaml --threads 1   (agon config agon.yaml > my.yaml to edit a copy)\n"
    )


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``agon`` console script."""
    argv, verbose = take_verbose_flag(sys.argv[1:] if argv is None else argv)
    set_verbose(verbose)
    if not argv or argv[0] in ("-h", "--help"):
        (sys.stdout if argv else sys.stderr).write(root_help())
        raise SystemExit(0 if argv else 2)
    if argv[0] == "--version":
        print(f"agon {version('agon-lightning')}")
        return
    command, args = argv[0], argv[1:]
    if command not in COMMANDS:
        fail("agon", f"unknown command {command!r}; commands: {', '.join(COMMANDS)} (agon --help)")
    reuse_freed_memory()  # CPU steps reuse freed activations instead of re-faulting them (AGON_MALLOC)
    module_name, function = COMMANDS[command][0].split(":")
    run = getattr(importlib.import_module(module_name), function)
    with reporting_usage_errors(f"agon {command}"):
        args = expand_config_args(args)
        run([command, *args] if run is lightning_main else args)


if __name__ == "__main__":
    main()

"""The ``agon`` command: LightningCLI for the game, plus a few subcommands of our own.

``agon fit|validate|test|predict`` are LightningCLI's, over :class:`AgonModule` and any
:class:`ProblemDataModule`; ``agon sft`` runs the supervised warm-start. Plugins are loaded
before the parser is built so their short class names resolve.
"""

from __future__ import annotations

import sys
from typing import Any

import torch
from lightning.pytorch import Trainer
from lightning.pytorch.cli import LightningCLI

from agon_lightning.data.base import ProblemDataModule
from agon_lightning.module import AgonModule
from agon_lightning.registry import load_plugins


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


class AgonCLI(LightningCLI):
    """LightningCLI with our model and data base classes and plugin loading."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        load_plugins()
        kwargs.setdefault("model_class", AgonModule)
        kwargs.setdefault("datamodule_class", ProblemDataModule)
        kwargs.setdefault("subclass_mode_data", True)
        kwargs.setdefault("save_config_kwargs", {"overwrite": True})
        kwargs.setdefault("auto_configure_optimizers", False)
        super().__init__(*args, **kwargs)

    def add_arguments_to_parser(self, parser: Any) -> None:
        parser.add_argument(
            "--threads",
            type=int | None,
            default=None,
            help="torch CPU threads (default: torch's choice). On a shared or busy CPU, 1 avoids "
            "oversubscribed threads spinning, which can slow a tiny model 100-fold.",
        )

    def before_instantiate_classes(self) -> None:
        config = self.config[self.subcommand] if self.subcommand else self.config
        threads = config.get("threads")
        if threads is not None:
            if threads < 1:
                raise ValueError(f"--threads must be >= 1 or null, got {threads}")
            torch.set_num_threads(threads)

    def instantiate_trainer(self, **kwargs: Any) -> Trainer:
        trainer_config = self._get(self.config_init, "trainer", default={})
        if trainer_config.get("logger") in (None, True):
            kwargs["logger"] = default_loggers(trainer_config.get("default_root_dir") or ".")
        return super().instantiate_trainer(**kwargs)


SUBCOMMANDS = {
    "sft": "agon_lightning.sft:sft_main",
    "sweep": "agon_lightning.sweep:sweep_main",
    "predict": "agon_lightning.predict:predict_main",
    "export": "agon_lightning.export:export_main",
}


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``agon`` console script."""
    from_command_line = argv is None
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in SUBCOMMANDS:
        module_name, func = SUBCOMMANDS[argv[0]].split(":")
        import importlib

        getattr(importlib.import_module(module_name), func)(argv[1:])
        return
    # From the console script LightningCLI reads sys.argv itself (passing both warns).
    AgonCLI(args=None if from_command_line else argv)


if __name__ == "__main__":
    main()

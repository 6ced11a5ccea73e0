"""``agon fit|validate|test|predict --config``: LightningCLI over the game.

Kept apart from :mod:`agon_lightning.cli` (the command table and ``main``) so that ``agon --help``
and every command that does not train load neither Lightning nor torch.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from lightning.pytorch import Trainer
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.utilities import rank_zero_info

from agon_lightning.callbacks import AgonCheckpoint, standard_callbacks, validate_callbacks
from agon_lightning.callbacks.defaults import STANDARD_NAMES
from agon_lightning.cli.base import BaseCLI, compact_usage
from agon_lightning.cli.commands import COMMANDS
from agon_lightning.data.base import ProblemDataModule
from agon_lightning.infra.checksum import verify_checkpoint
from agon_lightning.infra.errors import UsageError
from agon_lightning.training.module import AgonModule


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
    must find a checkpoint, a checkpoint resumed must match its digest, and ``fit --overwrite`` lets
    a fit from scratch replace an earlier run's checkpoints."""

    overwrite = False  # fit --overwrite, read once the trainer is built

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

    def add_arguments_to_parser(self, parser: Any) -> None:
        super().add_arguments_to_parser(parser)
        parser.add_argument(
            "--skip_callbacks",
            type=list[str],
            default=[],
            help=f"standard callbacks to leave out of a fit (every fit gets {', '.join(STANDARD_NAMES)}; "
            "one listed in trainer.callbacks replaces the standard one of its class)",
        )
        parser.add_argument(
            "--overwrite",
            type=bool,
            nargs="?",
            const=True,  # a bare --overwrite
            default=False,
            help="fit: start from scratch in a checkpoint directory that holds an earlier run's checkpoints, "
            "deleting them first (without it, such a fit is refused; --ckpt_path last continues that run)",
        )

    def instantiate_trainer(self, **kwargs: Any) -> Trainer:
        trainer_config = self._get(self.config_init, "trainer", default={})
        if trainer_config.get("logger") in (None, True):
            kwargs["logger"] = default_loggers(trainer_config.get("default_root_dir") or ".")
        if self.subcommand in (None, "fit"):  # a training run: the standard callbacks, once each
            kwargs["callbacks"] = self.standard_callbacks(trainer_config, standard_callbacks)
        elif self.subcommand == "validate":  # its outcomes.jsonl, whatever the config lists
            kwargs["callbacks"] = self.standard_callbacks(trainer_config, validate_callbacks)
        trainer = super().instantiate_trainer(**kwargs)
        self.overwrite = bool(self._get(self.config, "overwrite", default=False))
        if self.overwrite:
            for callback in trainer.checkpoint_callbacks:
                if isinstance(callback, AgonCheckpoint):
                    callback.overwrite = True
            # The run's config.yaml (saved at setup from this namespace) does not carry the switch: a copy
            # reused as --config must never delete the checkpoints of whatever directory it is pointed at.
            (self.config[self.subcommand] if self.subcommand else self.config)["overwrite"] = False
        return trainer

    def require_last_checkpoint(self) -> None:
        """``--ckpt_path last`` with nothing to resume is an error, not a silent fresh start."""
        if self.config[self.subcommand].get("ckpt_path") != "last":
            return
        ours = [cb for cb in self.trainer.checkpoint_callbacks if isinstance(cb, AgonCheckpoint)]
        lightnings = [cb for cb in self.trainer.checkpoint_callbacks if isinstance(cb, ModelCheckpoint)]
        if not (ours or lightnings):
            raise UsageError(
                "--ckpt_path last: no checkpoint callback is configured, so there is no last checkpoint "
                "(agon_lightning.callbacks.AgonCheckpoint writes one)"
            )
        found = [p for cb in ours if (p := cb.last_checkpoint(self.trainer))]
        found += [p for cb in lightnings if cb.dirpath and os.path.exists(p := last_of(cb))]
        if not found:
            searched = [cb.directory(self.trainer) for cb in ours] + [
                str(cb.dirpath) for cb in lightnings if cb.dirpath
            ]
            raise UsageError(
                f"--ckpt_path last: no last checkpoint to resume in {', '.join(sorted(set(searched))) or 'the logger directory'}; "
                "drop --ckpt_path to start from scratch, or give --trainer.default_root_dir of the run"
            )
        if ours:  # Lightning resolves "last" for its own ModelCheckpoint only: name the file
            self.config_init[self.subcommand]["ckpt_path"] = max(found, key=os.path.getmtime)

    def before_fit(self) -> None:
        """``--ckpt_path last`` must exist and the checkpoint resumed must be intact, before anything loads."""
        self.require_last_checkpoint()
        ckpt_path = self.config_init["fit"].get("ckpt_path")
        if ckpt_path and self.overwrite:
            raise UsageError(
                f"--overwrite starts from scratch and --ckpt_path {ckpt_path} resumes; give one of them"
            )
        ours = [cb for cb in self.trainer.checkpoint_callbacks if isinstance(cb, AgonCheckpoint)]
        if ckpt_path and os.path.exists(ckpt_path):  # "best", "hpc" and URLs are Lightning's to resolve
            if ours:  # remembers that it checked this file, so loading it does not check again
                ours[0].verify_resume(str(ckpt_path))
            elif note := verify_checkpoint(ckpt_path):
                rank_zero_info(note)

    before_validate = before_test = before_predict = require_last_checkpoint


def last_of(callback: ModelCheckpoint) -> str:
    """Where a Lightning ``ModelCheckpoint`` writes ``last`` (its public name and extension)."""
    return os.path.join(str(callback.dirpath), callback.CHECKPOINT_NAME_LAST + callback.FILE_EXTENSION)


def lightning_main(argv: list[str]) -> None:
    """``agon fit|validate|test|predict ARGS``: LightningCLI over the game.

    After a run that returned normally, every rank destroys its process group: Lightning leaves
    it alive for a later ``fit``/``validate`` in the same process, and a gloo group still alive at
    interpreter exit can abort the process ("terminate called without an active exception", exit
    134) after all the work is done. Not on an exception: the other ranks may still be inside a
    collective, and destroying the group there can hang (the interrupt watchdog exits instead).
    """
    AgonCLI(args=argv)
    release_process_group()


def release_process_group() -> None:
    """Destroy the default process group if one is up (every rank calls it, once, at the end)."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()

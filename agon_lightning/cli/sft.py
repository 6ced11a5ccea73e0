"""``agon sft``: LightningCLI over the supervised warm-start (:mod:`agon_lightning.training.sft`)."""

from __future__ import annotations

from functools import partial
from typing import Any

import lightning as L

from agon_lightning.callbacks.defaults import sft_callbacks
from agon_lightning.cli.base import BaseCLI, compact_usage
from agon_lightning.training.sft import SFTModule
from agon_lightning.training.sft_data import SFTDataModule


class SFTCLI(BaseCLI):
    """LightningCLI for :class:`SFTModule` and :class:`SFTDataModule` (``--threads`` and errors from BaseCLI),
    with ``--ckpt_path`` to resume a run (``last``: the ``last.ckpt`` every run keeps), and the
    callbacks every SFT run gets (:func:`~agon_lightning.callbacks.defaults.sft_callbacks`)."""

    def instantiate_trainer(self, **kwargs: Any) -> L.Trainer:
        trainer_config = self._get(self.config_init, "trainer", default={})
        standard = partial(sft_callbacks, default_root_dir=trainer_config.get("default_root_dir") or ".")
        kwargs["callbacks"] = self.standard_callbacks(trainer_config, standard)
        return super().instantiate_trainer(**kwargs)

    def add_arguments_to_parser(self, parser: Any) -> None:
        super().add_arguments_to_parser(parser)
        parser.add_argument(
            "--skip_callbacks",
            type=list[str],
            default=[],
            help="callbacks to leave out (every run gets AdapterSummary, ProgressLog, ModelCheckpoint, "
            "RunOutputs; one listed in trainer.callbacks replaces the one of its class)",
        )
        parser.add_argument(
            "--ckpt_path",
            type=str | None,
            default=None,
            help="resume from this checkpoint; `last`: <default_root_dir>/checkpoints/last.ckpt (every run "
            "writes one every 50 steps)",
        )


def sft_main(args: list[str] | None = None) -> None:
    """``agon sft``: parse ``args`` (a config and overrides), then fit.

    Example:
        ``agon sft --config configs/sft_tiny.yaml --model.output_dir runs/tiny``
    """
    cli = SFTCLI(
        SFTModule,
        SFTDataModule,
        args=args,
        run=False,
        save_config_kwargs={"overwrite": True},
        parser_kwargs={
            "prog": "agon sft",
            "usage": compact_usage("agon sft"),
            "description": "Supervised warm-start: fine-tune a base on worked solutions in both roles' "
            "prompts until held-out accuracy reaches a threshold, then write it to --model.output_dir. "
            "Start from: agon sft --config agon:sft_tiny.yaml --model.output_dir runs/tiny-qwen3",
        },
    )
    cli.trainer.fit(cli.model, datamodule=cli.datamodule, ckpt_path=cli.config.get("ckpt_path"))

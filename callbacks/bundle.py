"""The adapter bundle written beside each checkpoint, ready to deploy.

A bundle is ``NAME/`` next to ``NAME.ckpt``: every adapter in PEFT's layout plus
``agon.json`` (:func:`agon_lightning.deploy.bundle.save_bundle`), so the policy a checkpoint
holds can be served without the run that wrote it. :class:`BundleWriter` decides which adapter
drafts in the bundle's cascade, gathers the adapters and writes and removes bundles;
:class:`~callbacks.checkpoint.AgonCheckpoint` composes it and calls it on each save and each
removal.

Why a component the checkpoint calls rather than a callback of its own: a bundle belongs to
one checkpoint file — written after it, under its name, deleted with it — and Lightning's
callback hooks do not say which file a save wrote or which one was dropped. Composed, the
two stay in step through public methods only.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import lightning as L

from agon_lightning.deploy.bundle import save_bundle
from agon_lightning.game.names import ADAPTERS, ALPHA, BETA
from agon_lightning.strategies import full_tensors

from .protocol import AgonModuleView

# ``drafter`` choices: the evaluator's pick, the better cascade, or an adapter by name. The
# ``Literal`` on AgonCheckpoint's constructor spells them out for the CLI; a test holds it equal to this.
DRAFTER_CHOICES: tuple[str, ...] = ("deployed", "auto", *ADAPTERS)


def bundle_dir(checkpoint_path: str | Path) -> Path:
    """Where the adapter bundle of ``NAME.ckpt`` lives: ``NAME/`` beside it."""
    path = Path(checkpoint_path)
    return path.with_name(path.stem)


class BundleWriter:
    """Writes and removes the adapter bundle of a checkpoint.

    Args:
        drafter: Adapter that drafts in the bundle's deployed cascade. ``deployed``: the drafter
            of the module's deployed policy (``model.deployed``), fixed before training;
            ``auto`` picks, post hoc, the cascade order that scored higher at the last
            validation (``alpha`` on a tie), as the paper chose its direction.
    """

    def __init__(self, drafter: str = "deployed") -> None:
        if drafter not in DRAFTER_CHOICES:
            raise ValueError(f"drafter must be one of {DRAFTER_CHOICES}, got {drafter!r}")
        self.drafter = drafter

    def drafter_for(self, trainer: L.Trainer) -> str:
        """The adapter that drafts in the bundle written now (see ``drafter``)."""
        if self.drafter == "deployed":
            module: AgonModuleView = trainer.lightning_module
            return module.evaluator.deployed_drafter
        if self.drafter != "auto":
            return self.drafter
        ab = trainer.callback_metrics.get("val/cascade_ab/pass@1")
        ba = trainer.callback_metrics.get("val/cascade_ba/pass@1")
        return BETA if ab is not None and ba is not None and float(ba) > float(ab) else ALPHA

    def gather(self, trainer: L.Trainer) -> dict[str, Any]:
        """The adapters, whole on every rank: a collective under sharding, so every process calls it."""
        module: AgonModuleView = trainer.lightning_module
        return full_tensors(module.policy)

    def write(self, trainer: L.Trainer, checkpoint_path: str | Path, adapters: dict[str, Any]) -> Path:
        """Write the bundle of ``checkpoint_path`` from ``adapters`` (:meth:`gather`); rank zero only."""
        return save_bundle(
            trainer.lightning_module, bundle_dir(checkpoint_path), self.drafter_for(trainer), adapters
        )

    def remove(self, checkpoint_path: str | Path) -> None:
        """Delete the bundle of ``checkpoint_path``, if there is one; rank zero only."""
        shutil.rmtree(bundle_dir(checkpoint_path), ignore_errors=True)

"""The adapter bundle written beside each checkpoint, ready to deploy.

A bundle is ``NAME/`` next to ``NAME.ckpt``: every adapter of the run in PEFT's layout plus
``agon.json`` (:func:`agon_lightning.deploy.bundle.save_bundle`), so the policy a checkpoint
holds can be served without the run that wrote it — the run's deployed policy: a cascade, one
adapter alone, or the game's answer graph. :class:`BundleWriter` decides which adapter drafts in a
bundle's cascade, gathers the adapters and writes and removes bundles;
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
from agon_lightning.infra.errors import UsageError
from agon_lightning.strategies import full_tensors
from agon_lightning.training.validation import cascade_key

from .protocol import AgonModuleView

# ``drafter``: the evaluator's pick, the better cascade, or else the name of one of the run's adapters
# (any game's: checked against the module when a fit starts, :meth:`BundleWriter.check`).
DRAFTER_MODES: tuple[str, ...] = ("deployed", "auto")


def bundle_dir(checkpoint_path: str | Path) -> Path:
    """Where the adapter bundle of ``NAME.ckpt`` lives: ``NAME/`` beside it."""
    path = Path(checkpoint_path)
    return path.with_name(path.stem)


class BundleWriter:
    """Writes and removes the adapter bundle of a checkpoint.

    Args:
        drafter: Adapter that drafts in the bundle's cascade. ``deployed``: the run's deployed policy
            as it is (``model.deployed``, fixed before training: a cascade, an adapter alone, or the
            game's answer graph); ``auto`` picks, post hoc, the order of a two-adapter cascade that
            scored higher at the last validation (the first adapter on a tie), as the paper chose its
            direction, and the deployed policy where no two cascades were scored; an adapter's name:
            that adapter drafts (alone, for a game deployed as one adapter).
    """

    def __init__(self, drafter: str = "deployed") -> None:
        if not isinstance(drafter, str) or not drafter:
            raise ValueError(
                f"drafter must be {' or '.join(map(repr, DRAFTER_MODES))} or an adapter's name, got {drafter!r}"
            )
        self.drafter = drafter

    def check(self, module: AgonModuleView) -> None:
        """Refuse, before training, a ``drafter`` the run cannot write a bundle with.

        Raises:
            UsageError: ``drafter`` names none of the module's adapters (the message lists them), or
                names one where the game deploys as its answer graph.
        """
        if self.drafter in DRAFTER_MODES:
            return
        try:
            module.evaluator.deployment.drafting(self.drafter, tuple(module.adapter_names))
        except ValueError as err:
            raise UsageError(
                f"AgonCheckpoint drafter={self.drafter!r}: {err}; or 'deployed' or 'auto'"
            ) from err

    def drafter_for(self, trainer: L.Trainer) -> str | None:
        """The adapter that drafts in the bundle written now (see ``drafter``); ``None``: the game's answer graph."""
        if self.drafter not in DRAFTER_MODES:
            return self.drafter
        module: AgonModuleView = trainer.lightning_module
        deployed = module.evaluator.deployed_drafter
        if self.drafter == "deployed" or len(module.adapter_names) != 2:
            return deployed
        first, second = module.adapter_names
        forward = trainer.callback_metrics.get(f"val/{cascade_key(first, second)}/pass@1")
        backward = trainer.callback_metrics.get(f"val/{cascade_key(second, first)}/pass@1")
        if forward is None or backward is None:
            return deployed
        return second if float(backward) > float(forward) else first

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

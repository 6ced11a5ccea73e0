"""The strategy's checkpoint reader, with each checkpoint checked against its digest before torch reads it.

``agon fit --ckpt_path`` checks the file before anything loads; a script's
``trainer.fit(model, ckpt_path=...)`` reaches no such point before Lightning reads the file, and
torch's answer to a truncated one is "failed finding central directory". Lightning reads every
checkpoint a strategy loads in one file through the strategy's ``checkpoint_io`` plugin (its
public extension point), so :class:`~agon_lightning.callbacks.AgonCheckpoint` puts
:class:`VerifiedCheckpointIO` in front of whatever plugin the strategy has: loading checks,
saving and removing pass through. Every process checks the file it reads, so every process
refuses a damaged one alike, with no collective.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from lightning.fabric.plugins import CheckpointIO
from lightning.pytorch.strategies import Strategy


class VerifiedCheckpointIO(CheckpointIO):
    """``inner``, with ``verify(path)`` called before each load of a local checkpoint.

    Args:
        inner: The strategy's own plugin, which does the reading and writing.
        verify: Raises when the checkpoint at the path is damaged.
    """

    def __init__(self, inner: CheckpointIO, verify: Callable[[str], None]) -> None:
        self.inner = inner
        self.verify = verify

    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None
    ) -> None:
        self.inner.save_checkpoint(checkpoint, path, storage_options=storage_options)

    def load_checkpoint(
        self, path: Any, map_location: Any | None = None, weights_only: bool | None = None
    ) -> dict[str, Any]:
        if isinstance(path, (str, os.PathLike)) and os.path.exists(path):
            self.verify(os.fspath(path))
        return self.inner.load_checkpoint(path, map_location=map_location, weights_only=weights_only)

    def remove_checkpoint(self, path: Any) -> None:
        self.inner.remove_checkpoint(path)

    def teardown(self) -> None:
        self.inner.teardown()


def verify_loads(strategy: Strategy, verify: Callable[[str], None]) -> None:
    """Put :class:`VerifiedCheckpointIO` in front of ``strategy``'s plugin, once."""
    if not isinstance(strategy.checkpoint_io, VerifiedCheckpointIO):
        strategy.checkpoint_io = VerifiedCheckpointIO(strategy.checkpoint_io, verify)

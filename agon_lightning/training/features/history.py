"""Snapshots: each policy's past versions, kept for the features that read them.

Sized by the deepest reader (a ``self`` KL reference's age, the league's ``max_age``), it keeps
every policy of the game at the version about to be played before each step, whatever the game
samples: a game that samples its own first stage gets the same past weights as Agon. It goes
into checkpoints whole (``agon.adapter_history``), so a resumed run reads the same past weights
as an unbroken one.
"""

from __future__ import annotations

from typing import Any

from lightning.pytorch.utilities import rank_zero_warn

from agon_lightning.adapters.snapshots import AdapterHistory
from agon_lightning.strategies import check_snapshot_strategy
from agon_lightning.training.features.base import Feature

READERS = "model.kl's 'self' reference or model.league"


class Snapshots(Feature):
    """Keeps each policy's last ``depth`` versions (CPU copies of the adapter tensors)."""

    option = "model.kl / model.league"

    def __init__(self, depth: int) -> None:
        self.history = AdapterHistory(depth)

    @property
    def depth(self) -> int:
        return self.history.depth

    def setup(self, host: Any) -> None:
        check_snapshot_strategy(host.trainer.strategy)

    def before_play(self, host: Any) -> None:
        self.history.keep(host.policy, host.adapter_names, host.version)

    def state_dict(self) -> dict[str, Any]:
        return {"adapter_history": self.history.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Raises ``ValueError`` when the checkpoint holds no past weights: resuming would read others."""
        saved = state.get("adapter_history")
        if saved is None:
            raise ValueError(
                f"this run reads past adapter weights ({READERS}), but the checkpoint holds none (it was "
                "written without either): resuming would read other weights than the run did"
            )
        self.history.load_state_dict(saved)


class NoSnapshots(Feature):
    """Where no feature reads past versions: a checkpoint's are noted and left unused."""

    def state_dict(self) -> dict[str, Any]:
        return {"adapter_history": None}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("adapter_history") is not None:
            rank_zero_warn(
                f"the checkpoint holds past adapter weights ({READERS}) and this run reads none: they are not used"
            )

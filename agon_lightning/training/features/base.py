"""A feature of training as a plug-in: what it needs, where it hooks in, what it saves.

The league, the KL anchor, sampling ahead and the adapters' snapshots are each a :class:`Feature`;
the module holds a :class:`Features` list and names none of them. A feature declares:

- whether it applies to a game and beside the other features (:meth:`Feature.check`,
  :meth:`Feature.composes`, at construction: a refusal names the game, or both options);
- the adapter slots and the history of past versions it needs (:meth:`Feature.slots`,
  :attr:`Feature.depth`);
- its hooks around the play and the update, and what the player asks of it (drafts, rivals);
- its checkpoint state (keys of the checkpoint's ``agon`` dict) and its metrics.

A feature of your own subclasses :class:`Feature` and goes in ``model.features``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from torch import Tensor

from agon_lightning.game.types import Problem
from agon_lightning.games.base import Game
from agon_lightning.games.player import Rival
from agon_lightning.games.records import StepRecord
from agon_lightning.rollout.base import RolloutBatch


class Feature:
    """One feature; every hook does nothing unless overridden.

    Hooks receive the module as ``host`` (its ``policy``, ``rollout``, ``game``, ``version``,
    ``step``, ``trainer``, and ``history``: the adapters' past versions, or ``None``).
    """

    option = "model.features"
    """The option that configures it, as messages name it."""

    @property
    def active(self) -> bool:
        """Whether it does anything in this run."""
        return True

    @property
    def depth(self) -> int:
        """How many past versions of each policy it reads from the history (0: none)."""
        return 0

    def check(self, game: Game) -> None:
        """Raise ``ValueError`` (naming the game and :attr:`option`) when it cannot apply to ``game``."""

    def composes(self, features: list[Feature]) -> None:
        """Raise ``ValueError`` (naming both options) when it cannot run beside one of the run's ``features``."""

    def slots(self, policies: tuple[str, ...]) -> dict[str, str]:
        """The frozen adapter slots it samples or scores through: slot → the policy it copies."""
        return {}

    def setup(self, host: Any) -> None:
        """Once the trainer is attached (a strategy it cannot run under is refused here)."""

    def before_play(self, host: Any) -> None:
        """Before the game plays a step."""

    def drafts(
        self, host: Any, problems: list[Problem], adapter: str, sample_now: Callable[[], RolloutBatch]
    ) -> tuple[RolloutBatch, int] | None:
        """The step's first-stage samples and their version, if this feature supplies them; ``None``: it does not."""
        return None

    def rival(self, host: Any, role: str, adapter: str) -> Rival | None:
        """The past version of ``adapter`` that ``role`` faces this step (a league); ``None``: none."""
        return None

    def rival_played(
        self, host: Any, rival: Rival | None, reader_correct: Tensor, rival_correct: Tensor
    ) -> None:
        """How the role did against what it faced."""

    def after_play(self, host: Any, record: StepRecord) -> None:
        """After the game played (the record's rewards set, its advantages not yet)."""

    def before_update(self, host: Any, record: StepRecord) -> None:
        """Before the update (the KL anchor sets each role's ``reference`` here)."""

    @contextlib.contextmanager
    def around_update(self, host: Any, record: StepRecord) -> Iterator[dict[str, float]]:
        """Around the update; the dict it yields is filled with metrics once the update is done."""
        yield {}

    def weights_updated(self, host: Any, adapters: list[str]) -> bool:
        """The adapters changed: ``True`` when this feature tells the rollout itself (later)."""
        return False

    def on_train_end(self, host: Any) -> None:
        """Training ended (also early)."""

    def state_dict(self) -> dict[str, Any]:
        """Keys it adds to the checkpoint's ``agon`` state."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore from the checkpoint's whole ``agon`` state (it reads its own keys)."""


class Features(list):
    """The run's features, in order; each call goes to every one (or to the first that answers)."""

    history: Any = None
    """The policies' past versions the features read (an ``AdapterHistory``), or ``None``."""

    def check(self, game: Game) -> None:
        """Each feature against the game, then against the other features: a refusal names both."""
        for f in self:
            f.check(game)
        for f in self:
            f.composes(list(self))

    @property
    def depth(self) -> int:
        return max((f.depth for f in self), default=0)

    def slots(self, policies: tuple[str, ...]) -> dict[str, str]:
        return {slot: policy for f in self for slot, policy in f.slots(policies).items()}

    def call(self, hook: str, *args: Any) -> None:
        for f in self:
            getattr(f, hook)(*args)

    def first(self, hook: str, *args: Any) -> Any:
        """The first answer other than ``None`` among the features' ``hook``."""
        for f in self:
            if (answer := getattr(f, hook)(*args)) is not None:
                return answer
        return None

    def any(self, hook: str, *args: Any) -> bool:
        """Whether any feature's ``hook`` says ``True`` (each is asked)."""
        return any([getattr(f, hook)(*args) for f in self])

    @contextlib.contextmanager
    def around_update(self, host: Any, record: StepRecord) -> Iterator[dict[str, float]]:
        metrics: dict[str, float] = {}
        with contextlib.ExitStack() as stack:
            parts = [stack.enter_context(f.around_update(host, record)) for f in self]
            yield metrics
        for part in parts:
            metrics.update(part)

    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {}
        for f in self:
            state.update(f.state_dict())
        return state

"""The game as a component: it declares a :class:`~agon_lightning.games.spec.GameSpec` and plays a step.

Each step the module hands the game a :class:`~agon_lightning.games.player.Player` and the
step's problems; the game samples, judges and pays every role and returns a
:class:`~agon_lightning.games.records.StepRecord`. The module then asks the game for each role's
advantages (group-normalised by default) and updates every role's adapter in one joint
backward, whatever the game. The features (league, KL anchor, sampling ahead, snapshots) read
only the spec.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import torch
from torch import Tensor

from agon_lightning.game.advantages import group_advantages
from agon_lightning.game.types import Problem
from agon_lightning.games.player import Player
from agon_lightning.games.records import RoleRollout, StepRecord
from agon_lightning.games.spec import GameSpec
from agon_lightning.rollout.base import RolloutBatch


class Game(ABC):
    """One step of a game between adapters of one base.

    A subclass declares :attr:`spec` and :meth:`play`; it may override :meth:`cast` (who plays
    each role at a step), :meth:`advantages`, :meth:`metrics`, the sparse :meth:`counts`, its
    checkpoint state, and, for ``deploy: graph``, :meth:`answer`.
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "kind" in cls.__dict__:
            raise TypeError(
                f"{cls.__name__}.kind is gone: a game declares a GameSpec instead (its policies, roles, and "
                "deploy='single' for what kind='grpo' meant, 'cascade' for kind='agon'); see the tutorial 'Write a game'"
            )

    @property
    @abstractmethod
    def spec(self) -> GameSpec:
        """The game's policies, roles, rivals and deployment."""

    @property
    def adapters(self) -> tuple[str, ...]:
        """The adapters the game trains (``spec.policies``)."""
        return self.spec.policies

    @property
    def name(self) -> str:
        """How messages name the game."""
        return type(self).__name__

    def cast(self, step: int) -> dict[str, str]:
        """Role → the adapter that plays it at ``step``.

        By default the i-th role is the i-th policy (one policy plays every role). A game with
        another cast (roles that rotate, more roles than policies) overrides it.
        """
        spec = self.spec
        if len(spec.policies) == 1:
            return dict.fromkeys(spec.roles, spec.policies[0])
        if len(spec.roles) == len(spec.policies):
            return dict(zip(spec.roles, spec.policies))
        raise NotImplementedError(
            f"{self.name} has {len(spec.roles)} roles and {len(spec.policies)} policies: override cast(step)"
        )

    @abstractmethod
    def play(self, player: Player, problems: list[Problem]) -> StepRecord:
        """Sample, judge and pay every role for one step (no gradients); each role's ``rewards`` set."""

    def advantages(self, roles: list[RoleRollout], num_generations: int, options: Any) -> Tensor:
        """Set each role's ``advantages`` (in place); ``[groups]`` 1.0 where a group's rewards all agree.

        By default each role's group advantages (GRPO: its rows in groups of ``role.group_size``,
        else N). ``options``: the run's ``grpo`` settings (``scale_std``, ``std``).
        """
        zero_std = []
        for role in roles:
            role.advantages, zs = group_advantages(
                role.rewards, role.group_size or num_generations, options.scale_std, std=options.std
            )
            zero_std.append(zs.float())
        return torch.cat(zero_std)

    def metrics(self, record: StepRecord) -> dict[str, float]:
        """The game's own metrics that every step defines (beyond ``record.reward_terms``)."""
        return {}

    def counts(self, record: StepRecord) -> Tensor | None:
        """Counts this step defines, summed over every process before :meth:`count_metrics` reads them
        (a fixed shape every step); ``None``: none."""
        return None

    def count_metrics(self, sums: Tensor) -> dict[str, float]:
        """Metrics from :meth:`counts` summed over every process, each only where defined."""
        return {}

    def state_dict(self) -> dict[str, Any]:
        """What the game keeps across steps (saved in checkpoints)."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:  # noqa: B027  (a game without state keeps none)
        """Restore :meth:`state_dict`."""

    def answer(self, player: Any, problems: list[Problem]) -> RolloutBatch:
        """``deploy: graph``: the game's own deployment: each problem's final completion, greedy, one per problem.

        ``player`` offers what deployment has (an :class:`~agon_lightning.training.module.AgonModule` in
        evaluation, a bundle's :class:`~agon_lightning.deploy.cascade.Cascade` when served): ``sample``,
        ``read``, ``tokenizer``, ``prompts`` and ``summarizer`` — not the training-only members (``draft``,
        ``rival``, ``pay``, ``role``). The final completions are verified against each problem's answer.
        """
        raise NotImplementedError(f"{self.name} declares deploy={self.spec.deploy!r} and has no answer graph")


def draft_stage(
    player: Player, problems: list[Problem], drafter: str, role: str = "drafter"
) -> tuple[StepRecord, Any]:
    """The first stage Agon and GRPO play: ``drafter``'s N drafts of each problem, verified.

    Returns the step's record (its first role: these drafts) and their outcome (what the reward reads).
    """
    drafts = player.draft(drafter, problems, role)
    outcome = drafts.outcome
    return StepRecord(player.step, problems, drafts), outcome

"""What a game may call: the :class:`Player` protocol, all the module offers a game.

A game is handed a :class:`Player` each step and touches nothing else of the trainer: it samples,
drafts, verifies, reads summaries, asks the league for a rival, pays through the reward, and
builds each role's rollouts. :class:`~agon_lightning.training.module.AgonModule` is one; a test
may hand a game any object with these members.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from torch import Tensor

from agon_lightning.adapters.snapshots import slot_of
from agon_lightning.game.prompts import Prompts
from agon_lightning.game.rewards import Outcomes, Reward, RoleRewards
from agon_lightning.game.types import Problem, Verdict
from agon_lightning.games.records import RoleRollout
from agon_lightning.rollout.base import RolloutBatch
from agon_lightning.summarizers.base import Summarizer
from agon_lightning.verifiers.base import Verifier


@dataclass
class Rival:
    """A past version of an adapter that a role faces at a step the league plays.

    Attributes:
        adapter: The adapter it is a past version of.
        version: Its policy version.
        age: How many updates ago that was.
    """

    adapter: str
    version: int
    age: int

    @property
    def slot(self) -> str:
        """The frozen adapter slot that holds it this step: sample with ``player.sample(rival.slot, …)``."""
        return slot_of(self.adapter, "league")


@runtime_checkable
class Player(Protocol):
    """All a game may call (see the tutorial "Write a game").

    Attributes:
        tokenizer: The base model's tokenizer (the prompt templates take it).
        prompts: The prompt templates: ``draft_prompt(tokenizer, problem)``, ``challenge_prompt(tokenizer,
            problem, summary)``.
        verifier: Judges completions against a problem's answer (:meth:`verify` calls it).
        summarizer: What of a draft another role may read (:meth:`read` calls it).
        reward: Pays the roles of the competitive game from their outcomes (:meth:`pay` calls it).
        num_generations: N, the samples of each problem (``grpo.num_generations``): a group.
        step: The game step being played (0-based).
        version: The policy version being played: updates the adapters have taken.
    """

    tokenizer: Any
    prompts: Prompts
    verifier: Verifier
    summarizer: Summarizer
    reward: Reward

    @property
    def num_generations(self) -> int: ...

    @property
    def step(self) -> int: ...

    @property
    def version(self) -> int: ...

    def sample(
        self, adapter: str | None, prompts: list[str], num_samples: int, greedy: bool = False
    ) -> RolloutBatch:
        """``num_samples`` completions of each prompt by ``adapter`` (``None``: the frozen base), prompt by prompt."""
        ...

    def draft(self, adapter: str, problems: list[Problem], role: str = "drafter") -> RoleRollout:
        """``adapter``'s N samples of each problem from the plain prompt, verified, as ``role``'s rollouts.

        Rewards are left at zero for the game to set; each row records the version it was sampled
        with (sampling ahead may have drawn them one version earlier).
        """
        ...

    def verify(self, texts: list[str], problems: list[Problem]) -> list[Verdict]:
        """The verifier's verdict on each text, against its problem (one problem per text)."""
        ...

    def read(self, problems: list[Problem], drafts: RolloutBatch) -> tuple[list[str], list[str]]:
        """``(summaries, prompts)``: each draft summarised, and the prompt of the role that reads it."""
        ...

    def rival(self, role: str, adapter: str) -> Rival | None:
        """The past version of ``adapter`` that ``role`` faces this step, or ``None`` (the league does not play).

        ``role`` must have a rival in the game's ``GameSpec.rivals``. Report how it went with
        :meth:`rival_played`, also when ``None`` came back.
        """
        ...

    def rival_played(self, rival: Rival | None, reader_correct: Tensor, rival_correct: Tensor) -> None:
        """How ``role`` did against the rival's (or, with ``None``, the adapter's own) samples it faced."""
        ...

    def pay(self, outcomes: Outcomes) -> RoleRewards:
        """The reward component's pay for the roles' outcomes (the competitive game's rewards)."""
        ...

    def role(
        self,
        role: str,
        adapter: str,
        rollouts: RolloutBatch,
        verdicts: list[Verdict],
        rewards: Tensor,
        **fields: Any,
    ) -> RoleRollout:
        """``role``'s rollouts, sampled by ``adapter`` at this step's version (``fields``: group_size, …)."""
        ...

"""The game as a component: the roles, what each reads, who faces whom, what each is paid.

A :class:`Game` plays one training step for the module (the *player*: the policies, the
sampling backend, the verifier, the summarizer, the reward) and returns a
:class:`~agon_lightning.training.records.StepRecord` whose ``roles`` each carry their rewards;
the module then computes each role's group advantages and updates every role's adapter in one
joint backward, whatever the game. Built-ins (entry-point group ``agon_lightning.games``):

- :class:`AgonGame` (``agon``): the drafter samples N drafts; the challenger answers each after
  reading its summary; roles by ``schedule`` (``rotate``, ``fixed``, ``self_play``), opponents
  by ``pairing`` (``per_rollout``, ``shared``). Cooperative exchange, the hidden summary, the
  margin and the tiebreak are settings of its reward, summarizer and prompts; the league of past
  rivals is the module's ``league``.
- :class:`GRPOGame` (``grpo``): one adapter drafts; GRPO on the same code path.

A game of your own subclasses :class:`Game` (see the tutorial "Write a game"): it declares its
adapters and, each step, samples with ``player.sample``, judges with ``player.verifier`` and
pays each role.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from agon_lightning.game.names import ADAPTERS, ALPHA
from agon_lightning.game.rewards import Outcomes, RoleOutcome
from agon_lightning.game.types import Problem
from agon_lightning.rollout.pipeline import challenge_prompts
from agon_lightning.training.league import sample_rival
from agon_lightning.training.records import RoleRollout, StepRecord, outcome_of, rows_of
from agon_lightning.training.schedule import PAIRINGS, SCHEDULES, opponent_rows, roles_for_step


class Game(ABC):
    """One step of a game between adapters of one base, for :class:`~agon_lightning.training.module.AgonModule`.

    Attributes:
        kind: ``agon`` (two stages: evaluated as single adapters and as cascades) or ``grpo``
            (one adapter drafting: evaluated alone).
    """

    kind: str = "agon"

    @property
    @abstractmethod
    def adapters(self) -> tuple[str, ...]:
        """The adapters the game trains (``alpha``, ``beta``: :mod:`agon_lightning.game.names`)."""

    @abstractmethod
    def roles(self, step: int) -> tuple[str, str]:
        """``(drafter, second stage)`` adapters at ``step``: who drafts (and may sample ahead)."""

    @abstractmethod
    def play(self, player: Any, problems: list[Problem]) -> StepRecord:
        """Sample, judge and pay every role for one step (no gradients); each role's ``rewards`` set."""


def draft_stage(player: Any, problems: list[Problem], drafter: str) -> tuple[StepRecord, RoleOutcome]:
    """The first stage every built-in game plays: ``drafter``'s N drafts of each problem, verified."""
    n = player.grpo.num_generations
    if (
        player.adapter_history is not None
    ):  # the weights at this version: later references and rivals read them
        player.adapter_history.keep(player.policy, player.adapter_names, player.policy_version)
    drafts, version = player.drafts.drafts(
        player.agon_step, problems, drafter, player.policy_version,
        lambda: player.sample(drafter, [player.prompts.draft_prompt(player.tokenizer, p) for p in problems], n),
    )  # fmt: skip
    verdicts = player.verifier.verify_batch(drafts.texts, [p for p in problems for _ in range(n)])
    draft = outcome_of(drafts, verdicts)
    player.tell_if_cut(draft)
    record = StepRecord(
        player.agon_step, problems,
        RoleRollout(drafter, drafts, verdicts, draft.correct, versions=rows_of(version, len(drafts))),
    )  # fmt: skip
    return record, draft


class GRPOGame(Game):
    """One adapter drafts, graded on its own drafts: vanilla GRPO."""

    kind = "grpo"

    @property
    def adapters(self) -> tuple[str, ...]:
        return (ALPHA,)

    def roles(self, step: int) -> tuple[str, str]:
        return roles_for_step(step, "fixed")

    def play(self, player: Any, problems: list[Problem]) -> StepRecord:
        record, draft = draft_stage(player, problems, self.roles(player.agon_step)[0])
        rewards = player.reward(Outcomes(draft))
        record.draft.rewards, record.reward_terms = rewards.draft, rewards.metrics()
        return record


class AgonGame(Game):
    """Drafter and challenger: the challenger answers each draft after reading its summary.

    Args:
        schedule: Who drafts: ``rotate`` (swap every step), ``fixed`` (alpha always), ``self_play``
            (one adapter in both roles).
        pairing: Which draft each challenge reads and is graded against: ``per_rollout`` or
            ``shared`` (see :func:`~agon_lightning.training.schedule.opponent_rows`).
    """

    kind = "agon"

    def __init__(self, schedule: str = "rotate", pairing: str = "per_rollout") -> None:
        if schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {SCHEDULES}, got {schedule!r}")
        if pairing not in PAIRINGS:
            raise ValueError(f"pairing must be one of {PAIRINGS}, got {pairing!r}")
        self.schedule = schedule
        self.pairing = pairing

    @property
    def adapters(self) -> tuple[str, ...]:
        return (ALPHA,) if self.schedule == "self_play" else ADAPTERS

    def roles(self, step: int) -> tuple[str, str]:
        return roles_for_step(step, self.schedule)

    def play(self, player: Any, problems: list[Problem]) -> StepRecord:
        n = player.grpo.num_generations
        drafter, challenger = self.roles(player.agon_step)
        record, draft = draft_stage(player, problems, drafter)
        grouped = [p for p in problems for _ in range(n)]
        # Challenge i reads (and is graded against) draft rows[i]; rows of a group share a problem.
        rows = opponent_rows(len(problems), n, self.pairing)
        read, paired = (
            record.draft.rollouts,
            draft,
        )  # what the challenge reads: the drafter's, or a past drafter's
        rival = player.league.draw(player.agon_step, drafter, player.policy_version, player.adapter_history)
        if rival is not None:
            record.rival_drafts = sample_rival(player, rival, player.adapter_history, problems)
            read, paired = record.rival_drafts.rollouts, record.rival_drafts.outcome
        summaries, prompts = challenge_prompts(player, grouped, read)
        record.summaries = [summaries[i] for i in rows]
        challenges = player.sample(challenger, [prompts[i] for i in rows], 1, greedy=False)
        challenge_verdicts = player.verifier.verify_batch(challenges.texts, grouped)
        outcomes = Outcomes(
            draft,
            outcome_of(challenges, challenge_verdicts),
            None if self.pairing == "per_rollout" and rival is None else paired.select(rows),
        )
        player.tell_if_cut(outcomes.challenge)
        rewards = player.reward(outcomes)
        record.draft.rewards, record.reward_terms = rewards.draft, rewards.metrics()
        record.challenge = RoleRollout(
            challenger, challenges, challenge_verdicts, rewards.challenge, role="challenger",
            versions=rows_of(player.policy_version, len(challenges)),
        )  # fmt: skip
        record.opponents = None if self.pairing == "per_rollout" else rows
        record.league = player.league.played(
            rival, outcomes.challenge.correct, paired.correct[rows], player.policy_version
        )
        return record


def as_game(game: Game | str, schedule: str, pairing: str) -> Game:
    """The module's ``game``: a :class:`Game`, or the names ``agon`` / ``grpo`` with the module's
    ``schedule`` and ``pairing`` (configs written before the game was a component).

    Raises:
        ValueError: an unknown name or setting, or settings given twice (naming the values).
    """
    if isinstance(game, Game):
        if (schedule, pairing) != ("rotate", "per_rollout"):
            raise ValueError(
                f"model.schedule={schedule!r} and model.pairing={pairing!r} are settings of the game; with "
                f"model.game={type(game).__name__}, set them on the game (model.game.init_args)"
            )
        return game
    if game not in ("agon", "grpo"):
        raise ValueError(f"game must be 'agon', 'grpo' or a Game, got {game!r}")
    if game == "grpo":
        if pairing not in PAIRINGS:
            raise ValueError(f"pairing must be one of {PAIRINGS}, got {pairing!r}")
        if schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {SCHEDULES}, got {schedule!r}")
        if pairing != "per_rollout":
            raise ValueError(
                f"pairing={pairing!r} pairs challenges with drafts, but game='grpo' has no challenger"
            )
        return GRPOGame()
    return AgonGame(schedule, pairing)

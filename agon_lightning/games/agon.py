"""The games this project began with: Agon (drafter and challenger) and vanilla GRPO (one adapter drafting).

- :class:`AgonGame` (``agon``): the drafter samples N drafts; the challenger answers each after
  reading its summary; roles by ``schedule`` (``rotate``, ``fixed``, ``self_play``), opponents by
  ``pairing`` (``per_rollout``, ``shared``). Cooperative exchange, the hidden summary, the margin
  and the tiebreak are settings of its reward, summarizer and prompts. At a step the league
  plays, the challenger reads a past drafter's drafts (``model.league``). Its own metrics: who
  drafted (``train/drafter``), and the conversions and regressions of the exchange.
- :class:`GRPOGame` (``grpo``): one adapter drafts; GRPO on the same code path.
"""

from __future__ import annotations

import torch
from torch import Tensor

from agon_lightning.game.names import ADAPTERS, ALPHA
from agon_lightning.game.rewards import Outcomes
from agon_lightning.game.types import Problem
from agon_lightning.games.base import Game, draft_stage
from agon_lightning.games.player import Player
from agon_lightning.games.records import StepRecord
from agon_lightning.games.schedule import PAIRINGS, SCHEDULES, opponent_rows, roles_for_step
from agon_lightning.games.spec import GameSpec

DRAFTER, CHALLENGER = "drafter", "challenger"
EXCHANGE = ("train/conversion_rate", "train/regression_rate")


class GRPOGame(Game):
    """One adapter drafts, graded on its own drafts: vanilla GRPO."""

    @property
    def spec(self) -> GameSpec:
        return GameSpec(policies=(ALPHA,), roles=(DRAFTER,), first_stage=DRAFTER, answers=(DRAFTER,))

    def play(self, player: Player, problems: list[Problem]) -> StepRecord:
        record, draft = draft_stage(player, problems, ALPHA)
        rewards = player.pay(Outcomes(draft))
        record.draft.rewards, record.reward_terms = rewards.draft, rewards.metrics()
        return record


class AgonGame(Game):
    """Drafter and challenger: the challenger answers each draft after reading its summary.

    Args:
        schedule: Who drafts: ``rotate`` (swap every step), ``fixed`` (alpha always), ``self_play``
            (one adapter in both roles).
        pairing: Which draft each challenge reads and is graded against: ``per_rollout`` or
            ``shared`` (see :func:`~agon_lightning.games.schedule.opponent_rows`).
    """

    def __init__(self, schedule: str = "rotate", pairing: str = "per_rollout") -> None:
        if schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {SCHEDULES}, got {schedule!r}")
        if pairing not in PAIRINGS:
            raise ValueError(f"pairing must be one of {PAIRINGS}, got {pairing!r}")
        self.schedule = schedule
        self.pairing = pairing

    @property
    def spec(self) -> GameSpec:
        return GameSpec(
            policies=(ALPHA,) if self.schedule == "self_play" else ADAPTERS,
            roles=(DRAFTER, CHALLENGER),
            first_stage=DRAFTER,
            rivals={CHALLENGER: DRAFTER, DRAFTER: CHALLENGER},
            answers=(DRAFTER, CHALLENGER),
            deploy="cascade",
            metrics=("train/drafter", *EXCHANGE),
        )

    def cast(self, step: int) -> dict[str, str]:
        drafter, challenger = roles_for_step(step, self.schedule)
        return {DRAFTER: drafter, CHALLENGER: challenger}

    def play(self, player: Player, problems: list[Problem]) -> StepRecord:
        n = player.num_generations
        cast = self.cast(player.step)
        drafter, challenger = cast[DRAFTER], cast[CHALLENGER]
        record, draft = draft_stage(player, problems, drafter)
        grouped = [p for p in problems for _ in range(n)]
        # Challenge i reads (and is graded against) draft rows[i]; rows of a group share a problem.
        rows = opponent_rows(len(problems), n, self.pairing)
        read, paired = (
            record.draft.rollouts,
            draft,
        )  # what the challenge reads: the drafter's, or a past drafter's
        rival = player.rival(CHALLENGER, drafter)
        if rival is not None:
            record.rival_drafts = player.draft(rival.slot, problems, DRAFTER)
            record.rival_drafts.versions = torch.full_like(record.rival_drafts.versions, rival.version)
            read, paired = record.rival_drafts.rollouts, record.rival_drafts.outcome
        summaries, prompts = player.read(grouped, read)
        record.summaries = [summaries[i] for i in rows]
        challenges = player.sample(challenger, [prompts[i] for i in rows], 1, greedy=False)
        challenge_verdicts = player.verify(challenges.texts, grouped)
        challenge = player.role(
            CHALLENGER, challenger, challenges, challenge_verdicts, torch.zeros(len(challenges))
        )
        outcomes = Outcomes(
            draft,
            challenge.outcome,
            None if self.pairing == "per_rollout" and rival is None else paired.select(rows),
        )
        rewards = player.pay(outcomes)
        record.draft.rewards, record.reward_terms = rewards.draft, rewards.metrics()
        challenge.rewards = rewards.challenge
        record.challenge = challenge
        record.opponents = None if self.pairing == "per_rollout" else rows
        player.rival_played(rival, outcomes.challenge.correct, paired.correct[rows])
        return record

    def metrics(self, record: StepRecord) -> dict[str, float]:
        return {"train/drafter": float(record.draft.adapter != ALPHA)}

    def counts(self, record: StepRecord) -> Tensor:
        return exchange_counts(record).double()

    def count_metrics(self, sums: Tensor) -> dict[str, float]:
        return exchange_rates(sums)


def exchange_counts(record: StepRecord) -> Tensor:
    """``[converted, wrong drafts, regressed, right drafts]`` of a step (zeros without a challenger)."""
    if record.challenge is None:
        return torch.zeros(4)
    a, b = record.opponent_correct, record.challenge.correct
    wrong, right = a == 0, a == 1
    return torch.stack([(b[wrong] == 1).sum(), wrong.sum(), (b[right] == 0).sum(), right.sum()]).float()


def exchange_rates(counts: Tensor) -> dict[str, float]:
    """P(challenger right | draft wrong) and P(challenger wrong | draft right), each only where defined.

    A step with no wrong draft has no conversion rate (not a rate of 0): the key is left out.
    """
    converted, wrong, regressed, right = (float(x) for x in counts)
    rates = {}
    if wrong > 0:
        rates["train/conversion_rate"] = converted / wrong
    if right > 0:
        rates["train/regression_rate"] = regressed / right
    return rates


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

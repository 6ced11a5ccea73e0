"""Debate with a judge (after Irving et al., "AI safety via debate").

Two debaters answer the same problem in turns, each reading the other's last argument, and a
judge who reads only their final arguments gives the answer. A debater wins when the judge
adopts its answer and that answer is right, so each is pushed to make the right answer the
convincing one — and to expose a wrong one — for a reader who could not easily solve the problem
alone. The judge's answer is the one the game deploys.

Each round is a turn of both debaters: in round 1 debater A answers the plain problem (N samples:
the first stage) and debater B answers each of A's answers once after reading its summary (as
Agon's challenger does); in each later round A answers again after reading B's last summary, then
B after reading A's. Every round's rows line up with A's first N answers of each problem, so
every role's rows form one group of N per problem.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import Tensor

from agon_lightning.game.names import BASE
from agon_lightning.game.prompts import fill
from agon_lightning.game.text import extract_answer
from agon_lightning.game.types import Problem
from agon_lightning.games.base import Game
from agon_lightning.games.player import Player
from agon_lightning.games.records import RoleRollout, StepRecord, correct_of
from agon_lightning.games.spec import GameSpec
from agon_lightning.rollout.base import RolloutBatch
from agon_lightning.verifiers.exact import normalize_answer

DEBATER_A, DEBATER_B, JUDGE = "debater_a", "debater_b", "judge"
JUDGES = ("adapter", BASE)
METRICS = ("debate/judge_accuracy", "debate/agreement", "debate/judge_sided_a")
DEFAULT_ARGUMENTS = "Debater A argues:\n{a}\n\nDebater B argues:\n{b}"


# ---------------------------------------------------------------------- the math
def same_answers(texts: list[str], others: list[str]) -> Tensor:
    """``[B]`` 1 where both completions give an answer (``<answer>`` or ``\\boxed{}``) and they are equal
    after :func:`~agon_lightning.verifiers.exact.normalize_answer`; no answer equals nothing."""
    keys = [
        [None if (x := extract_answer(t)) is None else normalize_answer(x) for t in ts]
        for ts in (texts, others)
    ]
    return torch.tensor([x is not None and x == y for x, y in zip(*keys)], dtype=torch.float32)


def debater_rewards(turn_correct: Tensor, judge_correct: Tensor, sided: Tensor) -> Tensor:
    """``[B]`` a debater's pay for one turn: its correctness, plus 1 when the judge adopted the
    debater's final answer and it is right (``sided``: the judge's answer equals the debater's final one)."""
    return turn_correct.float() + judge_correct.float() * sided.float()


def debate_metrics(judge_correct: Tensor, debaters_agree: Tensor, sided_a: Tensor) -> dict[str, float]:
    """The game's metrics: shares of the step's debates (each defined every step)."""
    return {
        "debate/judge_accuracy": float(judge_correct.float().mean()),
        "debate/agreement": float(debaters_agree.float().mean()),
        "debate/judge_sided_a": float(sided_a.float().mean()),
    }


# ---------------------------------------------------------------------- the game
@dataclass
class Transcript:
    """One debate's turns, row by row: ``a[r]`` and ``b[r]`` are round r+1's, ``judge`` the verdicts.

    Attributes:
        a: Debater A's turns, one batch per round (round 1: the opening answers).
        b: Debater B's turns, one batch per round.
        judge: The judge's completions.
        summaries: What debater B read in round 1 (A's opening answers summarised).
    """

    a: list[RolloutBatch]
    b: list[RolloutBatch]
    judge: RolloutBatch
    summaries: list[str]


class DebateGame(Game):
    """Two debaters argue for ``rounds`` rounds; a judge reads both final arguments and answers.

    Round 1: debater A drafts N answers of each problem (``player.draft``: the first stage, which
    ``rollout.max_staleness`` may sample a step ahead); debater B answers each once after reading
    its summary. Each later round: A answers after reading B's last summary, then B after reading
    A's. Then the judge reads both final summaries (``arguments`` in the ``{summary}`` of the
    challenge prompt) and gives the final answer, verified against the problem's answer.

    Rewards (c: correctness against the problem's answer; J the judge's answer): each debater's
    turn ``c(turn) + c(J)·[J = the debater's final answer]``; the judge ``c(J)``. The reward
    component (``model.reward``) is not read. Answers are compared as extracted (``<answer>`` or
    ``\\boxed{}``) and normalised; an answer missing equals nothing.

    At a step the league plays (``model.league``), debater B faces a past debater A in round 1: the
    past A's opening answers (sampled through its league slot, not trained) open the debate in
    place of A's own, which A still trains on, paid their correctness alone (they took no part).

    Spec: policies and roles ``debater_a``, ``debater_b`` and ``judge`` (with ``judge: base``, only
    the debaters: the frozen base judges, untrained); rivals ``debater_b`` ↔ ``debater_a``; every
    role answers the problem; deployed as its own graph (:meth:`answer`: the debate played greedily,
    the judge's answer).

    Args:
        rounds: Rounds of the debate (>= 1); a round is a turn of each debater.
        judge: ``adapter`` (a trained judge) or ``base`` (the frozen base judges).
        arguments: What the judge reads in the ``{summary}`` of the challenge prompt: ``{a}`` and
            ``{b}`` are replaced by the debaters' final summaries.

    Raises:
        ValueError: ``rounds`` < 1, an unknown ``judge``, or ``arguments`` without ``{a}`` or ``{b}``.
    """

    def __init__(
        self,
        rounds: int = 2,
        judge: Literal["adapter", "base"] = "adapter",
        arguments: str = DEFAULT_ARGUMENTS,
    ) -> None:
        if rounds < 1:
            raise ValueError(f"DebateGame.rounds must be >= 1, got {rounds}")
        if judge not in JUDGES:
            raise ValueError(f"DebateGame.judge must be one of {JUDGES}, got {judge!r}")
        for key in ("{a}", "{b}"):
            if key not in arguments:
                raise ValueError(f"DebateGame.arguments must contain '{key}', got {arguments!r}")
        self.rounds = rounds
        self.judge = judge
        self.arguments = arguments

    @property
    def judge_adapter(self) -> str | None:
        """The adapter that judges (``None``: the frozen base)."""
        return JUDGE if self.judge == "adapter" else None

    @property
    def spec(self) -> GameSpec:
        roles = (DEBATER_A, DEBATER_B) + ((JUDGE,) if self.judge_adapter else ())
        return GameSpec(
            policies=roles,
            roles=roles,
            first_stage=DEBATER_A,
            rivals={DEBATER_B: DEBATER_A, DEBATER_A: DEBATER_B},
            answers=roles,
            deploy="graph",
            metrics=METRICS,
        )

    def play(self, player: Player, problems: list[Problem]) -> StepRecord:
        grouped = [p for p in problems for _ in range(player.num_generations)]
        opening = player.draft(DEBATER_A, problems, role=DEBATER_A)
        record = StepRecord(player.step, problems, opening)
        heard, rival = opening, player.rival(DEBATER_B, DEBATER_A)
        if rival is not None:  # debater B faces a past debater A in round 1
            heard = record.rival_drafts = player.draft(rival.slot, problems, role=DEBATER_A)
            heard.versions = torch.full_like(heard.versions, rival.version)
        debate = self.debate(player, grouped, heard.rollouts, greedy=False)
        record.summaries = debate.summaries
        a = [opening] + [self.turn(player, DEBATER_A, t, grouped) for t in debate.a[1:]]
        b = [self.turn(player, DEBATER_B, t, grouped) for t in debate.b]
        judged = player.verify(debate.judge.texts, grouped)
        judge_correct = correct_of(judged)
        # A's side of the debate is the past A's at a league step of one round
        final_a, final_b = debate.a[-1].texts, debate.b[-1].texts
        sided_a, sided_b = (same_answers(debate.judge.texts, final) for final in (final_a, final_b))
        for i, turn in enumerate(a):
            took_part = i > 0 or rival is None  # at a league step A's own opening is not in the debate
            turn.rewards = debater_rewards(turn.correct, judge_correct, sided_a * took_part)
        for turn in b:
            turn.rewards = debater_rewards(turn.correct, judge_correct, sided_b)
        record.challenge = b[0]
        record.others = [t for pair in zip(a[1:], b[1:]) for t in pair]
        if self.judge_adapter is not None:
            record.others.append(player.role(JUDGE, JUDGE, debate.judge, judged, judge_correct.clone()))
        record.reward_terms = debate_metrics(judge_correct, same_answers(final_a, final_b), sided_a)
        player.rival_played(rival, b[0].correct, heard.correct)
        return record

    def turn(self, player: Player, role: str, turn: RolloutBatch, problems: list[Problem]) -> RoleRollout:
        """A debater's turn as its role's rollouts, verified (rewards set once the judge has spoken)."""
        verdicts = player.verify(turn.texts, problems)
        return player.role(role, role, turn, verdicts, torch.zeros(len(turn)))

    def debate(self, player: Any, problems: list[Problem], opening: RolloutBatch, greedy: bool) -> Transcript:
        """The rounds after A's opening, then the judge; row i is ``problems[i]``'s debate.

        ``player`` needs only what deployment offers (``sample``, ``read``, ``prompts``, ``tokenizer``).
        """
        summaries, reply = self.reply(player, DEBATER_B, problems, opening, greedy)
        a, b = [opening], [reply]
        for _ in range(1, self.rounds):
            a.append(self.reply(player, DEBATER_A, problems, b[-1], greedy)[1])
            b.append(self.reply(player, DEBATER_B, problems, a[-1], greedy)[1])
        final_a, _ = player.read(problems, a[-1])
        final_b, _ = player.read(problems, b[-1])
        prompts = [
            player.prompts.challenge_prompt(player.tokenizer, p, fill(self.arguments, a=x, b=y))
            for p, x, y in zip(problems, final_a, final_b)
        ]
        return Transcript(a, b, player.sample(self.judge_adapter, prompts, 1, greedy), summaries)

    def reply(
        self, player: Any, debater: str, problems: list[Problem], heard: RolloutBatch, greedy: bool
    ) -> tuple[list[str], RolloutBatch]:
        """``(summaries read, turns)``: ``debater`` answers each row after reading the summary of ``heard``'s."""
        summaries, prompts = player.read(problems, heard)
        return summaries, player.sample(debater, prompts, 1, greedy)

    def answer(self, player: Any, problems: list[Problem]) -> RolloutBatch:
        """The deployed debate: played greedily, one per problem; the judge's completions."""
        prompts = [player.prompts.draft_prompt(player.tokenizer, p) for p in problems]
        opening = player.sample(DEBATER_A, prompts, 1, greedy=True)
        return self.debate(player, problems, opening, greedy=True).judge

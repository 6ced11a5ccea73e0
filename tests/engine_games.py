"""Games written as a user would, from the tutorial, for the composition tests: each exercises a path
the shipped games do not (its own first stage, two answering roles without a declared rival, a
second role that judges rather than answers)."""

from __future__ import annotations

import torch

from agon_lightning.game.rewards import Outcomes
from agon_lightning.game.text import extract_answer
from agon_lightning.game.types import Verdict
from agon_lightning.games import Game, GameSpec, StepRecord


class OwnFirstStageGame(Game):
    """Agon's exchange, but the first stage is sampled by the game itself (not ``player.draft``)."""

    spec = GameSpec(
        policies=("alpha", "beta"), roles=("opener", "responder"), rivals={"responder": "opener"},
        answers=("opener", "responder"),
    )  # fmt: skip

    def play(self, player, problems):
        n = player.num_generations
        grouped = [p for p in problems for _ in range(n)]
        prompts = [player.prompts.draft_prompt(player.tokenizer, p) for p in problems]
        opened = player.sample("alpha", prompts, n)
        verdicts = player.verify(opened.texts, grouped)
        opener = player.role("opener", "alpha", opened, verdicts, torch.zeros(len(opened)))
        rival = player.rival("responder", "alpha")
        read = opener
        if rival is not None:
            past = player.sample(rival.slot, prompts, n)
            read = player.role(
                "opener", "alpha", past, player.verify(past.texts, grouped), torch.zeros(len(past))
            )
        _, challenge_prompts = player.read(grouped, read.rollouts)
        answered = player.sample("beta", challenge_prompts, 1)
        responder = player.role(
            "responder", "beta", answered, player.verify(answered.texts, grouped), torch.zeros(len(answered))
        )
        rewards = player.pay(Outcomes(opener.outcome, responder.outcome, read.outcome))
        opener.rewards, responder.rewards = rewards.draft, rewards.challenge
        player.rival_played(rival, responder.correct, read.correct)
        return StepRecord(player.step, problems, opener, challenge=responder, reward_terms=rewards.metrics())


class DebateNoRivalsGame(Game):
    """Both adapters answer, the second after reading the first; an upset bonus. It declares no rivals."""

    spec = GameSpec(
        policies=("alpha", "beta"), roles=("drafter", "challenger"), first_stage="drafter",
        answers=("drafter", "challenger"), deploy="cascade",
    )  # fmt: skip

    def play(self, player, problems):
        grouped = [p for p in problems for _ in range(player.num_generations)]
        first = player.draft("alpha", problems)
        _, prompts = player.read(grouped, first.rollouts)
        answers = player.sample("beta", prompts, 1)
        verdicts = player.verify(answers.texts, grouped)
        b = torch.tensor([v.correct for v in verdicts], dtype=torch.float32)
        second = player.role("challenger", "beta", answers, verdicts, b + b * (1 - first.correct))
        return StepRecord(player.step, problems, first, challenge=second)


class DebateIgnoringRivalsGame(DebateNoRivalsGame):
    """The same game, declaring a rival it never asks the league for."""

    spec = GameSpec(
        policies=("alpha", "beta"), roles=("drafter", "challenger"), first_stage="drafter",
        rivals={"challenger": "drafter"}, answers=("drafter", "challenger"), deploy="cascade",
    )  # fmt: skip


class JudgeGame(Game):
    """The old tutorial's prover–verifier: the second role says yes or no; only the first answers the problem."""

    spec = GameSpec(
        policies=("alpha", "beta"), roles=("prover", "verifier"), first_stage="prover", answers=("prover",)
    )

    def play(self, player, problems):
        grouped = [p for p in problems for _ in range(player.num_generations)]
        solutions = player.draft("alpha", problems, role="prover")
        prompts = [
            player.prompts.challenge_prompt(player.tokenizer, p, t)
            for p, t in zip(grouped, solutions.rollouts.texts)
        ]
        judged = player.sample("beta", prompts, 1)
        accepted = torch.tensor([extract_answer(t) == "yes" for t in judged.texts], dtype=torch.float32)
        right = (accepted == solutions.correct).float()
        solutions.rewards = solutions.correct * (1 + accepted)
        verifier = player.role("verifier", "beta", judged, [Verdict(correct=bool(x)) for x in right], right)
        return StepRecord(player.step, problems, solutions, challenge=verifier)


class PanelGame(Game):
    """Three adapters: ``a`` drafts, ``b`` answers after reading a's summary, ``judge`` answers after reading b's.

    Each is paid its own correctness; the judge's answer is the deployed one (its own graph).
    """

    spec = GameSpec(
        policies=("a", "b", "judge"), roles=("first", "second", "judge"), first_stage="first",
        rivals={"second": "first"}, answers=("first", "second", "judge"), deploy="graph",
    )  # fmt: skip

    def _after(self, player, adapter, problems, rollouts, greedy=False):
        _, prompts = player.read(problems, rollouts)
        return player.sample(adapter, prompts, 1, greedy=greedy)

    def play(self, player, problems):
        grouped = [p for p in problems for _ in range(player.num_generations)]
        first = player.draft("a", problems, role="first")
        rival = player.rival("second", "a")
        read = first if rival is None else player.draft(rival.slot, problems, role="first")
        roles = []
        rollouts = read.rollouts
        for role, adapter in (("second", "b"), ("judge", "judge")):
            rollouts = self._after(player, adapter, grouped, rollouts)
            verdicts = player.verify(rollouts.texts, grouped)
            c = torch.tensor([v.correct for v in verdicts], dtype=torch.float32)
            roles.append(player.role(role, adapter, rollouts, verdicts, c))
        player.rival_played(rival, roles[0].correct, read.correct)
        return StepRecord(player.step, problems, first, challenge=roles[0], others=roles[1:])

    def answer(self, player, problems):
        prompts = [player.prompts.draft_prompt(player.tokenizer, p) for p in problems]
        drafts = player.sample("a", prompts, 1, greedy=True)
        return self._after(player, "judge", problems, self._after(player, "b", problems, drafts, True), True)

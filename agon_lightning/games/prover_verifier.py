"""The prover–verifier game (after Kirchner et al., "Prover-verifier games improve legibility").

A strong solver's reasoning is worth more when a weaker reader can check it. The game trains
for that directly: the prover solves each problem N times; the verifier reads each whole
solution, reasoning trace included, and says whether it is right. The prover is paid for right
solutions, and more for right ones the verifier accepts, so it learns to write what a reader can
check; the verifier is paid for judging right, so it learns to tell a right solution from a
convincing wrong one. The share of wrong solutions the verifier accepts (``pv/accepted_wrong``)
is the sneaky rate the paper tracks.

The paper trains each round's verifier on the solutions of the provers of every earlier round;
here the league (``model.league``) does that: at a step it plays, the verifier trains on its
judgements of a past prover's solutions.
"""

from __future__ import annotations

import torch
from torch import Tensor

from agon_lightning.game.prompts import fill
from agon_lightning.game.text import extract_answer
from agon_lightning.game.types import Problem, Verdict
from agon_lightning.games.base import Game
from agon_lightning.games.player import Player
from agon_lightning.games.records import StepRecord
from agon_lightning.games.spec import GameSpec
from agon_lightning.rollout.base import RolloutBatch

PROVER, VERIFIER = "prover", "verifier"
METRICS = ("pv/accepted", "pv/judged_right", "pv/accepted_wrong")
DEFAULT_ASK = (
    "A solution to check:\n{solution}\n\n"
    "Is this solution right? Answer <answer>yes</answer> or <answer>no</answer>."
)


# ---------------------------------------------------------------------- the math
def judgements(texts: list[str]) -> tuple[Tensor, Tensor]:
    """``(accepted, rejected)``, each ``[B]`` 0/1: the verifier's ``<answer>`` said yes, or said no.

    Case and surrounding spaces are ignored; any other answer, or none, is neither.
    """
    said = [(extract_answer(t) or "").strip().lower() for t in texts]
    return (
        torch.tensor([s == "yes" for s in said], dtype=torch.float32),
        torch.tensor([s == "no" for s in said], dtype=torch.float32),
    )


def prover_rewards(correct: Tensor, accepted: Tensor, acceptance_bonus: float) -> Tensor:
    """``[B]`` the prover's pay ``c·(1 + acceptance_bonus·accepted)``: nothing for a wrong solution."""
    return correct.float() * (1 + acceptance_bonus * accepted.float())


def judged_right(correct: Tensor, accepted: Tensor, rejected: Tensor) -> Tensor:
    """``[B]`` 1 where the verifier accepted a right solution or rejected a wrong one (no judgement: 0)."""
    c = correct.float()
    return accepted.float() * c + rejected.float() * (1 - c)


def pv_metrics(correct: Tensor, accepted: Tensor, rejected: Tensor) -> dict[str, float]:
    """The game's metrics over one set of judged solutions: shares of all of them (each defined every step)."""
    c = correct.float()
    return {
        "pv/accepted": float(accepted.mean()),
        "pv/judged_right": float(judged_right(c, accepted, rejected).mean()),
        "pv/accepted_wrong": float((accepted * (1 - c)).mean()),
    }


def reasons(accepted: Tensor, rejected: Tensor, right: Tensor) -> list[str]:
    """Each judgement's reason, as a verdict names it: ``ok``, ``wrong_judgement`` or ``no_judgement``."""
    return [
        "ok" if r else "wrong_judgement" if a or n else "no_judgement"
        for a, n, r in zip(accepted.tolist(), rejected.tolist(), right.tolist())
    ]


# ---------------------------------------------------------------------- the game
class ProverVerifierGame(Game):
    """The prover solves; the verifier reads each whole solution and says whether it is right.

    Each step the prover drafts N solutions of each problem (``player.draft``: the first stage,
    which ``rollout.max_staleness`` may sample a step ahead), verified against the problem's
    answer: c. The verifier reads each one whole, in the challenge prompt (``model.prompts.challenge``,
    its ``{summary}`` being ``ask`` filled with the solution), and answers ``<answer>yes</answer>``
    or ``<answer>no</answer>``. The prover is paid ``c·(1 + acceptance_bonus·accepted)``; the
    verifier 1 when it judged right (yes to a right solution, no to a wrong one), else 0. The
    reward component (``model.reward``) is not read: these are the game's own rewards.

    At a step the league plays (``model.league``), the verifier trains on its judgements of a
    past prover's solutions (sampled through the prover's league slot, not trained); it judges the
    prover's own solutions too, to pay them, without training on those judgements. The ``pv/``
    metrics always describe the verifier's judgements of the prover's own solutions.

    Spec: policies and roles ``prover`` and ``verifier``; rivals ``verifier`` → ``prover``; only
    the prover answers the problem; each policy deploys alone (``single``).

    Args:
        acceptance_bonus: What an accepted right solution earns the prover on top of its 1 (>= 0;
            0: the prover is paid for correctness alone).
        ask: What the verifier reads in the ``{summary}`` of the challenge prompt; ``{solution}`` is
            replaced by the whole solution.

    Raises:
        ValueError: ``acceptance_bonus`` < 0, or ``ask`` without ``{solution}``.
    """

    def __init__(self, acceptance_bonus: float = 1.0, ask: str = DEFAULT_ASK) -> None:
        if acceptance_bonus < 0:
            raise ValueError(f"ProverVerifierGame.acceptance_bonus must be >= 0, got {acceptance_bonus}")
        if "{solution}" not in ask:
            raise ValueError(f"ProverVerifierGame.ask must contain '{{solution}}', got {ask!r}")
        self.acceptance_bonus = acceptance_bonus
        self.ask = ask

    @property
    def spec(self) -> GameSpec:
        return GameSpec(
            policies=(PROVER, VERIFIER),
            roles=(PROVER, VERIFIER),
            first_stage=PROVER,
            rivals={VERIFIER: PROVER},
            answers=(PROVER,),
            deploy="single",
            metrics=METRICS,
        )

    def play(self, player: Player, problems: list[Problem]) -> StepRecord:
        cast = self.cast(player.step)
        prover, verifier = cast[PROVER], cast[VERIFIER]
        solutions = player.draft(prover, problems, role=PROVER)
        grouped = [p for p in problems for _ in range(player.num_generations)]
        record = StepRecord(player.step, problems, solutions)
        own = self.judge(player, verifier, grouped, solutions.rollouts)
        accepted, rejected = judgements(own.texts)
        solutions.rewards = prover_rewards(solutions.correct, accepted, self.acceptance_bonus)
        record.reward_terms = pv_metrics(solutions.correct, accepted, rejected)
        judged, read, rival = own, solutions, player.rival(VERIFIER, prover)
        if rival is not None:  # the verifier trains on a past prover's solutions
            read = record.rival_drafts = player.draft(rival.slot, problems, role=PROVER)
            read.versions = torch.full_like(read.versions, rival.version)
            judged = self.judge(player, verifier, grouped, read.rollouts)
            accepted, rejected = judgements(judged.texts)
        right = judged_right(read.correct, accepted, rejected)
        verdicts = [
            Verdict(correct=bool(r), score=float(r), reason=why, extracted=extract_answer(t))
            for r, t, why in zip(right.tolist(), judged.texts, reasons(accepted, rejected, right))
        ]
        record.challenge = player.role(VERIFIER, verifier, judged, verdicts, right)
        player.rival_played(rival, right, read.correct)
        return record

    def judge(
        self, player: Player, verifier: str, problems: list[Problem], solutions: RolloutBatch
    ) -> RolloutBatch:
        """The verifier's judgement of each solution (one per row; ``problems[i]`` is row i's)."""
        prompts = [
            player.prompts.challenge_prompt(player.tokenizer, p, fill(self.ask, solution=text))
            for p, text in zip(problems, solutions.texts)
        ]
        return player.sample(verifier, prompts, 1)

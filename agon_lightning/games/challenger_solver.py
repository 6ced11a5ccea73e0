"""Challenger and solver: a game that needs no labels (after R-Zero, "Self-Evolving Reasoning LLM from Zero Data").

Each step, the challenger reads each seed problem of the batch and poses N new problems like it;
the solver answers each posed problem m times. The solver's majority answer is the pseudo-label:
the solver is paid 1 for agreeing with it (self-consistency), and the challenger is paid for the
solver's uncertainty, most when half of its answers agree (``1 − 2·|p̂ − ½|``): a problem the
solver always gets the same answer to teaches it nothing, and neither does one it answers at random.
No answer of the data is read: the seed problems only show the challenger what kind of problem
to pose.

The challenger writes its problem inside ``<question>…</question>`` after its reasoning trace
(:func:`posed_question`). A completion with no such block earns it 0; the solver then answers
the seed problem instead in those rows, so every step has the same rows (the challenger's
verdict says ``no_question``, the solver's reasons end in ``(seed problem)``).

R-Zero's repetition penalty (posed problems too alike within a batch earn less) is not applied.
"""

from __future__ import annotations

import re

import torch
from torch import Tensor

from agon_lightning.game.prompts import fill, with_last_user_content
from agon_lightning.game.text import after_thinking, extract_answer
from agon_lightning.game.types import Problem, Verdict
from agon_lightning.games.base import Game
from agon_lightning.games.player import Player
from agon_lightning.games.records import StepRecord
from agon_lightning.games.spec import GameSpec
from agon_lightning.rollout.pipeline import majority_vote
from agon_lightning.verifiers.exact import normalize_answer

CHALLENGER, SOLVER = "challenger", "solver"
QUESTION = re.compile(r"<question>(.*?)</question>", re.DOTALL)
DEFAULT_POSE = (
    "Here is a problem:\n{question}\n\n"
    "Write one new problem of the same kind, with a single short answer, that would be hard for a strong "
    "solver. Do not solve it. Write the new problem inside <question></question>."
)
METRICS = ("cs/posed_parse_rate", "cs/solver_agreement", "cs/challenger_reward")


# ---------------------------------------------------------------------------------------------
# The math: pure functions of the texts and the answers
# ---------------------------------------------------------------------------------------------
def posed_question(text: str) -> str | None:
    """The problem a challenger's completion poses: its last ``<question>…</question>`` block after the trace.

    Returns ``None`` for a completion cut off inside its reasoning trace, or with no block, or
    whose last block is blank.
    """
    tail = after_thinking(text)
    blocks = QUESTION.findall(tail) if tail is not None else []
    question = blocks[-1].strip() if blocks else ""
    return question or None


def self_consistency(answers: list[str | None], group_size: int) -> tuple[Tensor, Tensor]:
    """``(agrees [G·m], p̂ [G])``: each answer's agreement with its group's majority, and the share that agrees.

    Answers are compared as :func:`~agon_lightning.rollout.pipeline.majority_vote` counts them
    (normalised; ``None`` does not vote and never agrees). A group where no answer votes has no
    majority: nothing agrees and p̂ is 0.
    """
    if group_size < 1 or len(answers) % group_size:
        raise ValueError(f"{len(answers)} answers do not split into groups of {group_size}")
    agrees = []
    for start in range(0, len(answers), group_size):
        group = answers[start : start + group_size]
        index, votes = majority_vote(group)
        label = normalize_answer(group[index]) if votes else None
        agrees += [label is not None and a is not None and normalize_answer(a) == label for a in group]
    agree = torch.tensor(agrees, dtype=torch.float32)
    return agree, agree.view(-1, group_size).mean(dim=1)


def uncertainty_reward(p_hat: Tensor) -> Tensor:
    """R-Zero's challenger reward ``1 − 2·|p̂ − ½|``: 1 at p̂ = ½, 0 at p̂ = 0 or 1."""
    return 1.0 - 2.0 * (p_hat.float() - 0.5).abs()


def posed_problem(seed: Problem, question: str) -> Problem:
    """The problem the solver answers: ``question`` in the seed's conversation (its system prompt, earlier turns)."""
    if seed.messages is None:
        return Problem(question)
    return Problem.from_messages(with_last_user_content(seed.messages, question))


def posing_verdict(question: str | None) -> Verdict:
    """The challenger's verdict on one posing: whether it posed a problem (there is nothing else to judge)."""
    return Verdict(
        correct=question is not None,
        reason="no_question" if question is None else "posed",
        extracted=question,
    )


def solver_verdict(agrees: bool, answer: str | None, posed: bool) -> Verdict:
    """The solver's verdict on one answer: whether it agrees with the majority (there is no gold answer)."""
    reason = "agrees" if agrees else ("no_answer" if answer is None else "disagrees")
    return Verdict(correct=agrees, reason=reason if posed else f"{reason} (seed problem)", extracted=answer)


# ---------------------------------------------------------------------------------------------
# The game
# ---------------------------------------------------------------------------------------------
class ChallengerSolverGame(Game):
    """The challenger poses problems, the solver answers them; no labels (R-Zero).

    Two adapters, ``solver`` (deployed: it answers problems alone) and ``challenger``. Each step,
    for each seed problem the challenger samples N completions of the posing prompt (N =
    ``grpo.num_generations``, one group per seed problem); the solver answers each posed problem
    m times (one group of m per posed problem). With p̂ the share of a group's m answers that
    agree with their majority answer:

    - the solver is paid 1 for each answer that agrees with the majority, else 0;
    - the challenger is paid ``1 − 2·|p̂ − ½|`` for a problem it posed, 0 for a completion with
      no ``<question>`` block (the solver answered the seed problem in those rows).

    Advantages are the default group-normalised ones, per role in its own groups. The posing
    prompt is the challenger's own, so sampling ahead (``rollout.max_staleness``) is refused;
    neither role has a rival, so the league is refused too.

    Args:
        solver_samples: m, the solver's answers to each posed problem (>= 2: the majority of one
            answer always agrees with it).
        pose_prompt: The challenger's prompt; ``{question}`` is replaced by the seed problem, and
            it asks for the new problem inside ``<question></question>`` (the only place it is read).
            It goes through the chat template as the drafter's prompt does.

    Raises:
        ValueError: ``solver_samples`` below 2, or a ``pose_prompt`` without ``{question}`` or
            ``<question>`` (naming the value).
    """

    def __init__(self, solver_samples: int = 4, pose_prompt: str = DEFAULT_POSE) -> None:
        if isinstance(solver_samples, bool) or not isinstance(solver_samples, int) or solver_samples < 2:
            raise ValueError(
                f"solver_samples must be an int >= 2 (the solver's answers to each posed problem, whose majority "
                f"is the pseudo-label), got {solver_samples!r}"
            )
        for key in ("{question}", "<question>"):
            if key not in pose_prompt:
                raise ValueError(
                    f"pose_prompt must contain {key!r} ('{{question}}' is replaced by the seed problem; the posed "
                    f"problem is read from inside <question></question>), got {pose_prompt!r}"
                )
        self.solver_samples = solver_samples
        self.pose_prompt = pose_prompt

    @property
    def spec(self) -> GameSpec:
        return GameSpec(
            policies=(SOLVER, CHALLENGER),
            roles=(CHALLENGER, SOLVER),
            first_stage=None,
            answers=(SOLVER,),
            deploy="single",
            metrics=METRICS,
        )

    def cast(self, step: int) -> dict[str, str]:
        return {CHALLENGER: CHALLENGER, SOLVER: SOLVER}

    def play(self, player: Player, problems: list[Problem]) -> StepRecord:
        n, m = player.num_generations, self.solver_samples
        posings = player.sample(CHALLENGER, [self.posing_prompt(player, p) for p in problems], n)  # [P·N]
        questions = [posed_question(text) for text in posings.texts]
        seeds = [p for p in problems for _ in range(n)]
        asked = [s if q is None else posed_problem(s, q) for s, q in zip(seeds, questions)]
        prompts = [player.prompts.draft_prompt(player.tokenizer, p) for p in asked]
        answers = player.sample(SOLVER, prompts, m)  # [P·N·m]: m answers of each problem asked
        extracted = [extract_answer(text) for text in answers.texts]
        agrees, p_hat = self_consistency(extracted, m)
        posed = torch.tensor([q is not None for q in questions], dtype=torch.float32)  # [P·N]
        paid = uncertainty_reward(p_hat) * posed
        posing_verdicts = [posing_verdict(q) for q in questions]
        challenger = player.role(CHALLENGER, CHALLENGER, posings, posing_verdicts, paid, group_size=n)
        posed_rows = [q is not None for q in questions for _ in range(m)]
        verdicts = [solver_verdict(bool(a), e, p) for a, e, p in zip(agrees, extracted, posed_rows)]
        solver = player.role(SOLVER, SOLVER, answers, verdicts, agrees, group_size=m)
        record = StepRecord(player.step, problems, challenger, challenge=solver)
        record.summaries = [p.question for p in asked for _ in range(m)]  # what each solver row answered
        record.reward_terms = {
            "cs/posed_parse_rate": float(posed.mean()),
            "cs/challenger_reward": float(paid.mean()),
        }
        return record

    def posing_prompt(self, player: Player, seed: Problem) -> str:
        """The challenger's prompt for ``seed``: :attr:`pose_prompt` filled, through the chat template."""
        return player.prompts.render(
            player.tokenizer, fill(self.pose_prompt, question=seed.question), seed.messages
        )

    def counts(self, record: StepRecord) -> Tensor:
        """``[Σ p̂ over posed problems, posed problems]``: the solver's agreement where a problem was posed."""
        posed = record.draft.correct  # the challenger's verdicts: a question was posed
        p_hat = record.challenge.rewards.float().cpu().view(-1, self.solver_samples).mean(dim=1)
        return torch.stack([(p_hat * posed).sum(), posed.sum()]).double()

    def count_metrics(self, sums: Tensor) -> dict[str, float]:
        """``cs/solver_agreement``: mean p̂ over the problems posed (left out at a step that posed none)."""
        agreement, posed = (float(x) for x in sums)
        return {"cs/solver_agreement": agreement / posed} if posed > 0 else {}

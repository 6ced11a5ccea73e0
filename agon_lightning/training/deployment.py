"""How the trained policies answer a problem once deployed: the cascade, one adapter alone, or the game's graph.

A game declares how it deploys (``GameSpec.deploy``); the evaluator fixes, before training, which
policy of the run is the deployed one (its :class:`Deployment`); and one function,
:func:`deployed_answers`, answers a batch of problems that way for any player — the module
(``agon predict --config``) or a bundle's :class:`~agon_lightning.deploy.cascade.Cascade`
(``agon predict --bundle``, ``agon serve``) — so a bundle answers what validation scored:

- ``cascade``: the drafter drafts, the answerer answers after reading the draft's summary
  (:func:`~agon_lightning.rollout.pipeline.solve_batch`);
- ``single``: one adapter answers from the plain prompt;
- ``graph``: the game's own :meth:`~agon_lightning.games.base.Game.answer`, greedy, one final
  completion per problem, which may call the player's ``sample``, ``read``, ``tokenizer``,
  ``prompts`` and ``summarizer``.

With ``k > 1`` the cascade and a single adapter sample k answers and report the majority's
(:func:`~agon_lightning.rollout.pipeline.majority_vote`); a game's graph answers greedily only.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from agon_lightning.game.text import extract_answer
from agon_lightning.game.types import Problem, Verdict
from agon_lightning.games.base import Game
from agon_lightning.games.spec import DEPLOYS
from agon_lightning.rollout.base import RolloutBatch
from agon_lightning.rollout.pipeline import (
    CascadeResult,
    Player,
    answer_record,
    majority_vote,
    solve_batch,
    verify_each,
)


@dataclass(frozen=True)
class Deployment:
    """How the deployed policy answers: what a bundle records and ``predict`` and ``serve`` run.

    Attributes:
        kind: ``cascade``, ``single`` or ``graph`` (see the module's docstring).
        drafter: ``cascade``: the adapter that drafts; ``single``: the adapter that answers alone;
            ``graph``: ``None``.
        answerer: ``cascade``: the adapter that answers after reading the draft's summary; ``single``:
            the adapter alone again (its one stage gives the answer); ``graph``: ``None``.

    Raises:
        ValueError: an unknown ``kind``, or adapters that do not fit it (naming them).
    """

    kind: str
    drafter: str | None = None
    answerer: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in DEPLOYS:
            raise ValueError(f"a deployment's kind must be one of {DEPLOYS}, got {self.kind!r}")
        named = (self.drafter, self.answerer)
        fits = {
            "cascade": None not in named,
            "single": self.drafter is not None and self.answerer == self.drafter,
            "graph": named == (None, None),
        }[self.kind]
        if not fits:
            raise ValueError(
                f"a {self.kind} deployment cannot have drafter={self.drafter!r} and answerer={self.answerer!r} "
                "(cascade: both; single: one adapter as both; graph: neither)"
            )

    def drafting(self, drafter: str, adapters: tuple[str, ...]) -> Deployment:
        """This deployment with ``drafter`` in the first stage (``agon predict --drafter``).

        A cascade keeps its answerer unless ``drafter`` is that answerer: then the pair swaps (with
        one adapter, it answers its own draft). A single deployment answers with ``drafter`` alone.

        Raises:
            ValueError: ``drafter`` is not one of ``adapters``, or the deployment is the game's graph.
        """
        if drafter not in adapters:
            raise ValueError(f"drafter must be one of {list(adapters)}, got {drafter!r}")
        if self.kind == "graph":
            raise ValueError(
                f"drafter={drafter!r}: this deployment answers through the game's answer graph, where no adapter "
                "is chosen to draft; leave the drafter out"
            )
        if self.kind == "single":
            return replace(self, drafter=drafter, answerer=drafter)
        answerer = self.answerer if drafter != self.answerer else self.drafter
        return replace(self, drafter=drafter, answerer=answerer)


@dataclass
class AnswerSample:
    """One completion that answers a problem in one stage (its names are a cascade sample's final stage's)."""

    final: str
    extracted: str | None
    final_tokens: int
    final_truncated: bool


@dataclass
class Answer:
    """A problem's answer by one adapter alone (``single``) or by a game's answer graph (``graph``).

    Attributes:
        problem: The problem.
        kind: ``single`` or ``graph``.
        by: The adapter (``single``) or the game's name (``graph``).
        samples: The k completions, in sampling order (one for a graph).
        chosen: Index of the reported sample (the first one carrying the voted answer).
        votes: Normalised answer → number of samples that gave it.
        verdict: The verifier's verdict on the reported answer, when the problem has a gold answer.
    """

    problem: Problem
    kind: str
    by: str
    samples: list[AnswerSample]
    chosen: int = 0
    votes: dict[str, int] = field(default_factory=dict)
    verdict: Verdict | None = None

    @property
    def final(self) -> AnswerSample:
        return self.samples[self.chosen]

    def to_dict(self) -> dict[str, Any]:
        """The JSON record ``agon predict`` writes (``samples`` and ``votes`` only when k > 1)."""
        s = self.final
        body = {
            "deploy": self.kind,
            "adapter" if self.kind == "single" else "game": self.by,
            "final": s.final,
            "extracted": s.extracted,
            "tokens": {"final": s.final_tokens},
            "truncated": {"final": s.final_truncated},
        }
        return answer_record(self.problem, body, self.verdict, self.samples, self.votes)


def graph_answer(game: Game, player: Any, problems: list[Problem]) -> RolloutBatch:
    """``game.answer(player, problems)``, checked: one final completion per problem.

    Raises:
        ValueError: the game answered another number of completions (naming both counts).
    """
    final = game.answer(player, problems)
    if len(final) != len(problems):
        raise ValueError(
            f"{game.name}.answer returned {len(final)} completions for {len(problems)} problems: a game's answer "
            "graph gives one final completion per problem, in order"
        )
    return final


def deployed_answers(
    player: Player, problems: list[Problem], deployment: Deployment, game: Game | None = None, k: int = 1
) -> list[CascadeResult | Answer]:
    """Each problem answered as ``deployment`` says, graded where the problem has a gold answer.

    Args:
        player: The module or a bundle's cascade (``sample``, ``read``, ``tokenizer``, ``prompts``,
            ``summarizer``, ``verifier``).
        problems: One batch.
        deployment: How to answer.
        game: The game whose answer graph a ``graph`` deployment runs.
        k: Samples per problem, majority-voted (1: greedy).

    Raises:
        ValueError: ``k < 1``; ``k > 1`` or no ``game`` for a ``graph`` deployment.
    """
    if k < 1:
        raise ValueError(f"k (samples per problem) must be >= 1, got {k}")
    if deployment.kind == "cascade":
        return list(solve_batch(player, problems, deployment.drafter, deployment.answerer, k))
    if deployment.kind == "graph":
        if game is None:
            raise ValueError(
                "a graph deployment answers through its game's answer graph, but no game was given"
            )
        if k != 1:
            raise ValueError(
                f"k={k}: {game.name} answers through its answer graph, greedily, one completion per problem; "
                "use k=1"
            )
        finals, by = graph_answer(game, player, problems), game.name
    else:
        prompts = [player.prompts.draft_prompt(player.tokenizer, p) for p in problems]
        finals, by = player.sample(deployment.drafter, prompts, k, k == 1), deployment.drafter
    samples = [
        AnswerSample(text, extract_answer(text), int(finals.lengths[i]), bool(finals.truncated[i]))
        for i, text in enumerate(finals.texts)
    ]
    answers = []
    for j, problem in enumerate(problems):
        group = samples[j * k : (j + 1) * k]
        chosen, votes = majority_vote([s.extracted for s in group])
        answers.append(Answer(problem, deployment.kind, by, group, chosen, votes))
    graded = [a for a in answers if player.verifier.grades(a.problem)]
    verdicts = verify_each(player.verifier, [a.final.final for a in graded], [a.problem for a in graded])
    for answer, verdict in zip(graded, verdicts):
        answer.verdict = verdict
    return answers

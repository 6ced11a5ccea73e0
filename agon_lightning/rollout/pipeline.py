"""The two stages of the game, for any player: draft, summarise, answer after reading.

One implementation serves training (the challenger's prompts), validation (the cascades'
pass@1) and deployment (:class:`~agon_lightning.deploy.cascade.Cascade`, ``agon predict``):
:func:`solve_batch` drives any *player* — the deployed pair, or the
:class:`~agon_lightning.training.module.AgonModule` itself — through the same calls (``draft_prompt``,
``sample``, ``summarize``, ``challenge_prompt``, ``sample``). With greedy decoding a bundle
therefore reproduces the ``val/cascade_*`` pass@1 logged when it was saved.

**k samples and the majority vote.** With ``k == 1`` both stages decode greedily. With
``k > 1`` the drafter samples k drafts at the rollout's temperature, the answerer answers
each draft once after reading its summary (k answers, as in training), and the final answer
is the most common extracted answer (compared after :func:`normalize_answer`), ties going
to the answer that came first; the reported texts are those of the first sample carrying
it. Samples with no extractable answer do not vote; when none has one, the first sample is
reported.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from agon_lightning.game.prompts import Prompts
from agon_lightning.game.text import extract_answer
from agon_lightning.game.types import Problem, Verdict
from agon_lightning.rollout.base import RolloutBatch
from agon_lightning.summarizers.base import Summarizer
from agon_lightning.verifiers.base import Verifier
from agon_lightning.verifiers.exact import normalize_answer

log = logging.getLogger(__name__)


class Player(Protocol):
    """What the pipeline needs: an :class:`AgonModule` or a :class:`Cascade`."""

    tokenizer: Any
    prompts: Prompts
    summarizer: Summarizer
    verifier: Verifier

    def sample(
        self, adapter: str | None, prompts: list[str], num_samples: int, greedy: bool = False
    ) -> RolloutBatch:
        """Completions with ``adapter`` active (``None``: the base)."""


class MixedPlayer(Player, Protocol):
    """A player that can also sample many adapters in one call: what validation needs."""

    def sample_mixed(
        self, adapters: list[str | None], prompts: list[str], greedy: bool = False
    ) -> RolloutBatch:
        """One completion per prompt, row ``i`` with ``adapters[i]`` active (``None``: the base)."""


@dataclass
class CascadeSample:
    """One pass through both stages."""

    draft: str
    summary: str
    final: str
    extracted: str | None
    draft_tokens: int
    final_tokens: int
    draft_truncated: bool
    final_truncated: bool


@dataclass
class CascadeResult:
    """The cascade's output for one problem.

    Attributes:
        problem: The problem.
        drafter: Adapter of the first stage.
        answerer: Adapter of the second stage.
        samples: The k passes, in sampling order.
        chosen: Index of the reported sample (the first one carrying the voted answer).
        votes: Normalised answer → number of samples that gave it.
        verdict: The verifier's verdict on the reported answer, when the problem has a gold answer.
    """

    problem: Problem
    drafter: str
    answerer: str
    samples: list[CascadeSample]
    chosen: int = 0
    votes: dict[str, int] = field(default_factory=dict)
    verdict: Verdict | None = None

    @property
    def final(self) -> CascadeSample:
        return self.samples[self.chosen]

    def to_dict(self) -> dict[str, Any]:
        """The JSON record ``agon predict`` writes (``samples`` and ``votes`` only when k > 1)."""
        s = self.final
        body = {
            "drafter": self.drafter,
            "answerer": self.answerer,
            "draft": s.draft,
            "summary": s.summary,
            "final": s.final,
            "extracted": s.extracted,
            "tokens": {"draft": s.draft_tokens, "final": s.final_tokens},
            "truncated": {"draft": s.draft_truncated, "final": s.final_truncated},
        }
        return answer_record(self.problem, body, self.verdict, self.samples, self.votes)


def answer_record(
    problem: Problem,
    body: dict[str, Any],
    verdict: Verdict | None,
    samples: Sequence[Any],
    votes: dict[str, int],
) -> dict[str, Any]:
    """A problem's JSON record as ``agon predict`` writes it: the question and its answer, ``body`` (how it was
    answered), the verdict, the whole prompt of a conversational problem, and the votes and every sample when
    there were several (``samples``: dataclasses)."""
    record: dict[str, Any] = {"question": problem.question, "answer": problem.answer, **body}
    record["verdict"] = None if verdict is None else asdict(verdict)
    if problem.messages is not None:  # a conversational problem: the whole prompt
        record["messages"] = problem.messages
    if len(samples) > 1:
        record["votes"] = votes
        record["samples"] = [asdict(x) for x in samples]
    return record


def majority_vote(answers: Sequence[str | None]) -> tuple[int, dict[str, int]]:
    """``(index of the reported sample, votes)``: the most common answer, ties to the earliest.

    Answers are compared after :func:`normalize_answer`; ``None`` (no answer) does not vote.
    """
    keys = [None if a is None else normalize_answer(a) for a in answers]
    votes = Counter(k for k in keys if k is not None)
    if not votes:
        return 0, {}
    best = max(votes.values())
    winner = next(k for k in keys if k is not None and votes[k] == best)  # first to reach the top count
    return keys.index(winner), dict(votes)


def challenge_prompts(
    player: Player, problems: list[Problem], drafts: RolloutBatch
) -> tuple[list[str], list[str]]:
    """``(summaries, prompts)``: each draft summarised, and the prompt its answerer reads.

    The one place the second stage's input is built, in training, validation and deployment.
    """
    summaries = [
        player.summarizer.summarize(text, p, bool(cut))
        for text, p, cut in zip(drafts.texts, problems, drafts.truncated)
    ]
    prompts = [player.prompts.challenge_prompt(player.tokenizer, p, s) for p, s in zip(problems, summaries)]
    return summaries, prompts


def challenge(
    player: Player, problems: list[Problem], drafts: RolloutBatch, answerer: str | None, greedy: bool
) -> tuple[list[str], RolloutBatch]:
    """The second stage: summarise each draft, then ``answerer`` answers each after reading it."""
    summaries, prompts = challenge_prompts(player, problems, drafts)
    return summaries, player.sample(answerer, prompts, 1, greedy)


def solve_batch(
    player: Player, problems: list[Problem], drafter: str, answerer: str, k: int = 1
) -> list[CascadeResult]:
    """Both stages on one batch: greedy when ``k == 1``, else k sampled passes and a vote."""
    if k < 1:
        raise ValueError(f"k (samples per problem) must be >= 1, got {k}")
    greedy = k == 1
    prompts = [player.prompts.draft_prompt(player.tokenizer, p) for p in problems]
    drafts = player.sample(drafter, prompts, k, greedy)  # the k samples of a problem are adjacent
    grouped = [p for p in problems for _ in range(k)]
    summaries, finals = challenge(player, grouped, drafts, answerer, greedy)
    samples = [
        CascadeSample(
            drafts.texts[i],
            summaries[i],
            text,
            extract_answer(text),
            int(drafts.lengths[i]),
            int(finals.lengths[i]),
            bool(drafts.truncated[i]),
            bool(finals.truncated[i]),
        )
        for i, text in enumerate(finals.texts)
    ]
    results = []
    for j, problem in enumerate(problems):
        group = samples[j * k : (j + 1) * k]
        chosen, votes = majority_vote([s.extracted for s in group])
        results.append(CascadeResult(problem, drafter, answerer, group, chosen, votes))
    graded = [r for r in results if player.verifier.grades(r.problem)]
    verdicts = verify_each(player.verifier, [r.final.final for r in graded], [r.problem for r in graded])
    for result, verdict in zip(graded, verdicts):
        result.verdict = verdict
    return results


UNVERIFIABLE = "unverifiable"


def verify_each(verifier: Verifier, texts: list[str], problems: list[Problem]) -> list[Verdict]:
    """Verdicts for deployment, where one row the verifier cannot judge must not lose the others.

    A row whose check raises (a reasoning-gym verifier given a problem without its task
    metadata, say) gets ``Verdict(correct=False, reason="unverifiable: …")`` naming the error;
    the error is logged, and every other row keeps its verdict.
    """
    try:
        return verifier.verify_batch(texts, problems)
    except Exception:  # noqa: BLE001 — judged row by row below, each failure logged and recorded
        pass
    verdicts = []
    for i, (text, problem) in enumerate(zip(texts, problems)):
        try:
            verdicts.append(verifier.verify(text, problem))
        except Exception as err:  # noqa: BLE001
            reason = f"{UNVERIFIABLE}: {type(verifier).__name__}: {err}"
            log.warning("row %d of the batch: %s", i, reason)
            verdicts.append(Verdict(correct=False, score=0.0, reason=reason))
    return verdicts

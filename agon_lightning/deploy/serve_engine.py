"""What ``agon serve`` runs for a batch of requests: the served models, the sampling, both stages.

A served *model* is a way through the bundle: for a cascade bundle every ordered pair of its
adapters (``cascade_ab``: ``alpha`` drafts, ``beta`` answers after reading the draft's summary;
``cascade_ba``; ``cascade_<drafter>_<answerer>`` for other names); for a graph bundle ``game``, the
game's own answer graph (greedy, one completion per question, its final text in one piece); and in
every bundle each adapter alone and the base. The bundle's deployed policy is the default.
:class:`CascadeRunner` runs a batch of requests (each a :class:`Job`, whole or a :class:`Part` of
its rows) that share a model and sampling settings through the deployment code — the bundle's
:class:`~agon_lightning.deploy.cascade.Cascade` (its prompts, summarizer and rollout) and
:func:`~agon_lightning.rollout.pipeline.challenge_prompts`, the one place the second stage's input
is built — so a greedy request answers exactly what ``agon predict`` writes. With ``n > 1`` each
of the n drafts is answered once (n choices, no vote). Stop strings cut the returned text;
generation itself runs to EOS or the budget.

**Streaming** (HF backend): the final stage samples through ``generate`` with a streamer that
hands each step's tokens to the request as they are produced (greedy tokens are the decode
loop's, ``tests/test_decode.py``); the draft is not streamed, it is sent with its summary in
the first chunk. On the vLLM backend the final stage's text arrives in one piece when it is done.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch

from agon_lightning.adapters.policy import sample_with
from agon_lightning.deploy.cascade import Cascade
from agon_lightning.deploy.serve_api import APIError
from agon_lightning.deploy.serve_stream import StreamingHFRollout, TextDeltas, cut_at_stop
from agon_lightning.game.names import BASE
from agon_lightning.game.types import Problem
from agon_lightning.rollout.base import Rollout, RolloutBatch, stop_token_ids
from agon_lightning.rollout.hf import HFRollout
from agon_lightning.rollout.pipeline import challenge_prompts
from agon_lightning.training.deployment import graph_answer
from agon_lightning.training.validation import GAME, cascade_key, cascade_pairs


@dataclass(frozen=True)
class ServedModel:
    """One name of ``/v1/models``: the adapter that drafts (``None``: one stage) and the one that answers
    (``None``: the base with adapters off), or the game (``graph``: its name) whose answer graph answers."""

    name: str
    drafter: str | None
    answerer: str | None
    graph: str | None = None

    def describe(self) -> str:
        if self.graph is not None:
            return f"{self.graph}'s answer graph (greedy, one completion per question)"
        if self.drafter is None:
            return f"{self.answerer or 'the base'} alone"
        return f"{self.drafter} drafts, {self.answerer} answers after reading its summary"


def served_models(cascade: Cascade) -> tuple[dict[str, ServedModel], str]:
    """``({name: model}, default name)``: the bundle's deployed policy first, then for a cascade bundle every
    other cascade, each adapter alone and the base."""
    d = cascade.deployment
    models = [ServedModel(k, dr, an) for k, dr, an in cascade_pairs(cascade.adapters, d.kind)]
    if d.kind == "graph":
        deployed = ServedModel(GAME, None, None, cascade.game.name)
    elif d.kind == "cascade":
        deployed = ServedModel(cascade_key(d.drafter, d.answerer), d.drafter, d.answerer)
    else:
        deployed = ServedModel(d.drafter, None, d.drafter)
    models = [deployed, *(m for m in models if m.name != deployed.name)]
    models += [ServedModel(a, None, a) for a in cascade.adapters if a != deployed.name]
    return {m.name: m for m in [*models, ServedModel(BASE, None, None)]}, deployed.name


@dataclass(frozen=True)
class Sampling:
    """One batch's sampling settings (both stages)."""

    greedy: bool
    temperature: float
    top_p: float
    top_k: int
    max_tokens: int


@dataclass
class Choice:
    """One answer: the final stage's text and, for a cascade, the draft it read."""

    text: str
    finish_reason: str
    final_prompt_tokens: int
    final_tokens: int
    draft: str | None = None
    summary: str | None = None
    draft_tokens: int = 0
    draft_truncated: bool = False


@dataclass
class Result:
    """A request's choices (question i, sample j at index ``i * n + j``) and its draft prompts' tokens."""

    choices: list[Choice]
    draft_prompt_tokens: int


@dataclass(eq=False)
class Job:
    """One request waiting in the queue, run in parts of at most ``--max-batch-size`` rows.

    Row ``r`` is sample ``r % n`` of question ``r // n``; it answers choice ``r``. The worker takes
    the rows in order (:meth:`take`) and settles each part (:meth:`settle`); the future is set once
    every row is answered, or at the first error.

    Attributes:
        system: The request's system message, shown to the model (``None``: the bundle's prompts).
        warnings: What of the request the model was not shown as asked, for the response.
        emit: For a streamed request, called from the worker with ``(choice index, text delta)``
            as the final stage produces it, and with ``(index, Choice)`` once the draft is known
            (the choice's text is empty then).
    """

    model: ServedModel
    questions: list[str]
    n: int
    sampling: Sampling
    seed: int | None = None
    stops: list[str] = field(default_factory=list)
    system: str | None = None
    warnings: list[str] = field(default_factory=list)
    emit: Callable[[int, Any], None] | None = None
    future: concurrent.futures.Future = field(default_factory=concurrent.futures.Future)
    handed: int = field(default=0, init=False)  # rows handed to the worker so far
    _choices: list[Choice | None] = field(default_factory=list, init=False, repr=False)
    _settled: int = field(default=0, init=False)
    _draft_prompt_tokens: int = field(default=0, init=False)
    _rng: tuple[torch.Tensor, list[torch.Tensor]] | None = field(default=None, init=False, repr=False)

    @property
    def rows(self) -> int:
        return len(self.questions) * self.n

    @property
    def remaining(self) -> int:
        """Rows not yet handed to the worker."""
        return self.rows - self.handed

    @property
    def tokens(self) -> int:
        """The completion tokens this job may generate per stage: prompts x n x max_tokens."""
        return self.rows * self.sampling.max_tokens

    def key(self) -> Any:
        """Jobs with equal keys run in one batch; a seeded job runs alone, so its seed decides its samples."""
        if self.seed is not None:
            return id(self)
        return self.model, self.sampling, self.emit is not None

    def problem(self, question: int) -> Problem:
        """Question ``question`` as the cascade reads it: with the request's system message, if it has one."""
        text = self.questions[question]
        if self.system is None:
            return Problem(text)
        return Problem.from_messages(
            [{"role": "system", "content": self.system}, {"role": "user", "content": text}]
        )

    def take(self, most: int) -> Part:
        """The next rows, at most ``most``."""
        part = Part(self, self.handed, min(self.handed + most, self.rows))
        self.handed = part.stop
        return part

    def begin(self) -> bool:
        """Whether the worker should run this job's next part (False once it is settled or cancelled)."""
        if self._choices:
            return not self.future.done()
        self._choices = [None] * self.rows
        return self.future.set_running_or_notify_cancel()

    def settle(self, part: Part, choices: list[Choice], draft_prompt_tokens: int) -> None:
        """Record a part's choices; the future is set once every row has its choice."""
        self._choices[part.start : part.stop] = choices
        self._settled += len(choices)
        self._draft_prompt_tokens += draft_prompt_tokens
        if self._settled == self.rows:
            self.future.set_result(Result(self._choices, self._draft_prompt_tokens))  # type: ignore[arg-type]

    def fail(self, err: BaseException) -> None:
        if not self.future.done():
            self.future.set_exception(err)

    @contextmanager
    def random_stream(self) -> Iterator[None]:
        """A seeded job samples from its own stream, seeded once and continued from part to part,
        so the batches of other jobs run between its parts do not change its samples."""
        if self.seed is None:
            yield
            return
        if self._rng is None:
            torch.manual_seed(self.seed)
        else:
            torch.set_rng_state(self._rng[0])
            if self._rng[1]:
                torch.cuda.set_rng_state_all(self._rng[1])
        yield
        cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else []
        self._rng = (torch.get_rng_state(), cuda)


@dataclass(frozen=True)
class Part:
    """Rows ``start`` to ``stop`` (excluded) of ``job``: what one batch runs of it."""

    job: Job
    start: int
    stop: int

    @property
    def rows(self) -> int:
        return self.stop - self.start


@contextmanager
def sampling_settings(rollout: Rollout, s: Sampling) -> Iterator[None]:
    """The rollout samples with ``s`` inside the block, and with its own settings again after it."""
    names = ("max_new_tokens", "temperature", "top_p", "top_k")
    saved = {n: getattr(rollout, n) for n in names}
    for n, v in zip(names, (s.max_tokens, s.temperature, s.top_p, s.top_k)):
        setattr(rollout, n, v)
    try:
        yield
    finally:
        for n, v in saved.items():
            setattr(rollout, n, v)


class CascadeRunner:
    """Runs batches of :class:`Job` through the bundle's cascade (one worker thread calls :meth:`run`).

    Args:
        cascade: The loaded bundle.
        context: Longest prompt + completion the model takes (its ``max_position_embeddings``).
    """

    def __init__(self, cascade: Cascade, context: int | None) -> None:
        self.cascade = cascade
        self.context = context

    def run(self, parts: list[Part]) -> None:
        """Solve every part of the batch and settle its job (an error settles each job with it)."""
        parts = [p for p in parts if p.job.begin()]
        try:
            parts = [p for p in parts if p.start > 0 or self._fits(p.job)]
            if not parts:
                return
            results = self._solve(parts)
        except Exception as err:  # noqa: BLE001 — each request is answered with the error; the server lives on
            for part in parts:
                part.job.fail(err)
            return
        for part, (choices, draft_prompt_tokens) in zip(parts, results):
            part.job.settle(part, choices, draft_prompt_tokens)

    def _fits(self, job: Job) -> bool:
        """False (the job answered with a 400) when a prompt and the budget overflow the model's context."""
        if self.context is None:
            return True
        c = self.cascade
        prompts = [c.prompts.draft_prompt(c.tokenizer, job.problem(i)) for i in range(len(job.questions))]
        longest = max(len(ids) for ids in c.tokenizer(prompts, add_special_tokens=False)["input_ids"])
        if longest + job.sampling.max_tokens <= self.context:
            return True
        job.fail(
            APIError(
                400,
                f"this model's context is {self.context} tokens, but the prompt takes {longest} and max_tokens "
                f"asks for {job.sampling.max_tokens}; shorten the prompt or lower max_tokens",
                param="max_tokens",
                code="context_length_exceeded",
            )
        )
        return False

    def _solve(self, parts: list[Part]) -> list[tuple[list[Choice], int]]:
        """Each part's choices and the draft-prompt tokens of its questions (counted once per question)."""
        c, first = self.cascade, parts[0].job
        model, sampling = first.model, first.sampling
        owners = [(part.job, row) for part in parts for row in range(part.start, part.stop)]
        problems = [job.problem(row // job.n) for job, row in owners]
        prompts = [c.prompts.draft_prompt(c.tokenizer, p) for p in problems]
        draft, summaries = None, None
        with sampling_settings(c.rollout, sampling), first.random_stream():
            if model.drafter is not None:
                draft = c.sample(model.drafter, prompts, 1, sampling.greedy)
                summaries, prompts = challenge_prompts(c, problems, draft)
                for row, (job, index) in enumerate(owners):
                    if job.emit is not None:
                        job.emit(index, self._choice(None, row, draft, summaries, "", False))
            final = self._final(model, prompts, problems, sampling.greedy, owners, first)
        finals = [cut_at_stop(t, job.stops) for t, (job, _) in zip(final.texts, owners)]
        choices = [self._choice(final, row, draft, summaries, *finals[row]) for row in range(len(owners))]
        # The prompt of each question counts once, however many samples it has (OpenAI's usage).
        prompt_tokens = (draft or final).prompt_mask.sum(dim=1).tolist()
        results, row = [], 0
        for part in parts:
            rows = range(row, row + part.rows)
            counted = sum(int(prompt_tokens[r]) for r in rows if owners[r][1] % part.job.n == 0)
            results.append(([choices[r] for r in rows], counted if draft is not None else 0))
            row += part.rows
        return results

    def _final(
        self,
        model: ServedModel,
        prompts: list[str],
        problems: list[Problem],
        greedy: bool,
        owners: list[tuple[Job, int]],
        first: Job,
    ) -> RolloutBatch:
        """The answering stage (a game's whole answer graph); streamed token by token for streamed jobs on the
        HF backend, else each final text in one piece."""
        c = self.cascade
        if first.emit is not None and model.graph is None and isinstance(c.rollout, HFRollout):
            eos = stop_token_ids(c.policy, c.tokenizer)
            rows = [
                TextDeltas(
                    c.tokenizer, eos, job.stops, lambda text, job=job, index=index: job.emit(index, text)
                )
                for job, index in owners
            ]
            rollout = StreamingHFRollout(c.rollout, lambda row, token: rows[row].add(token))
            final = sample_with(c.policy, rollout, c.tokenizer, model.answerer, prompts, 1, greedy)
            for row in rows:
                row.finish()
            return final
        if model.graph is not None:
            final = graph_answer(c.game, c, problems)
        else:
            final = c.sample(model.answerer, prompts, 1, greedy)
        if first.emit is not None:
            for (job, index), text in zip(owners, final.texts):
                job.emit(index, cut_at_stop(text, job.stops)[0])
        return final

    @staticmethod
    def _choice(
        final: RolloutBatch | None,
        row: int,
        draft: RolloutBatch | None,
        summaries: list[str] | None,
        text: str,
        stopped: bool,
    ) -> Choice:
        """Row ``row``'s choice (``final`` is ``None`` while only the draft is known)."""
        truncated = final is not None and bool(final.truncated[row]) and not stopped
        choice = Choice(
            text=text,
            finish_reason="length" if truncated else "stop",
            final_prompt_tokens=0 if final is None else int(final.prompt_mask[row].sum()),
            final_tokens=0 if final is None else int(final.lengths[row]),
        )
        if draft is not None and summaries is not None:
            choice.draft, choice.summary = draft.texts[row], summaries[row]
            choice.draft_tokens, choice.draft_truncated = int(draft.lengths[row]), bool(draft.truncated[row])
        return choice

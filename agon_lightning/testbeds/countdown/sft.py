"""SFT examples for Countdown: searches to imitate, and rivals whose claims are to be checked.

A drafter example's target is a depth-first search (:func:`agon_lightning.testbeds.countdown.task.search`)
whose ordering is drawn per problem (not one fixed strategy: random, nearest-first or
largest-first, ties broken at random), with some slips that are caught and retried, so the
number of attempts varies from one problem, and one draw, to the next. A challenger example puts
a rival's summary in the prompt; the rival solved the problem (``right``: true claims that reach
the target), searched and failed (``partial``: true claims of a near miss), slipped (``slipped``:
one claim's result is wrong and the claims after it carry the error) or was cut off in its trace
(``empty``: no summary). The target opens with the check of every claim (``9*3=27 y`` /
``9*3=27 n``) and searches through the true claims first, so the base learns to read a rival's
work, to judge it, and to build on what holds.

Every proportion is a constructor argument, recorded in the config that trains the base, and
fixed in ``benchmarks/results/countdown/README.md`` before the shipped base was trained.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from agon_lightning.game.types import Problem
from agon_lightning.testbeds.countdown.states import state_problem, states, target_of
from agon_lightning.testbeds.countdown.summarizer import CountdownSummarizer, countdown_numbers
from agon_lightning.testbeds.countdown.task import (
    ORDERINGS,
    SLIPS,
    Attempt,
    Completion,
    SearchStyle,
    Step,
    after,
    apply,
    best,
    expression,
    leaves,
    search,
    solve,
    summarize_search,
)
from agon_lightning.training.sft_data import RIVALS, SFTExample, SFTExamples

REDRAWS = 64  # draws of an example whose trace passes through a held-out state, before its problem is dropped

DEFAULT_RIVAL_MIX = {"right": 0.25, "slipped": 0.35, "partial": 0.25, "empty": 0.15}
DEFAULT_ORDERINGS = {"random": 0.4, "closest": 0.4, "largest": 0.2}


def slipped_path(path: Sequence[Step], at: int, slip: int) -> tuple[Step, ...]:
    """``path`` with step ``at`` off by ``slip``; the step that uses its result uses the wrong value
    (and computes right), and so on down the chain."""
    steps = list(path)
    old, new = steps[at].result, steps[at].result + slip
    steps[at] = Step(steps[at].left, steps[at].op, steps[at].right, new)
    for k in range(at + 1, len(steps)):
        step = steps[k]
        if old not in (step.left, step.right):
            continue
        left, right = (new, step.right) if step.left == old else (step.left, new)
        steps[k] = Step(left, step.op, right, apply(step.op, left, right))
        old, new = step.result, steps[k].result
    return tuple(steps)


def failed_search(numbers: Sequence[int], target: int, misses: int, style: SearchStyle, rng: random.Random):
    """The first ``misses`` attempts that miss, in a search of the drawn ordering (a failed search)."""
    found = []
    for path in leaves(numbers, target, style.ordering, rng):
        if path[-1].result != target:
            found.append(Attempt(path, "miss"))
            if len(found) == misses:
                break
    return found


class CountdownExamples(SFTExamples):
    """Countdown's SFT examples (see the module docstring).

    Args:
        challenge_fraction: Share of training examples in the challenger's prompt format.
        rival_mix: Rival kind (one of ``right``, ``slipped``, ``partial``, ``empty``) → share of
            the challenger examples.
        orderings: Search ordering (``random``, ``closest``, ``largest``) → share of the searches.
        slip_rate: Chance that an attempt of a target search slips, is caught (``!``) and retried.
        max_attempts: Longest target search, in attempts (a longer one skips to the hit); 0: no
            limit (every attempt is written; the cap cuts what does not fit).
        rival_misses: Fewest and most attempts of a failed (``partial``) rival's search (drawn
            uniformly); ``None``: as many as a target search gives up after.
        give_up: Fewest and most misses after which a target search gives up (drawn uniformly
            per search; it then summarizes its nearest miss and the first steps it tried, and
            answers with the nearest miss); ``None``: a target search never gives up. Solved
            rivals (``right``, ``empty``) never give up.
        give_up_habit: Count of given numbers → the misses after which a search of that many
            numbers usually gives up; with chance ``habit_rate`` a search gives up there, else at
            a point drawn from ``give_up``. A habit gives the greedy base a give-up point (the
            mode of the draw); a uniform draw alone has none, and greedy decoding then searches on.
        habit_rate: Chance that a search gives up at its habit.
    """

    def __init__(
        self,
        challenge_fraction: float = 0.5,
        rival_mix: dict[str, float] | None = None,
        orderings: dict[str, float] | None = None,
        slip_rate: float = 0.08,
        max_attempts: int = 6,
        rival_misses: tuple[int, int] | None = (1, 4),
        give_up: tuple[int, int] | None = None,
        give_up_habit: dict[int, int] | None = None,
        habit_rate: float = 0.0,
    ) -> None:
        rival_mix = dict(DEFAULT_RIVAL_MIX if rival_mix is None else rival_mix)
        orderings = dict(DEFAULT_ORDERINGS if orderings is None else orderings)
        for name, mix, allowed in (("rival_mix", rival_mix, RIVALS), ("orderings", orderings, ORDERINGS)):
            if set(mix) - set(allowed) or any(w < 0 for w in mix.values()) or sum(mix.values()) <= 0:
                raise ValueError(
                    f"{name} must map some of {allowed} to non-negative shares with a positive sum, got {mix}"
                )
        if not 0.0 <= challenge_fraction <= 1.0:
            raise ValueError(f"challenge_fraction must be in [0, 1], got {challenge_fraction}")
        if rival_misses is None and give_up is None:
            raise ValueError(
                "rival_misses: null draws a failed rival's misses from give_up, which is null too"
            )
        if rival_misses is not None and not 1 <= rival_misses[0] <= rival_misses[1]:
            raise ValueError(f"rival_misses must be (low, high) with 1 <= low <= high, got {rival_misses}")
        if give_up is not None and not 1 <= give_up[0] <= give_up[1]:
            raise ValueError(f"give_up must be (low, high) with 1 <= low <= high, or null; got {give_up}")
        habits = {int(k): int(v) for k, v in (give_up_habit or {}).items()}
        if any(k < 2 or v < 1 for k, v in habits.items()) or not 0.0 <= habit_rate <= 1.0:
            raise ValueError(
                "give_up_habit must map counts of numbers >= 2 to misses >= 1 and habit_rate be in "
                f"[0, 1]; got {give_up_habit} and {habit_rate}"
            )
        if habits and give_up is None:
            raise ValueError(f"give_up_habit {give_up_habit} needs give_up (the draw away from the habit)")
        SearchStyle(slip_rate=slip_rate, max_attempts=max_attempts)  # validates both
        self.challenge_fraction = challenge_fraction
        self.rival_mix = rival_mix
        self.orderings = orderings
        self.slip_rate = slip_rate
        self.max_attempts = max_attempts
        self.rival_misses = None if rival_misses is None else tuple(rival_misses)
        self.give_up = None if give_up is None else tuple(give_up)
        self.give_up_habit = {int(k): int(v) for k, v in habits.items()}
        self.habit_rate = habit_rate
        self.summarizer = CountdownSummarizer()

    def misses_before_giving_up(self, rng: random.Random, count: int) -> int:
        """The misses after which a search of ``count`` numbers gives up (0: never)."""
        if self.give_up is None:
            return 0
        if count in self.give_up_habit and rng.random() < self.habit_rate:
            return self.give_up_habit[count]
        return rng.randint(*self.give_up)

    def style(
        self, rng: random.Random, slip_rate: float | None = None, count: int | None = None
    ) -> SearchStyle:
        """A search style with a drawn ordering and, for a search of ``count`` numbers (``None``: one
        that never gives up), a drawn give-up point."""
        ordering = rng.choices(list(self.orderings), list(self.orderings.values()))[0]
        rate = self.slip_rate if slip_rate is None else slip_rate
        give_up = self.misses_before_giving_up(rng, count) if count is not None else 0
        return SearchStyle(
            ordering=ordering, slip_rate=rate, max_attempts=self.max_attempts, give_up_after=give_up
        )

    def rival_misses_of(self, rng: random.Random, count: int) -> int:
        """How many attempts a failed rival of ``count`` numbers wrote."""
        if self.rival_misses is None:
            return self.misses_before_giving_up(rng, count)
        return rng.randint(*self.rival_misses)

    def rival_draft(self, problem: Problem, rival: str, rng: random.Random) -> str:
        """A rival's whole draft of ``problem`` of kind ``rival`` (its summary is what is shown)."""
        numbers, target = countdown_numbers(problem), target_of(problem)
        if rival == "right":
            return str(solve(numbers, target, self.style(rng), rng))
        if rival == "empty":
            draft = str(solve(numbers, target, self.style(rng), rng))
            return draft[: rng.randint(len("<think>"), draft.index("</think>"))]
        if rival not in ("partial", "slipped"):
            raise ValueError(f"unknown rival kind {rival!r}; expected one of {RIVALS}")
        if rival == "partial":
            attempts = failed_search(
                numbers, target, self.rival_misses_of(rng, len(numbers)), self.style(rng), rng
            )
        else:  # a solved or a failed search, its best attempt slipped in one claim
            attempts = search(numbers, target, self.style(rng, slip_rate=0.0), rng)
            if rng.random() < 0.5:
                attempts = failed_search(
                    numbers, target, self.rival_misses_of(rng, len(numbers)), self.style(rng), rng
                )
        top = best(attempts, target)
        if top is None:
            raise ValueError(f"no attempt for {numbers} -> {target}")
        if rival == "slipped":
            for _ in range(16):  # a wrong value a later step reads as a given number: slip again
                path = slipped_path(top.steps, rng.randrange(len(top.steps) - 1), rng.choice(SLIPS))
                if after(numbers, path) is not None:
                    break
            else:
                raise ValueError(f"could not slip {top} for {numbers} -> {target}")
            top = Attempt(path, "hit" if path[-1].result == target else "miss")
            attempts = [*attempts, top]
        summary = summarize_search(numbers, target, attempts, top)
        lines = [str(a) for a in attempts]
        return str(Completion(lines, str(summary), expression(numbers, top.steps)))

    def example(self, problem: Problem, rival: str | None, rng: random.Random) -> SFTExample:
        """A drafter example (``rival=None``) or a challenger example facing that kind of rival."""
        numbers, target = countdown_numbers(problem), target_of(problem)
        if rival is None:
            return SFTExample(problem, str(solve(numbers, target, self.style(rng, count=len(numbers)), rng)))
        draft = self.rival_draft(problem, rival, rng)
        summary = self.summarizer.summarize(draft, problem)
        completion = solve(
            numbers, target, self.style(rng, count=len(numbers)), rng, rival_summary=summary or None
        )
        return SFTExample(problem, str(completion), draft, rival)

    def build(self, problems: list[Problem], seed: int) -> list[SFTExample]:
        """One example per problem; with held-out states (:meth:`hold_out_states`), none passes through one.

        An example whose completion, or whose rival's draft, passes through a held-out statement
        (:func:`~agon_lightning.testbeds.countdown.states.states`) is drawn again from the same
        random stream, up to :data:`REDRAWS` times; a problem with no clean draw is dropped. What
        was redrawn and dropped is kept in ``last_build``.
        """
        rng = random.Random(seed)
        kinds, weights = list(self.rival_mix), list(self.rival_mix.values())
        examples, redrawn, dropped = [], 0, 0
        for problem in problems:
            rival = rng.choices(kinds, weights)[0] if rng.random() < self.challenge_fraction else None
            for _ in range(REDRAWS):
                example = self.example(problem, rival, rng)
                if not self._touches_held_out(example):
                    examples.append(example)
                    break
                redrawn += 1
            else:
                dropped += 1
        self.last_build = {"problems": len(problems), "redrawn": redrawn, "dropped": dropped}
        return examples

    def _touches_held_out(self, example: SFTExample) -> bool:
        """Whether the example's completion or its rival's draft passes through a held-out state."""
        held_out = self.held_out_state
        if held_out is None:
            return False
        numbers, target = countdown_numbers(example.problem), target_of(example.problem)
        seen = states(example.target, numbers, target)
        if example.rival_draft is not None:
            seen |= states(example.rival_draft, numbers, target)
        return any(held_out(state_problem(example.problem, state)) for state in seen)

    def evaluate(self, problems: list[Problem], seed: int) -> list[SFTExample]:
        rng = random.Random(seed)
        drafts = [self.example(p, None, rng) for p in problems]
        challenges = [self.example(p, RIVALS[i % len(RIVALS)], rng) for i, p in enumerate(problems)]
        return drafts + challenges

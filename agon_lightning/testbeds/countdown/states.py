"""The states a Countdown trace passes through, as statements a holdout can judge.

A search's attempt combines two numbers at each step: after its first step a 4-number problem
is a 3-number problem with the same target, a *state* that is itself a statement of the 3-number
space, and may be a held-out one. A split by statement alone lets a 4-number SFT trace pose and
solve a held-out 3-number problem as a sub-step (S2's base saw 374 of its 523 held-out main
problems so: ``benchmarks/results/countdown/s2/audit.json``). :func:`passes_through` reads the
states of a trace; :func:`state_problem` poses one as a problem, so the same
:class:`~agon_lightning.data.holdout.HashHoldout` that splits the problems judges the states;
:class:`~agon_lightning.testbeds.countdown.sft.CountdownExamples` draws an example again when it
passes through a held-out one.
"""

from __future__ import annotations

import re

from agon_lightning.game.types import Problem
from agon_lightning.testbeds.countdown.summarizer import countdown_numbers
from agon_lightning.testbeds.countdown.task import CLAIM, MISS, SLIP, VERDICT, Step, after

#: A statement: the target and the sorted numbers.
Statement = tuple[int, tuple[int, ...]]
THINK = re.compile(r"<think>(.*?)</think>", re.S)
SMALLEST_STATEMENT = 3  # the fewest numbers a split's statement has (the main split's)


def target_of(problem: Problem) -> int:
    """The target of a reasoning-gym ``countdown`` problem."""
    return int(problem.metadata["entry"]["metadata"]["target"])


def statement_of(problem: Problem) -> Statement:
    return target_of(problem), tuple(sorted(countdown_numbers(problem)))


def attempts(completion: str) -> list[tuple[str, list[Step]]]:
    """Each attempt line of ``completion``'s trace and its claimed steps; a challenger's check line
    (claims with verdicts) is not an attempt."""
    match = THINK.search(completion)
    return [
        (line, [Step(int(a), op, int(b), int(c)) for a, op, b, c in CLAIM.findall(line)])
        for line in (match[1] if match else "").splitlines()
        if not VERDICT.search(line)
    ]


def passes_through(completion: str, numbers: list[int], target: int) -> list[tuple[Statement, bool]]:
    """Each attempt of ``completion``'s trace as the 3-number state its first step leaves (the same
    target, the three values left) and whether the attempt hits the target from there.

    An attempt whose first step is wrong (a slip) or uses a value that is not given leaves no state.
    """
    out = []
    for line, steps in attempts(completion):
        left = after(numbers, steps[:1]) if steps and steps[0].correct else None
        if left is None or len(left) != 3:
            continue
        hit = not line.endswith((f"|{MISS}", SLIP)) and all(s.correct for s in steps)
        out.append(((target, tuple(sorted(left))), hit and steps[-1].result == target))
    return out


def states(completion: str, numbers: list[int], target: int) -> set[Statement]:
    """Every state of ``completion``'s attempts that is a statement (at least 3 numbers left), past
    each correct prefix of steps: after the first step of a 4-number problem, the first two of a 5-number one."""
    out: set[Statement] = set()
    for _, steps in attempts(completion):
        for k in range(1, len(steps) + 1):
            if not steps[k - 1].correct:
                break
            left = after(numbers, steps[:k])
            if left is None or len(left) < SMALLEST_STATEMENT:
                break
            out.add((target, tuple(sorted(left))))
    return out


def state_problem(problem: Problem, state: Statement) -> Problem:
    """``state`` posed as a problem of ``problem``'s task, with the metadata a holdout's statement reads."""
    target, numbers = state
    entry = {"metadata": {"target": target, "numbers": list(numbers)}}
    return Problem(
        question=f"{target} from {list(numbers)}",
        answer="",
        metadata={"task": problem.metadata.get("task", "countdown"), "entry": entry},
    )

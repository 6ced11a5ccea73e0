"""Countdown as a search: the trace, the summary and the answer the game uses for it.

A Countdown problem gives numbers and a target; the answer is an expression that uses every
number once and equals the target. Unlike a fixed computation, solving it is a search (which
pair to combine first, with which operator), so the trace is the search itself, one attempt
per line, and its length is the number of attempts::

    <think>8*9=72|72+3=75|x
    9*3=27|27+8=35</think>9*3=27, left 27 8 -> 35<answer>9*3+8</answer>

An attempt combines two of the values left at each step (``a op b = c``, the larger operand
first for ``-``) until one value is left. It ends with ``|x`` when that value misses the
target, and with nothing when it hits it (the last line of a solved search). A slip (a step
with a wrong result) caught by the solver ends its line with ``!`` right after the step; the
next line retries the same path.

The summary after the trace states *locally checkable* claims about the best attempt (the hit,
or the attempt that ended closest to the target): every step of it but the last, the values
that leave (``left 27 8``) and where the attempt ended (``-> 35``). Each claim is checked with
one operation, and the last step is never shown: no summary holds an expression that uses
every number (:func:`agon_lightning.summarizers.hiding.mask_full_uses` enforces it for any
text). A challenger reading a summary checks each claim first, on the first line of its trace
(``9*3=27 y`` or, for a claim ``9*3=28``, ``9*3=27 n``), then searches from the state the true
claims reach before anything else.

At the token cap a draft is cut: a search still open has no summary (the challenger reads an
empty one) and no answer (a wrong one). More search costs the cap; none of it is rewarded unless
it ends in time.

Everything here is pure (the same numbers, target and ``rng`` state give the same text).
"""

from __future__ import annotations

import random
import re
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass, field

OPERATORS = ("+", "-", "*")
MISS, SLIP = "x", "!"
VERDICT_TRUE, VERDICT_FALSE = "y", "n"
# A slip is off by one of these (a wrong carry, a misremembered product).
SLIPS = (-10, -2, -1, 1, 2, 10)
# Claims as the summary writes them, and verdicts as a check line writes them.
CLAIM = re.compile(r"(\d+)\s*([+*-])\s*(\d+)\s*=\s*(-?\d+)")
VERDICT = re.compile(rf"(\d+)([+*-])(\d+)=(-?\d+) ([{VERDICT_TRUE}{VERDICT_FALSE}])")


def apply(op: str, left: int, right: int) -> int:
    """``left op right`` for one of :data:`OPERATORS`."""
    if op == "+":
        return left + right
    if op == "-":
        return left - right
    if op == "*":
        return left * right
    raise ValueError(f"operator must be one of {OPERATORS}, got {op!r}")


@dataclass(frozen=True)
class Step:
    """One combination ``left op right = result`` (``result`` is wrong in a slip)."""

    left: int
    op: str
    right: int
    result: int

    @property
    def correct(self) -> bool:
        """Whether the arithmetic is right."""
        return apply(self.op, self.left, self.right) == self.result

    def __str__(self) -> str:
        return f"{self.left}{self.op}{self.right}={self.result}"


@dataclass(frozen=True)
class Attempt:
    """One line of the trace: its steps and how it ended (``hit``, ``miss`` or ``slip``)."""

    steps: tuple[Step, ...]
    outcome: str

    def __str__(self) -> str:
        text = "|".join(map(str, self.steps))
        return text + {"hit": "", "miss": f"|{MISS}", "slip": SLIP}[self.outcome]

    @property
    def value(self) -> int:
        """Where the attempt ended."""
        return self.steps[-1].result


def after(pool: Sequence[int], steps: Sequence[Step]) -> list[int] | None:
    """The values left once ``steps`` are applied to ``pool`` in order (``None``: a step uses a
    value that is not there). The newest result comes first, the untouched values keep their order."""
    left = list(pool)
    for step in steps:
        for operand in (step.left, step.right):
            if operand not in left:
                return None
            left.remove(operand)
        left.insert(0, step.result)
    return left


def moves(pool: Sequence[int], operators: Sequence[str] = OPERATORS) -> list[tuple[Step, list[int]]]:
    """Every distinct next step from ``pool`` and the values it leaves (``-`` never goes negative)."""
    found: dict[Step, list[int]] = {}
    for i in range(len(pool)):
        for j in range(i + 1, len(pool)):
            big, small = max(pool[i], pool[j]), min(pool[i], pool[j])
            for op in operators:
                step = Step(big, op, small, apply(op, big, small))
                if step not in found:
                    rest = [v for k, v in enumerate(pool) if k not in (i, j)]
                    found[step] = [step.result, *rest]
    return list(found.items())


def first_step(step: Step) -> str:
    """How a summary names a step it tried first (``8*4``: operands and operator, no result)."""
    return f"{step.left}{step.op}{step.right}"


# ---------------------------------------------------------------------------------------------
# Depth-first search with a drawn ordering
# ---------------------------------------------------------------------------------------------

ORDERINGS = ("random", "closest", "largest")


def _ordered(options: list[tuple[Step, list[int]]], target: int, ordering: str, rng: random.Random):
    keys = [rng.random() for _ in options]  # the tie-break, drawn fresh at every node
    if ordering == "random":
        rank = keys
    elif ordering == "closest":
        rank = [(abs(step.result - target), k) for (step, _), k in zip(options, keys, strict=True)]
    elif ordering == "largest":
        rank = [(-step.result, k) for (step, _), k in zip(options, keys, strict=True)]
    else:
        raise ValueError(f"ordering must be one of {ORDERINGS}, got {ordering!r}")
    return [option for _, option in sorted(zip(rank, options, strict=True), key=lambda pair: pair[0])]


def leaves(
    pool: Sequence[int],
    target: int,
    ordering: str,
    rng: random.Random,
    prefix: Sequence[Step] = (),
    operators: Sequence[str] = OPERATORS,
    last: Collection[str] = (),
) -> Iterator[tuple[Step, ...]]:
    """Every complete path from ``pool`` (one value left), depth first in the drawn ``ordering``.

    Paths through ``prefix`` (steps to try first, e.g. a rival's true claims) come before the
    rest; first steps named in ``last`` (``"8*4"``, e.g. the ones a failed rival tried) come
    after the rest; at each node the children are ranked by ``ordering`` (``random``;
    ``closest``: the result nearest the target first; ``largest``: the largest result first),
    ties broken by ``rng``.
    """

    def walk(values: list[int], path: tuple[Step, ...]) -> Iterator[tuple[Step, ...]]:
        if len(values) == 1:
            yield path
            return
        options = _ordered(moves(values, operators), target, ordering, rng)
        depth = len(path)
        if depth == 0 and last:
            options.sort(key=lambda option: first_step(option[0]) in last)
        if depth < len(prefix):
            options.sort(key=lambda option: option[0] != prefix[depth])
        for step, rest in options:
            yield from walk(rest, (*path, step))

    yield from walk(list(pool), ())


@dataclass(frozen=True)
class SearchStyle:
    """How one generated search goes.

    Attributes:
        ordering: One of :data:`ORDERINGS`.
        slip_rate: Chance that an attempt slips (one step off by one of :data:`SLIPS`), is
            caught (``!``) and is retried on the next line.
        max_attempts: Attempts the search may write; a longer one writes its first
            ``max_attempts - 1`` misses, then the hit (so the paths it tries first stay);
            0: no limit, every attempt is written (the search never skips to a hit it has not
            reached).
        give_up_after: Stop after this many misses without a hit (a failed search; 0: never).
    """

    ordering: str = "closest"
    slip_rate: float = 0.0
    max_attempts: int = 8
    give_up_after: int = 0

    def __post_init__(self) -> None:
        if self.ordering not in ORDERINGS:
            raise ValueError(f"ordering must be one of {ORDERINGS}, got {self.ordering!r}")
        if not 0.0 <= self.slip_rate <= 1.0 or self.max_attempts < 0 or self.give_up_after < 0:
            raise ValueError(
                "need slip_rate in [0, 1], max_attempts >= 0, give_up_after >= 0; got "
                f"{self.slip_rate}, {self.max_attempts}, {self.give_up_after}"
            )


def _slipped(path: tuple[Step, ...], rng: random.Random) -> Attempt:
    at = rng.randrange(len(path))
    wrong = path[at].result + rng.choice(SLIPS)
    return Attempt((*path[:at], Step(path[at].left, path[at].op, path[at].right, wrong)), "slip")


def search(
    numbers: Sequence[int],
    target: int,
    style: SearchStyle,
    rng: random.Random,
    prefix: Sequence[Step] = (),
    last: Collection[str] = (),
) -> list[Attempt]:
    """The attempts of a depth-first search for ``target``, in the order the trace writes them.

    Ends at the first hit, or after ``style.give_up_after`` misses. A search longer than
    ``style.max_attempts`` (when not 0) writes its first ``max_attempts - 1`` misses, then the
    hit. Slips (each attempt with chance ``style.slip_rate``) come before the attempt they
    slipped on. ``prefix`` and ``last`` order the search as in :func:`leaves`.
    """
    misses: list[tuple[Step, ...]] = []
    hit = None
    for path in leaves(numbers, target, style.ordering, rng, prefix, last=last):
        if path[-1].result == target:
            hit = path
            break
        misses.append(path)
        if style.give_up_after and len(misses) >= style.give_up_after:
            break
    kept = misses[: style.max_attempts - 1] if style.max_attempts else misses
    lines = [Attempt(path, "miss") for path in kept]
    if hit is not None:
        lines.append(Attempt(hit, "hit"))
    written: list[Attempt] = []
    for line in lines:
        if rng.random() < style.slip_rate:
            written.append(_slipped(line.steps, rng))
        written.append(line)
    return written


# ---------------------------------------------------------------------------------------------
# Summary, answer and check line
# ---------------------------------------------------------------------------------------------


def best(attempts: Sequence[Attempt], target: int) -> Attempt | None:
    """The hit, else the first attempt that ended nearest the target (slips never count)."""
    finished = [a for a in attempts if a.outcome != "slip"]
    return min(finished, key=lambda a: abs(a.value - target), default=None)


# A failed search's summary names at most this many first steps it tried (with two claims at
# most, a summary then holds no more pieces of arithmetic than the hiding rule reads).
MAX_TRIED = 4
_TRIED = re.compile(r"tried((?:\s+\d+[+*-]\d+)+)")
_REACHED = re.compile(r"->\s*(-?\d+)")


@dataclass(frozen=True)
class Summary:
    """The claims a summary states: steps, the values they leave, where the attempt ended, and,
    for a search that missed, the first steps it tried (``tried 8*4 8+4``)."""

    claims: tuple[Step, ...]
    left: tuple[int, ...]
    reached: int
    tried: tuple[str, ...] = ()

    def __str__(self) -> str:
        parts = [*map(str, self.claims), f"left {' '.join(map(str, self.left))} -> {self.reached}"]
        if self.tried:
            parts.append("tried " + " ".join(self.tried))
        return ", ".join(parts)


def tried_first(attempts: Sequence[Attempt], limit: int = MAX_TRIED) -> tuple[str, ...]:
    """The distinct first steps of the finished attempts, in the order tried (at most ``limit``):
    what a search that missed tells a reader to try last."""
    finished = [a for a in attempts if a.outcome != "slip"]
    seen: list[str] = []
    for attempt in finished:
        name = first_step(attempt.steps[0])
        if name not in seen:
            seen.append(name)
    return tuple(seen[:limit])


def summary_of(numbers: Sequence[int], attempt: Attempt, tried: Sequence[str] = ()) -> Summary:
    """Every step of ``attempt`` but the last, the values they leave, the value reached, and the
    first steps ``tried`` (given only for a search that missed)."""
    claims = attempt.steps[:-1]
    left = after(numbers, claims)
    if left is None:
        raise ValueError(f"attempt {attempt} does not start from {list(numbers)}")
    return Summary(claims, tuple(left), attempt.value, tuple(tried))


def summarize_search(
    numbers: Sequence[int], target: int, attempts: Sequence[Attempt], top: Attempt | None = None
) -> Summary:
    """The summary a search writes: the claims of its best attempt (or of ``top``, the one it
    reports) and, when that attempt missed the target, the first steps the search tried (so a
    reader can look elsewhere first)."""
    top = best(attempts, target) if top is None else top
    if top is None:
        raise ValueError(f"no attempt for {list(numbers)} -> {target}")
    return summary_of(numbers, top, tried_first(attempts) if top.value != target else ())


def parse_tried(summary: str) -> tuple[str, ...]:
    """The first steps a summary says its search tried (``tried 8*4 8+4`` → ``("8*4", "8+4")``)."""
    found = _TRIED.search(summary)
    return tuple(found[1].split()) if found else ()


def parse_reached(summary: str) -> int | None:
    """The value a summary says its best attempt reached (``-> 35``), or ``None``."""
    found = _REACHED.search(summary)
    return int(found[1]) if found else None


_PRECEDENCE = {"+": 1, "-": 1, "*": 2}


def expression(numbers: Sequence[int], steps: Sequence[Step]) -> str:
    """The expression the ``steps`` build from ``numbers`` (parentheses only where needed)."""
    pool: list[tuple[int, str, int]] = [(n, str(n), 3) for n in numbers]  # value, text, precedence

    def take(value: int) -> tuple[str, int]:
        for k, (v, text, prec) in enumerate(pool):
            if v == value:
                del pool[k]
                return text, prec
        raise ValueError(f"steps use {value}, which is not among the values left")

    for step in steps:
        (left, lp), (right, rp) = take(step.left), take(step.right)
        mine = _PRECEDENCE[step.op]
        left = f"({left})" if lp < mine else left
        right = f"({right})" if rp < mine or (step.op == "-" and rp == mine) else right
        pool.insert(0, (step.result, f"{left}{step.op}{right}", mine))
    if len(pool) != 1:
        raise ValueError(f"steps leave {len(pool)} values, not one")
    return pool[0][1]


def check_line(claims: Sequence[Step]) -> str:
    """Each claim redone (``a op b`` and its true result) with its verdict, ``|``-separated."""
    verdicts = (VERDICT_TRUE if c.correct else VERDICT_FALSE for c in claims)
    return "|".join(
        f"{c.left}{c.op}{c.right}={apply(c.op, c.left, c.right)} {v}" for c, v in zip(claims, verdicts)
    )


def true_prefix(numbers: Sequence[int], claims: Sequence[Step]) -> tuple[Step, ...]:
    """The claims before the first false one, as long as they apply to ``numbers`` in order."""
    prefix: list[Step] = []
    for claim in claims:
        if not claim.correct or after(numbers, [*prefix, claim]) is None:
            break
        prefix.append(claim)
    return tuple(prefix)


def parse_claims(summary: str) -> list[Step]:
    """The ``a op b = c`` claims a summary states, in order."""
    return [Step(int(a), op, int(b), int(c)) for a, op, b, c in CLAIM.findall(summary)]


def parse_verdicts(trace: str) -> list[tuple[Step, bool]]:
    """The verdicts on the first line of a trace (``9*3=27 y``): each redone claim, and whether it
    was judged true."""
    first = trace.split("\n", 1)[0]
    return [
        (Step(int(a), op, int(b), int(c)), v == VERDICT_TRUE) for a, op, b, c, v in VERDICT.findall(first)
    ]


@dataclass
class Completion:
    """A whole completion: the trace's lines, then summary and answer.

    Attributes:
        lines: The trace's lines (attempts, and a check line for a challenger).
        summary: The post-reasoning summary (``None``: none is written).
        answer: The final expression.
    """

    lines: list[str] = field(default_factory=list)
    summary: str | None = None
    answer: str = ""

    def __str__(self) -> str:
        return f"<think>{chr(10).join(self.lines)}</think>{self.summary or ''}<answer>{self.answer}</answer>"


def solve(
    numbers: Sequence[int],
    target: int,
    style: SearchStyle,
    rng: random.Random,
    rival_summary: str | None = None,
) -> Completion:
    """A completion for the problem: a drawn search, and its summary and answer.

    With ``rival_summary`` (a challenger), the trace opens with the check of each of its claims.
    A rival that says it reached the target is built on: the search tries the path through its
    true claims first. A rival that missed says which first steps it tried: the search tries
    them last (its own ordering otherwise), so it covers ground the rival did not.
    """
    claims = parse_claims(rival_summary) if rival_summary else []
    reached = parse_reached(rival_summary) if rival_summary else None
    missed = reached is not None and reached != target
    prefix = () if missed else true_prefix(numbers, claims)
    last = parse_tried(rival_summary) if missed and rival_summary else ()
    attempts = search(numbers, target, style, rng, prefix, last)
    top = best(attempts, target)
    if top is None:
        raise ValueError(f"no attempt for {list(numbers)} -> {target}")
    lines = ([check_line(claims)] if claims else []) + [str(a) for a in attempts]
    summary = summarize_search(numbers, target, attempts)
    return Completion(lines, str(summary), expression(numbers, top.steps))

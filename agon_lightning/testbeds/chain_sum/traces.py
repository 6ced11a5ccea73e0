"""Worked solutions for arithmetic problems, written in the completion format the game uses.

A supervised warm-start teaches a base model the shape RL will reward: a short trace of
elementary steps inside ``<think>…</think>``, then a one-line summary of the intermediate
results *before the last step*, then ``<answer>…</answer>``::

    <think>42-25=17 17-73=-56 -56+30=-26</think>17,-56<answer>-26</answer>

The summary is what the rival reads (the text after the trace with the answer cut out, and
any restatement of the answer masked), so it carries the partial results a challenger can
check and build on, but never the final result: the rival still has to do the last step
itself, and a slipped step in the summary is there to be caught. The functions here build that
text from a reasoning-gym problem, and a *corrupted* version of it (one step gets a wrong
result, later steps carry the error on) so a challenger can be shown plausible wrong drafts.
They are pure: same problem and seed, same text.
"""

from __future__ import annotations

import ast
import random
from dataclasses import dataclass

from agon_lightning.game.types import Problem

# reasoning-gym tasks whose entries carry an integer ``expression`` in their metadata.
ARITHMETIC_TASKS = ("basic_arithmetic", "chain_sum")

# A wrong step is off by one of these: slips of one, of a carry, of a borrow.
_SLIPS = (-10, -2, -1, 1, 2, 10)


@dataclass(frozen=True)
class Step:
    """One elementary operation: ``left op right = result`` (``op`` is ``+ - * /`` or ``neg``)."""

    op: str
    left: int
    right: int | None
    result: int

    def __str__(self) -> str:
        if self.op == "neg":
            return f"-({self.left})={self.result}"
        return f"{self.left}{self.op}{self.right}={self.result}"


def _apply(op: str, left: int, right: int | None) -> int:
    if op == "neg":
        return -left
    assert right is not None
    if op == "+":
        return left + right
    if op == "-":
        return left - right
    if op == "*":
        return left * right
    return left // right  # reasoning-gym evaluates "/" as floor division


_BINARY = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/"}


def evaluate(expression: str, slip_at: int | None = None, slip: int = 0) -> tuple[list[Step], int]:
    """``(steps, value)``: the elementary steps that evaluate ``expression``, and its value.

    Steps come innermost first, left to right.

    Negative literals (``-13``) are numbers, not steps; negating a parenthesised group is a
    step. An expression that is a bare number has no steps.

    Args:
        expression: Integer arithmetic with ``+ - * /`` (floor division) and parentheses.
        slip_at: Index of a step whose result is off by ``slip``; later steps use the wrong
            value, as a solver who slipped would. ``None`` evaluates correctly.
        slip: The error added at ``slip_at``.

    Raises:
        ValueError: If ``expression`` is not such arithmetic, or divides by zero.
    """
    try:
        tree = ast.parse(expression.strip(), mode="eval").body
    except SyntaxError as err:
        raise ValueError(f"not an arithmetic expression: {expression!r}") from err
    steps: list[Step] = []

    def record(op: str, left: int, right: int | None) -> int:
        if op == "/" and right == 0:
            raise ValueError(f"division by zero in {expression!r}")
        result = _apply(op, left, right) + (slip if len(steps) == slip_at else 0)
        steps.append(Step(op, left, right, result))
        return result

    def visit(node: ast.expr) -> int:
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return node.value
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            value = visit(node.operand)
            if isinstance(node.op, ast.UAdd):
                return value
            # -13 is a number; -(a + b) is a step.
            return -value if isinstance(node.operand, ast.Constant) else record("neg", value, None)
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            left, right = visit(node.left), visit(node.right)
            return record(_BINARY[type(node.op)], left, right)
        raise ValueError(
            f"unsupported element {ast.dump(node)} in {expression!r}: only integers, + - * / and parentheses"
        )

    value = visit(tree)
    return steps, value


def format_completion(steps: list[Step], answer: str, summary_steps: int | None = None) -> str:
    """``<think>`` steps ``</think>`` summary ``<answer>`` answer ``</answer>``.

    The summary lists the intermediate results of every step but the last (the last one's is
    the answer), or of the first ``summary_steps`` of them (a partial write-up).
    """
    trace = " ".join(str(step) for step in steps)
    shown = steps[:-1] if summary_steps is None else steps[: max(0, min(summary_steps, len(steps) - 1))]
    summary = ",".join(str(step.result) for step in shown)
    return f"<think>{trace}</think>{summary}<answer>{answer}</answer>"


def problem_expression(problem: Problem) -> str:
    """The arithmetic expression behind a reasoning-gym problem made by ``generate_problems``.

    Raises:
        ValueError: If the problem is not from one of :data:`ARITHMETIC_TASKS`.
    """
    task = problem.metadata.get("task")
    if task not in ARITHMETIC_TASKS:
        raise ValueError(
            f"no worked solutions for task {task!r}; supported tasks: {', '.join(ARITHMETIC_TASKS)}"
        )
    return problem.metadata["entry"]["metadata"]["expression"]


def target_completion(problem: Problem) -> str:
    """The correct worked solution of ``problem`` in the game's completion format.

    Raises:
        ValueError: If the task is unsupported, or the steps do not reach the gold answer.
    """
    steps, value = evaluate(problem_expression(problem))
    answer = str(value)
    if problem.answer is not None and answer != problem.answer.strip():
        raise ValueError(
            f"worked solution of {problem.question!r} gives {answer}, the gold answer is {problem.answer}"
        )
    return format_completion(steps, answer)


def corrupted_completion(problem: Problem, rng: random.Random) -> str:
    """A plausible wrong solution: one step (chosen by ``rng``) slips by a small amount.

    Later steps carry the wrong value on, so for ``+``/``-`` chains the answer is wrong too
    (a product with zero can absorb a slip). A problem with no steps gets a wrong answer.
    """
    expression = problem_expression(problem)
    steps, value = evaluate(expression)
    if not steps:
        return format_completion([], str(value + rng.choice(_SLIPS)))
    for _ in range(8):
        try:
            steps, value = evaluate(expression, slip_at=rng.randrange(len(steps)), slip=rng.choice(_SLIPS))
        except ValueError:  # the slip made a divisor zero: slip elsewhere
            continue
        return format_completion(steps, str(value))
    raise ValueError(f"could not corrupt {expression!r} without dividing by zero")

"""MathVerifier: right on every fixture answer type, bounded in time, safe to copy and fork."""

from __future__ import annotations

import json
import multiprocessing as mp
import pickle
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agon_lightning.game.types import Problem
from agon_lightning.verifiers.math import MathVerifier

FIXTURE = Path(__file__).parent / "fixtures" / "deepmath_fixture.jsonl"
ROWS = [json.loads(line) for line in FIXTURE.read_text().splitlines()]
# None finishes within 60 s in math-verify with its own timeouts off (parse + verify, measured).
ADVERSARIAL = ["9^{9^{9^{9}}}", "10^{10^{10}}", "(x+1)^{100000}"]
# The time-bound tests use a tight bound; the correctness tests a loose one, so that a check
# slowed down by a busy machine is not ruled a timeout.
BOUND_S = 1.0
LOOSE_S = 20.0
# Killing a worker and reading the verdict back; generous for a loaded 2-core machine.
SLACK_S = 0.75

# final_answer → (an equivalent answer in another notation, a non-equivalent one).
ANSWERS = {
    "\\frac{1}{2}": ("\\dfrac{1}{2}", "\\frac{1}{3}"),
    "\\dfrac{1}{6}": ("\\frac{1}{6}", "\\frac{5}{36}"),
    "0.5": ("\\frac12", "0.05"),
    "[0, 1)": ("[0,1)", "(0, 1]"),
    "(-\\infty, 2]": ("(-\\infty,2]", "(-\\infty, 2)"),
    "\\{1, 2, 3\\}": ("\\{3, 2, 1\\}", "\\{1, 2\\}"),
    "\\begin{pmatrix} 7 & 10 \\\\ 15 & 22 \\end{pmatrix}": (
        "\\begin{bmatrix}7&10\\\\15&22\\end{bmatrix}",
        "\\begin{pmatrix} 7 & 15 \\\\ 10 & 22 \\end{pmatrix}",
    ),
    "No": ("\\text{No}", "\\text{Yes}"),
    "30^\\circ": ("30^{\\circ}", "60^\\circ"),
    "2\\sqrt{2}": ("\\sqrt{8}", "\\sqrt{2}"),
    "12": ("12.0", "10"),
    "e^{-1}": ("\\frac{1}{e}", "e"),
    "\\frac{\\pi}{4}": ("\\dfrac{\\pi}{4}", "\\frac{\\pi}{2}"),
    "3": ("3.0", "4"),
    "4": ("4.0", "5"),
    "2": ("2.0", "4"),
    "\\dfrac{3}{4}": ("0.75", "\\frac{4}{3}"),
}


def qwen3(answer: str, trace: str = "Let me check that carefully.", opened: bool = True) -> str:
    """A Qwen3 thinking-mode completion ending in ``\\boxed{answer}``."""
    head = "<think>\n" if opened else ""
    summary = "The computation above gives the result."
    return f"{head}{trace}\n</think>\n\n{summary}\n\n\\[\n\\boxed{{{answer}}}\n\\]"


def problem(answer: str) -> Problem:
    return Problem(question="q", answer=answer)


@pytest.fixture(scope="module")
def verifier():
    v = MathVerifier(timeout_s=LOOSE_S, num_workers=2)
    yield v
    v.close()


@pytest.fixture(scope="module")
def bounded():
    v = MathVerifier(timeout_s=BOUND_S, num_workers=2)
    yield v
    v.close()


def test_every_fixture_answer_type(verifier):
    assert {row["final_answer"] for row in ROWS} == set(ANSWERS)
    completions, problems, expected = [], [], []
    for row in ROWS:
        gold = row["final_answer"]
        same, other = ANSWERS[gold]
        for text, ok in [(row["r1_solution_1"], True), (qwen3(same), True), (qwen3(other), False)]:
            completions.append(text)
            problems.append(problem(gold))
            expected.append(ok)
    verdicts = verifier.verify_batch(completions, problems)
    got = [(v.correct, v.reason) for v in verdicts]
    want = [(ok, "ok" if ok else "wrong_answer") for ok in expected]
    assert got == want
    assert [v.extracted for v in verdicts[1::3]] == [ANSWERS[row["final_answer"]][0] for row in ROWS]


def test_the_last_box_after_the_trace_wins(verifier):
    corrected = "<think>\nhmm\n</think>\n\nFirst I got $\\boxed{10}$, but I miscounted: it is $\\boxed{12}$."
    regressed = "<think>\nhmm\n</think>\n\nFirst I got $\\boxed{12}$; on reflection, $\\boxed{10}$."
    in_trace_only = "<think>\nmaybe \\boxed{12}\n</think>\n\nI am not sure."
    trace_right_tail_wrong = "<think>\nit is \\boxed{12}\n</think>\n\nSo \\boxed{10}."
    texts = [corrected, regressed, in_trace_only, trace_right_tail_wrong]
    verdicts = verifier.verify_batch(texts, [problem("12")] * len(texts))
    assert [(v.correct, v.reason, v.extracted) for v in verdicts] == [
        (True, "ok", "12"),
        (False, "wrong_answer", "10"),
        (False, "no_answer", None),
        (False, "wrong_answer", "10"),
    ]


def test_answer_tag_reads_the_last_finished_answer_block():
    """``answer="tag"``: the paper's parsing. ``\\boxed{}`` alone is no answer; the default reads only boxes."""
    tagged = MathVerifier(timeout_s=LOOSE_S, num_workers=1, answer="tag")
    head = "<think>\nhmm\n</think>\n\n"
    cases = {
        "<answer>12</answer>": (True, "ok", "12"),
        "<answer>$12.0$</answer>": (True, "ok", "$12.0$"),  # math-verify reads it wrapped in \boxed{}
        "<answer>\\boxed{\\frac{24}{2}}</answer>": (True, "ok", "\\boxed{\\frac{24}{2}}"),
        "<answer>10</answer>, no: <answer>12</answer>": (True, "ok", "12"),  # the last block
        "<answer>12</answer>, no: <answer>10</answer>": (False, "wrong_answer", "10"),
        "So \\boxed{12}.": (False, "no_answer", None),  # a box is no tag
        "So <answer>12": (False, "no_answer", None),  # left open: cut off
    }
    try:
        verdicts = tagged.verify_batch([head + c for c in cases], [problem("12")] * len(cases))
        assert [(v.correct, v.reason, v.extracted) for v in verdicts] == list(cases.values())
        in_trace = "<think>\n<answer>12</answer>\n</think>\n\nnot sure"
        assert tagged.verify(in_trace, problem("12")).reason == "no_answer"
    finally:
        tagged.close()
    assert MathVerifier().answer == "boxed"
    with pytest.raises(ValueError, match="answer must be one of \\('tag', 'boxed'\\), got 'xml'"):
        MathVerifier(answer="xml")


def test_gold_goes_first(verifier):
    # math-verify accepts an interval for an inequality gold, not an inequality for an interval gold.
    assert verifier.verify(qwen3("(1, 2)"), problem("1 < x < 2")).correct
    assert not verifier.verify(qwen3("1 < x < 2"), problem("(1, 2)")).correct


def test_format_failures_are_wrong_with_a_reason(verifier):
    cases = {
        "\\boxed{2}": "no_think_close",  # no trace at all in thinking mode
        "<think>\nstill thinking \\boxed{2}": "no_think_close",  # cut off inside the trace
        "<think>\nok\n</think>\n\nThe answer is 2.": "no_answer",
        "<think>\nok\n</think>\n\n\\boxed{ }": "no_answer",
        "<think>\nok\n</think>\n\n\\boxed{2": "no_answer",  # unbalanced
    }
    verdicts = verifier.verify_batch(list(cases), [problem("2")] * len(cases))
    assert [(v.correct, v.score, v.reason) for v in verdicts] == [(False, 0.0, r) for r in cases.values()]


def test_thinking_only_checkpoints_and_non_thinking_mode(verifier):
    assert verifier.verify(qwen3("\\dfrac{1}{2}", opened=False), problem("\\frac{1}{2}")).correct
    relaxed = MathVerifier(timeout_s=LOOSE_S, num_workers=1, require_thinking=False)
    try:
        assert relaxed.verify("So $\\boxed{\\dfrac{1}{2}}$.", problem("\\frac{1}{2}")).correct
        assert relaxed.verify("<think>cut off \\boxed{0.5}", problem("0.5")).reason == "no_think_close"
    finally:
        relaxed.close()


def test_bad_calls_raise_naming_the_problem(verifier):
    with pytest.raises(ValueError, match="gold answer"):
        verifier.verify(qwen3("1"), Problem("what is one?", None))
    with pytest.raises(ValueError, match="one problem per completion"):
        verifier.verify_batch(["a", "b"], [problem("1")])
    with pytest.raises(ValueError, match="timeout_s must be > 0"):
        MathVerifier(timeout_s=0)


def test_adversarial_answer_costs_at_most_the_bound(bounded):
    for expression in ADVERSARIAL:
        bounded.start()  # workers (re)started and ready: time the check alone
        start = time.monotonic()
        verdict = bounded.verify(qwen3(expression), problem("5"))
        elapsed = time.monotonic() - start
        assert verdict.reason == "timeout" and not verdict.correct
        assert BOUND_S <= elapsed < BOUND_S + SLACK_S, f"{expression}: {elapsed:.2f} s"
    # The killed workers were replaced: the verifier still works.
    assert bounded.verify(qwen3("0.5"), problem("0.5")).correct


def test_a_batch_is_checked_in_parallel(bounded):
    bounded.start()
    start = time.monotonic()
    verdicts = bounded.verify_batch([qwen3(e) for e in ADVERSARIAL[:2]], [problem("5")] * 2)
    elapsed = time.monotonic() - start
    assert [v.reason for v in verdicts] == ["timeout", "timeout"]
    assert elapsed < 2 * BOUND_S, f"two workers took {elapsed:.2f} s for two timeouts"


def _verify_in_child(verifier: MathVerifier, queue) -> None:
    verdict = verifier.verify(qwen3("\\dfrac{3}{4}"), problem("0.75"))
    queue.put((verdict.correct, verifier._pool.owner_pid))
    verifier.close()


def test_pickled_and_forked_copies_start_their_own_workers(verifier):
    verifier.verify(qwen3("0.5"), problem("\\frac12"))
    parent_workers = [w.process.pid for w in verifier._pool.workers]
    copy = pickle.loads(pickle.dumps(verifier))
    assert copy._pool is None and copy.verify(qwen3("0.75"), problem("\\dfrac{3}{4}")).correct
    copy.close()
    # A dataloader worker forks the trainer: the child must not use or stop the parent's workers.
    context = mp.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_verify_in_child, args=(verifier, queue))
    child.start()
    correct, child_owner = queue.get(timeout=60)
    child.join(timeout=60)
    assert correct and child.exitcode == 0 and child_owner == child.pid
    assert [w.process.pid for w in verifier._pool.workers] == parent_workers
    assert all(w.process.poll() is None for w in verifier._pool.workers)
    assert verifier.verify(qwen3("0.5"), problem("\\frac12")).correct


def test_close_stops_the_workers_and_a_later_check_restarts_them():
    v = MathVerifier(timeout_s=LOOSE_S, num_workers=1)
    assert v.verify(qwen3("0.5"), problem("\\frac12")).correct
    processes = [w.process for w in v._pool.workers]
    v.close()
    assert all(p.poll() is not None for p in processes)
    assert v.verify(qwen3("0.5"), problem("\\frac12")).correct
    v.close()


PIECES = ["\\boxed{", "}", "{", "</think>", "<think>", "\\frac", "^", "9", "x", "\\sqrt", "(", ")", "[", "]",
          ",", "\\infty", "\\{", "\\}", "&", "\\\\", "\\begin{pmatrix}", "\\end{pmatrix}", "=", "\\text{",
          "e", "!", ".", " ", "\\circ", "<", "\\le", "$", "\\pi", "-", "1", "0"]  # fmt: skip
latexish = st.one_of(st.lists(st.sampled_from(PIECES), max_size=40).map("".join), st.text(max_size=80))


@pytest.fixture(scope="module")
def single():
    v = MathVerifier(timeout_s=BOUND_S, num_workers=1)
    yield v
    v.close()


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(completion=st.one_of(latexish, latexish.map(qwen3)), gold=latexish.filter(str.strip))
def test_random_text_never_raises_and_never_exceeds_the_bound(single, completion, gold):
    single.start()  # waits for a worker restarted after a timeout: start-up is not check time
    start = time.monotonic()
    verdict = single.verify(completion, problem(gold))
    elapsed = time.monotonic() - start
    assert isinstance(verdict.correct, bool) and verdict.reason
    assert elapsed < BOUND_S + SLACK_S, f"{elapsed:.2f} s"

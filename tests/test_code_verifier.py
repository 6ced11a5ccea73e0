"""The code verifier and summarizer: real human solutions pass, their off-by-one copies fail.

The real rows are the 30 Codeforces problems in ``<repo>/../shared/data/codecontests/`` (skipped
when absent); the shipped fixture (hand-written, same schema) runs everywhere.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agon_lightning.code.judge import extract_program, outputs_match, tokens_match
from agon_lightning.data.codecontests import row_to_problem
from agon_lightning.game.text import code_blocks
from agon_lightning.game.types import Problem
from agon_lightning.summarizers.code import CodeSummarizer
from agon_lightning.verifiers.code import CodeVerifier

ROOT = Path(__file__).resolve().parents[1]
SHARED_SAMPLE = ROOT.parent / "shared" / "data" / "codecontests" / "codecontests_train_sample30.jsonl"
FIXTURE = ROOT / "tests" / "fixtures" / "codecontests_fixture.jsonl"
PYTHON3 = 3

# Runs the solution with its stdout on a pipe, then prints that output with its first number
# (or, when it has none, its first token) changed: the same program, its output off by one.
OFF_BY_ONE = """\
import os as _os, re as _re, sys as _sys
_r, _w = _os.pipe()
if _os.fork():
    _os.close(_w)
    _out = b""
    while _chunk := _os.read(_r, 1 << 16):
        _out += _chunk
    _status = _os.wait()[1]
    _text = _out.decode()
    _m = _re.search(r"(?<!\\S)-?\\d+(?!\\S)", _text)
    if _m:
        _text = _text[: _m.start()] + str(int(_m.group()) + 1) + _text[_m.end() :]
    else:
        _text = "x" + _text.lstrip()
    _sys.stdout.write(_text)
    _sys.stdout.flush()
    _os._exit(_os.waitstatus_to_exitcode(_status))
_os.close(_r)
_os.dup2(_w, 1)
_os.close(_w)
"""


def load_rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def fenced(program: str) -> str:
    return f"<think>\nLet me think.\n</think>\nThe approach.\n\n```python\n{program}\n```\n"


def human_solution(row: dict) -> str:
    solutions = row["solutions"]
    return next(s for lang, s in zip(solutions["language"], solutions["solution"]) if lang == PYTHON3)


def judge_solutions(rows: list[dict]) -> tuple[list, list]:
    verifier = CodeVerifier()
    problems = [row_to_problem(row) for row in rows]
    originals = verifier.verify_batch([fenced(human_solution(r)) for r in rows], problems)
    mutants = verifier.verify_batch([fenced(OFF_BY_ONE + human_solution(r)) for r in rows], problems)
    return originals, mutants


@pytest.mark.skipif(not SHARED_SAMPLE.exists(), reason=f"shared sample not found at {SHARED_SAMPLE}")
def test_every_human_solution_passes_and_its_off_by_one_copy_fails():
    rows = load_rows(SHARED_SAMPLE)
    assert len(rows) == 30
    originals, mutants = judge_solutions(rows)
    names = [row["name"] for row in rows]
    assert [
        n for n, v in zip(names, originals) if not (v.correct and v.reason == "ok" and v.score == 1.0)
    ] == []
    assert [n for n, v in zip(names, mutants) if v.correct or v.reason != "wrong_answer"] == []


def test_fixture_solutions_pass_and_off_by_one_copies_fail():
    rows = [r for r in load_rows(FIXTURE) if not r["input_file"] and r["public_tests"]["input"]]
    originals, mutants = judge_solutions(rows)
    assert [v.reason for v in originals] == ["ok"] * len(rows)
    assert [v.reason for v in mutants] == ["wrong_answer"] * len(rows)


# --- outcomes -----------------------------------------------------------------------------------

ADD = Problem("add", metadata={"tests": [{"input": f"{i} {i}\n", "output": f"{2 * i}\n"} for i in range(3)]})


@pytest.mark.parametrize(
    "completion, reason",
    [
        ("I cannot solve this.", "no_code"),
        ("<think>\n```python\nprint(1)\n```\nstill thinking", "no_code"),  # cut off inside the trace
        ("```python\nprint(1\n```", "syntax_error"),
        ("```python\nprint('a\\0b')\x00\n```", "syntax_error"),
        ("```python\nprint(1 / 0)\n```", "runtime_error"),
        ("```python\nprint(7)\n```", "wrong_answer"),
        ("```python\na, b = map(int, input().split())\nprint(a + b)\n```", "ok"),
    ],
)
def test_reasons(completion, reason):
    verdict = CodeVerifier().verify(completion, ADD)
    assert verdict.reason == reason
    assert verdict.correct == (reason == "ok")


def test_problem_without_tests_is_never_correct():
    assert CodeVerifier().verify("```python\nprint(1)\n```", Problem("q")).reason == "no_tests"


def test_first_failure_stops_the_check_and_the_score_counts_passes():
    # Right on tests 0 and 2, wrong on test 1.
    program = "```python\na, b = map(int, input().split())\nprint(a + b + (a == 1))\n```"
    stop = CodeVerifier().verify(program, ADD)
    assert (stop.correct, stop.reason, stop.score) == (False, "wrong_answer", pytest.approx(1 / 3))
    go_on = CodeVerifier(stop_at_first_failure=False).verify(program, ADD)
    assert (go_on.reason, go_on.score) == ("wrong_answer", pytest.approx(2 / 3))


def test_time_limit_comes_from_the_problem_and_is_capped():
    verifier = CodeVerifier(default_time_limit=2.0, max_time_limit=3.0, time_scale=2.0)
    assert verifier.limits(Problem("q"))[0] == 3.0
    assert verifier.limits(Problem("q", metadata={"time_limit": 0.25}))[0] == 0.5
    slow = "```python\nimport time\nt = time.process_time()\nwhile time.process_time() - t < 0.4:\n    pass\nprint(0)\n```"
    tight = Problem("q", metadata={"tests": [{"input": "", "output": "0"}], "time_limit": 0.1})
    assert CodeVerifier(time_scale=1.0).verify(slow, tight).reason == "time_limit"
    assert CodeVerifier(time_scale=10.0).verify(slow, tight).reason == "ok"


def test_memory_limit_comes_from_the_problem():
    program = "```python\nx = bytearray(200 * 2**20)\nprint(0)\n```"
    roomy = Problem("q", metadata={"tests": [{"input": "", "output": "0"}], "memory_limit_bytes": 512 << 20})
    small = Problem("q", metadata={"tests": [{"input": "", "output": "0"}], "memory_limit_bytes": 128 << 20})
    assert CodeVerifier().verify(program, roomy).reason == "ok"
    assert CodeVerifier().verify(program, small).reason == "memory_limit"


def test_verify_batch_never_raises_on_garbage():
    garbage = ["", "```", "```python\n```", "\x00" * 10, "```python\n" + "(" * 5000 + "\n```", "<think>" * 3]
    verdicts = CodeVerifier().verify_batch(garbage, [ADD] * len(garbage))
    assert [v.correct for v in verdicts] == [False] * len(garbage)
    with pytest.raises(ValueError, match="one problem per completion"):
        CodeVerifier().verify_batch(["a"], [])


def test_bad_options_name_the_value():
    with pytest.raises(ValueError, match="'middle'"):
        CodeVerifier(block="middle")
    with pytest.raises(ValueError, match="max_tests"):
        CodeVerifier(max_tests=0)


# --- extraction and comparison --------------------------------------------------------------------

TWO_BLOCKS = (
    "Try:\n```python\nprint(1)\n```\nBetter:\n```py\nprint(2)\nprint(2)\n```\nDone.\n```text\nnot code\n```"
)


def test_extraction_picks_the_configured_block():
    assert extract_program(TWO_BLOCKS) == "print(2)\nprint(2)\n"
    assert extract_program(TWO_BLOCKS, block="first") == "print(1)\n"
    assert extract_program(TWO_BLOCKS, languages=["python"]) == "print(1)\n"
    assert extract_program("```\nprint(3)\n```") == "print(3)\n"  # untagged counts by default
    assert extract_program("```\nprint(3)\n```", languages=["python"]) is None
    assert extract_program("```python\nprint(1)\n") is None  # unclosed: cut off mid-program
    assert extract_program("<think>\n```python\nprint(1)\n```\n</think>no code") is None
    assert (
        extract_program("<think>\n```python\nprint(1)\n```\n</think>no code", search_thinking=True)
        == "print(1)\n"
    )
    assert extract_program("````python\nprint('```')\n````") == "print('```')\n"
    assert len(code_blocks(TWO_BLOCKS, languages=None)) == 3


def test_longest_block():
    assert extract_program(TWO_BLOCKS + "\n```python\nx\n```", block="longest") == "print(2)\nprint(2)\n"


@pytest.mark.parametrize(
    "expected, actual, match",
    [
        ("1 2\n3", "1\n2 3\n\n", True),  # whitespace-insensitive
        ("YES", "yes", True),  # case-insensitive
        ("0.333333", "0.3333333333", True),  # within 1e-5
        ("0.3333", "0.3334", False),
        ("1.5", "1.500000", True),
        ("100000000000000000", "100000000000000001", False),  # integers exactly, not as doubles
        ("007", "7", True),
        ("1 2", "1 2 3", False),
        ("nan", "NaN", True),
        ("10", "1_0", False),
        ("", "", True),
    ],
)
def test_outputs_match(expected, actual, match):
    assert outputs_match(expected, actual) is match


def test_token_tolerance_is_configurable():
    assert tokens_match("1.0", "1.01", tolerance=0.1) and not tokens_match("1.0", "1.01")


# --- the summarizer -------------------------------------------------------------------------------

DRAFT = (
    "<think>\nraw thoughts\n</think>\nUse a BFS over (node, parity).\n\n```python\nprint(1)\n```\n\nO(n + m)."
)


@pytest.mark.parametrize(
    "options, summary",
    [
        ({}, "Use a BFS over (node, parity).\n\nO(n + m)."),
        (
            {"placeholder": "[program omitted]"},
            "Use a BFS over (node, parity).\n\n[program omitted]\n\nO(n + m).",
        ),
        ({"remove": "none"}, "Use a BFS over (node, parity).\n\n```python\nprint(1)\n```\n\nO(n + m)."),
        ({"max_chars": 9}, "Use a BFS"),
    ],
)
def test_summary_is_the_approach_without_the_program(options, summary):
    assert CodeSummarizer(**options).summarize(DRAFT, Problem("q")) == summary


def test_summary_of_drafts_cut_off():
    summarizer = CodeSummarizer(empty_text="(no summary)")
    assert summarizer.summarize("<think>\nstill thinking", Problem("q"), truncated=True) == "(no summary)"
    cut_mid_program = "</think>Greedy by deadline.\n```python\nimport sys\nfor"
    assert summarizer.summarize(cut_mid_program, Problem("q"), truncated=True) == "Greedy by deadline."


def test_all_code_removes_every_block_and_only_blocks():
    summary = CodeSummarizer(remove="all_code").summarize(TWO_BLOCKS, Problem("q"))
    assert summary == "Try:\n\nBetter:\n\nDone."

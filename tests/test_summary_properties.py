"""No built-in summarizer hands the challenger an answer the draft gives (property-based).

Drafts are built from pieces whose answers the test knows — answer blocks and boxes with the
answer spelled as the graders would accept it, restatements (``114.0``, ``+114``,
``\\frac{228}{2}``), prose, a trace — and then cut off at a random character, as a draft that
hits its token budget is. The oracle is independent of the summarizers: what a challenger could
copy out of the summary (each piece of it between spaces and punctuation, with or without a sign)
is compared with every answer the draft stated, as ``ExactMatchVerifier`` compares answers and
by numeric value, as math-verify does for plain numbers.
"""

from __future__ import annotations

import re
from fractions import Fraction

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from agon_lightning.code.judge import extract_program
from agon_lightning.game.types import Problem
from agon_lightning.summarizers.basic import FullSummarizer, HiddenSummarizer, StripTraceSummarizer
from agon_lightning.summarizers.code import CodeSummarizer
from agon_lightning.summarizers.qwen3 import Qwen3Summarizer
from agon_lightning.verifiers.exact import normalize_answer

P = Problem("q", "0")
MATH_SUMMARIZERS = [
    StripTraceSummarizer(),
    StripTraceSummarizer(max_chars=12),
    FullSummarizer(),
    Qwen3Summarizer(),
    Qwen3Summarizer(require_thinking=False),
]
WORDS = ["so", "the", "answer", "is", "total", "x", "=", ",", ".", ":", "+", "-", "(", ")", "$", "\n"]


# --------------------------------------------------------------------------- the oracle
def number(text: str) -> Fraction | None:
    """``text`` as a plain number (integer, decimal, ``a/b``, ``\\frac{a}{b}``), else ``None``."""
    text = text.strip()
    frac = re.fullmatch(r"([+-]?)\\[dt]?frac\{(\d+)\}\{(\d+)\}", text) or re.fullmatch(
        r"([+-]?)(\d+)/(\d+)", text
    )
    if frac:
        value = Fraction(int(frac[2]), int(frac[3])) if int(frac[3]) else None
        return None if value is None else (-value if frac[1] == "-" else value)
    return Fraction(text) if re.fullmatch(r"[+-]?(\d+(\.\d+)?|\.\d+)", text) else None


def same_answer(copied: str, stated: str) -> bool:
    """Whether a challenger answering ``copied`` would be graded as answering ``stated``."""
    if normalize_answer(copied) == normalize_answer(stated):
        return True
    a, b = number(normalize_answer(copied)), number(normalize_answer(stated))
    return a is not None and a == b


def copyable(summary: str) -> set[str]:
    """What a challenger could lift out of ``summary`` as an answer."""
    pieces = {p for p in re.split(r"[\s,;:!?()\[\]=$]+", summary) if p}
    return pieces | {p.lstrip("+-") for p in pieces} | {p.rstrip(".") for p in pieces}


def leaked(summary: str, stated: set[str]) -> set[str]:
    return {piece for piece in copyable(summary) for value in stated if same_answer(piece, value)}


# --------------------------------------------------------------------------- math drafts
def spellings(value: int) -> list[str]:
    """Ways to write ``value`` that a grader reads as ``value``."""
    forms = [
        str(value),
        f"{value}.0",
        f"{value}.00",
        f"\\frac{{{2 * value}}}{{2}}" if value >= 0 else str(value),
    ]
    return forms + ([f"+{value}", f"{2 * value}/2"] if value >= 0 else [])


@st.composite
def math_drafts(draw) -> tuple[str, set[str]]:
    """A draft and every answer it states (as much of each as survives the cut), cut off at random."""
    answers = draw(st.lists(st.integers(-300, 300), min_size=1, max_size=3))
    words = st.one_of(st.integers(-300, 300).map(str), st.sampled_from(WORDS))
    prose = st.lists(words, max_size=6).map(" ".join)

    def answer_piece(kind: str) -> tuple[str, int, int]:
        """An answer block or box: the piece, where its content starts, the content's length."""
        spelled = draw(st.sampled_from(spellings(draw(st.sampled_from(answers)))))
        opener, closer = ("<answer>", "</answer>") if kind == "tag" else ("\\boxed{", "}")
        return opener + spelled + closer, len(opener), len(spelled)

    pieces: list[tuple[str, int, int] | str] = []
    head = draw(st.sampled_from(["<think>", "", None]))  # "": thinking-only checkpoint; None: no trace
    if head is not None:
        pieces.append(head + draw(prose))
        if draw(st.booleans()):  # the trace states an answer too
            pieces.append(answer_piece("box"))
        pieces.append("</think>")
    for _ in range(draw(st.integers(1, 5))):
        what = draw(st.sampled_from(["prose", "restate", "tag", "box"]))
        if what == "prose":
            pieces.append(draw(prose))
        elif what == "restate":
            spelled = draw(st.sampled_from(spellings(draw(st.sampled_from(answers)))))
            pieces.append(draw(st.sampled_from(["", "so ", "Total: ", "= "])) + spelled)
        else:
            pieces.append(answer_piece(what))
    glue = draw(st.sampled_from([" ", "", "\n"]))
    full = glue.join(piece if isinstance(piece, str) else piece[0] for piece in pieces)
    cut = draw(st.one_of(st.just(len(full)), st.integers(0, len(full))))  # finished, or cut off
    stated, start = set(), 0
    for piece in pieces:
        if not isinstance(piece, str):
            body, inner, size = piece
            if start + inner < cut:  # some of the answer was written before the cut
                stated.add(body[inner : min(inner + size, cut - start)])
        start += len(piece if isinstance(piece, str) else piece[0]) + len(glue)
    return full[:cut], {value for value in stated if value.strip()}


@settings(max_examples=400, deadline=None)
@given(math_drafts())
def test_no_summary_shows_an_answer_the_draft_states(case):
    draft, stated = case
    for summarizer in MATH_SUMMARIZERS:
        summary = summarizer.summarize(draft, P)
        assert not leaked(summary, stated), (summarizer, draft, summary)
    assert HiddenSummarizer("[hidden]").summarize(draft, P) == "[hidden]"


@settings(max_examples=300, deadline=None)
@given(math_drafts())
def test_a_draft_that_states_no_answer_after_its_trace_has_no_summary(case):
    draft, _ = case
    tail = draft.rsplit("</think>", 1)[-1] if "</think>" in draft else (None if "<think>" in draft else draft)
    states = tail is not None and ("<answer>" in tail or "</answer>" in tail or "\\boxed{" in tail)
    assume(not states)
    for summarizer in MATH_SUMMARIZERS:
        assert summarizer.summarize(draft, P) == "", (summarizer, draft)


@settings(max_examples=200, deadline=None)
@given(
    steps=st.lists(st.integers(-99, 99), min_size=1, max_size=3),
    answer=st.integers(-300, 300),
)
def test_the_tiny_models_write_up_survives_whole(steps, answer):
    """``<think>…</think>17,-56<answer>-26</answer>`` → ``17,-56``: results that are not the
    answer stay, digits and all (``-26`` keeps ``-2``, ``126``, ``26`` when the answer is ``-26``)."""
    assume(all(abs(step) != abs(answer) for step in steps))
    write_up = ",".join(map(str, steps))
    draft = f"<think>1+2=3</think>{write_up}<answer>{answer}</answer>"
    for summarizer in (StripTraceSummarizer(), Qwen3Summarizer()):
        assert summarizer.summarize(draft, P) == write_up
    assert (
        StripTraceSummarizer().summarize(
            f"<think>1+2=3</think>{write_up},{answer}<answer>{answer}</answer>", P
        )
        == f"{write_up},?"
    )


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=120), st.booleans())
def test_never_raises_on_any_text(draft, truncated):
    for summarizer in [*MATH_SUMMARIZERS, CodeSummarizer(), CodeSummarizer(remove="all_code")]:
        summary = summarizer.summarize(draft, P, truncated)
        assert "</think>" not in summary and "<answer>" not in summary and "\\boxed{" not in summary


# --------------------------------------------------------------------------- code drafts
PROGRAM_LINES = [
    "import sys",
    "n = int(input())",
    "print(n * 2)",
    "for i in range(n):",
    "    print(i)",
    "x = 1",
]
FENCES = ["```python", "```py", "```", "```text", "```cpp"]


@st.composite
def code_drafts(draw) -> tuple[str, set[str], bool]:
    """A code draft cut off at random, the lines of every program it writes (blocks a verifier
    could run), and whether any of one survives the cut."""
    head = "<think>\nplan\n</think>\n"
    pieces, programs = [], []  # programs: (where the piece starts, its fence, its lines)
    at = len(head)
    for _ in range(draw(st.integers(1, 4))):
        if draw(st.booleans()):
            piece = draw(
                st.sampled_from(["Use a BFS.", "Greedy by deadline.", "O(n log n).", *PROGRAM_LINES])
            )
        else:
            fence = draw(st.sampled_from(FENCES))
            body = draw(st.lists(st.sampled_from(PROGRAM_LINES), min_size=1, max_size=3))
            piece = fence + "\n" + "\n".join(body) + "\n```"
            if fence in FENCES[:3]:
                programs.append((at, fence, body))
        pieces.append(piece)
        at += len(piece) + 1
    full = head + "\n".join(pieces)
    cut = draw(st.one_of(st.just(len(full)), st.integers(len(head), len(full))))
    lines = set()
    for start, fence, body in programs:  # the program lines written before the cut
        written_body = full[start + len(fence) + 1 : min(cut, start + len(fence) + 1 + len("\n".join(body)))]
        lines |= {line.strip() for line in written_body.splitlines() if line.strip()}
    written = any(cut > start + len(fence) + 1 for start, fence, _ in programs)  # a character of its body
    return full[:cut], lines, written


@settings(max_examples=300, deadline=None)
@given(code_drafts())
def test_no_code_summary_holds_a_runnable_copy_of_the_program(case):
    draft, program_lines, _ = case
    for summarizer in (
        CodeSummarizer(),
        CodeSummarizer(remove="all_code"),
        CodeSummarizer(placeholder="[cut]"),
    ):
        summary = summarizer.summarize(draft, P)
        for block in ("last", "first", "longest"):
            assert extract_program(summary, block=block, search_thinking=True) is None, (draft, summary)
        assert not {line.strip() for line in summary.splitlines()} & program_lines, (draft, summary)
        if summarizer.remove == "all_code":
            assert "```" not in summary


@settings(max_examples=200, deadline=None)
@given(code_drafts())
def test_a_code_draft_without_a_program_has_no_summary(case):
    draft, _, written = case
    assume(not written)
    assert CodeSummarizer().summarize(draft, P) == ""

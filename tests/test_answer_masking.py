"""No built-in summarizer hands the rival the draft's final answer (property-based)."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from agon_lightning.summarizers.basic import FullSummarizer, HiddenSummarizer, StripTraceSummarizer
from agon_lightning.summarizers.qwen3 import Qwen3Summarizer
from agon_lightning.text import answer_pattern, mask_answer
from agon_lightning.types import Problem

P = Problem("q", "0")
numbers = st.integers(-999, 999).map(str)
# Tokens a write-up is made of: numbers, words, punctuation, the answer's digits glued to others.
filler = st.lists(
    st.one_of(
        numbers, st.sampled_from(["so", "the", "answer", "is", "=", ",", ".", " ", "\n", "+", "-", "x"])
    ),
    max_size=12,
).map(" ".join)


def occurs(answer: str, text: str) -> bool:
    """A whole-token occurrence of ``answer`` in ``text`` (the independent check of the property)."""
    for m in re.finditer(re.escape(answer), text):
        before, after = text[: m.start()], text[m.end() :]
        glued_before = answer[0].isalnum() and (before[-1:].isalnum() or re.search(r"[0-9]\.$", before))
        glued_after = answer[-1].isalnum() and (after[:1].isalnum() or re.match(r"\.[0-9]", after))
        if not glued_before and not glued_after:
            return True
    return False


@settings(max_examples=300, deadline=None)
@given(answer=numbers, trace=filler, before=filler, after=filler, restate=st.booleans())
def test_strip_trace_and_full_never_show_the_answer(answer, trace, before, after, restate):
    middle = f" so the answer is {answer}. " if restate else " "
    draft = f"<think>{trace}</think>{before}{middle}{after}<answer>{answer}</answer>"
    for summarizer in (StripTraceSummarizer(), FullSummarizer()):
        assert not occurs(answer, summarizer.summarize(draft, P)), (summarizer, draft)
    assert HiddenSummarizer().summarize(draft, P) == ""


@settings(max_examples=300, deadline=None)
@given(answer=numbers, before=filler, after=filler)
def test_qwen3_never_shows_the_boxed_answer(answer, before, after):
    draft = f"<think>work</think>{before} hence {answer} {after}\n\\boxed{{{answer}}}"
    assert not occurs(answer, Qwen3Summarizer().summarize(draft, P))


@settings(max_examples=300, deadline=None)
@given(answer=numbers, text=filler)
def test_masking_keeps_every_other_number(answer, text):
    """Only the answer goes: numbers that merely contain its digits stay as they were."""
    masked = mask_answer(text, answer)
    kept = [t for t in re.findall(r"-?\d+", text) if t != answer and t.lstrip("-") != answer.lstrip("-")]
    for token in kept:
        if not answer.startswith("-") and token == "-" + answer:
            continue  # "-5" contains the answer 5 as a token: masked to "-?"
        assert token in masked or answer in token, (token, masked)


def test_examples_by_hand():
    assert mask_answer("17,-56", "-56") == "17,?"
    assert mask_answer("so the answer is 12.", "12") == "so the answer is ?."
    assert mask_answer("15 5.2 x5 2.5 5 (5)", "5") == "15 5.2 x5 2.5 ? (?)"
    assert mask_answer("x + 1 or x+1", "x+1") == "? or ?"
    assert mask_answer("text", None) == "text" and answer_pattern("  ") is None
    # The tiny model's format: the summary keeps the intermediate results, never the last.
    draft = "<think>42-25=17 17-73=-56 -56+30=-26</think>17,-56<answer>-26</answer>"
    assert StripTraceSummarizer().summarize(draft, P) == "17,-56"
    assert StripTraceSummarizer().summarize(draft.replace(",-56<", ",-26<"), P) == "17,?"


def test_the_training_pipeline_shows_the_challenger_no_answer():
    """The second stage's input as training builds it (``challenge_prompts``), from drafts that restate answers."""
    from types import SimpleNamespace

    from agon_lightning.pipeline import challenge_prompts
    from agon_lightning.prompts import Prompts
    from agon_lightning.text import extract_answer

    drafts = [
        "<think>12+30=42 42-7=35</think>42, so 35<answer>35</answer>",
        "<think>9+9=18</think>18 then -18 and 180<answer>18</answer>",
        "<think>cut off inside the trace 35",
    ]
    player = SimpleNamespace(summarizer=StripTraceSummarizer(), prompts=Prompts(challenge="{question}\nRival: {summary}",
                             chat_template=False), tokenizer=None)  # fmt: skip
    problems = [Problem("12 + 30 - 7 =", "35"), Problem("9 + 9 =", "18"), Problem("1 + 34 =", "35")]
    rb = SimpleNamespace(texts=drafts, truncated=[False, False, True])
    summaries, prompts = challenge_prompts(player, problems, rb)
    assert summaries == ["42, so ?", "? then -? and 180", ""]
    for draft, prompt in zip(drafts, prompts):
        answer = extract_answer(draft)
        assert answer is None or not occurs(answer, prompt.split("Rival: ")[1])

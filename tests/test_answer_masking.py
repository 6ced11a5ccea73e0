"""The answer rule on the cases that broke it: no summary hands the challenger an answer.

Each row is a draft an adversary (or an unlucky sample) writes and what the challenger reads.
Before the rule, each of these showed the answer (``59<answer>114``, the first of two blocks,
``114.0``, ``\\boxed{113}``, ``Total: 114.0``...), and a challenger copying it earned the
conversion bonus on a draft graded wrong.
"""

from __future__ import annotations

import pytest

from agon_lightning.game.types import Problem
from agon_lightning.summarizers.basic import FullSummarizer, StripTraceSummarizer
from agon_lightning.summarizers.hiding import mask_answers, readings, stated_answers
from agon_lightning.summarizers.qwen3 import Qwen3Summarizer
from agon_lightning.verifiers.exact import ExactMatchVerifier

P = Problem("q", "114")
TRACE = "<think>100+14=114</think>"


@pytest.mark.parametrize(
    "tail, summary",
    [
        ("59<answer>114", "59"),  # an answer block left open
        ("59,114 so<answer>114</ans", "59,? so"),  # cut off inside its closing tag
        (
            "59<answer>114</answer> or <answer>113</answer>",
            "59 or",
        ),  # several blocks: the first is hidden too
        ("59 then 114.0, 114.00, +114 and -114<answer>114</answer>", "59 then ?, ?, ? and -?"),
        ("\\frac{228}{2} or 228/2<answer>114</answer>", "? or ?"),  # the same number, other spellings
        ("Total: 114.0 \\boxed{113}, \\boxed{114", "Total: ? ,"),  # several boxes, one unclosed
        ("x = 114, so<answer>x = 114</answer>", "?, so"),  # an equation: its right side counts too
        ("\\text{Yes} and yes<answer>\\text{Yes}</answer>", "? and ?"),
        ("59,114", ""),  # cut off before it stated its answer: no summary at all
        ("59,114</answer>", ""),  # a closing tag with no opening one closes a block from the start
        (
            "59, 1140, 11.4, x114, 114x<answer>114</answer>",
            "59, 1140, 11.4, x114, 114x",
        ),  # longer tokens stay
        ("17,-56<answer>-26</answer>", "17,-56"),  # the shipped tiny model's format
    ],
)
def test_holes_by_hand(tail, summary):
    assert StripTraceSummarizer().summarize(TRACE + tail, P) == summary


def test_qwen3_write_ups_lose_every_answer():
    draft = "<think>x</think>Summing, the total is $114.0$.\n\n$$\\boxed{113}$$\n\nor rather \\boxed{114"
    assert Qwen3Summarizer().summarize(draft, P) == "Summing, the total is $?$.\n\nor rather"
    tagged = "<think>x</think>The total is 114.\n\n<answer>114</answer>"
    assert Qwen3Summarizer().summarize(tagged, P) == "The total is ?."


def test_full_summary_hides_the_answer_in_the_trace_too():
    draft = "<think>42-25=17 17-73=-56 -56+30=-26</think>17,-56<answer>-26</answer>"
    assert FullSummarizer().summarize(draft, P) == "<think>42-25=17 17-73=-56 -56+30=?</think>17,-56"


def test_every_restatement_is_what_the_graders_accept():
    """The masked spellings are ones the graders would have graded as the answer."""
    from math_verify import parse, verify

    for spelled in ("114.0", "114.00", "+114", "\\frac{228}{2}", "228/2"):
        assert verify(parse("\\boxed{114}", parsing_timeout=None), parse(f"\\boxed{{{spelled}}}", parsing_timeout=None),
                      timeout_seconds=None), spelled  # fmt: skip
        assert mask_answers(f"so {spelled}.", {"114"}) == "so ?."
    assert ExactMatchVerifier().verify("<answer>yes</answer>", Problem("q", "Yes")).correct
    assert mask_answers("Yes, YES", readings("\\text{Yes}")) == "?, ?"


def test_masking_keeps_other_tokens_and_repeats_until_none_is_left():
    assert mask_answers("17,-56", {"-56"}) == "17,?"
    assert mask_answers("17-56", {"-56"}) == "17?"  # a sign may be the number's own
    assert mask_answers("15 5.2 x5 2.5 5 (5) -5", {"5"}) == "15 5.2 x5 2.5 ? (?) -?"
    assert mask_answers("x + 1 or x+1, 11 4", {"x+1", "114"}) == "? or ?, 11 4"  # "11 4" is two numbers
    assert (
        mask_answers("1\\frac{2}{2}", {"1"}) == "??"
    )  # the second only stands alone once the first is masked
    assert (
        mask_answers("so [answer]", {"answer"}, mask="[answer]") == "so [answer]"
    )  # the mask holds it: skipped
    assert stated_answers("<think>\\boxed{7}</think><answer>x = 3</answer>") == {"7", "x = 3", "3"}


def test_the_training_pipeline_shows_the_challenger_no_answer():
    """The second stage's input as training builds it (``challenge_prompts``), from drafts that restate answers."""
    from types import SimpleNamespace

    from agon_lightning.game.prompts import Prompts
    from agon_lightning.rollout.pipeline import challenge_prompts

    drafts = [
        "<think>12+30=42 42-7=35</think>42, so 35.0<answer>35</answer>",
        "<think>9+9=18</think>18 then -18 and 180<answer>18</answer>",
        "<think>cut off inside the trace 35",
        "<think>1+34=35</think>35,",  # cut off before its answer
    ]
    player = SimpleNamespace(summarizer=StripTraceSummarizer(), prompts=Prompts(challenge="{question}\nRival: {summary}",
                             chat_template=False), tokenizer=None)  # fmt: skip
    problems = [Problem("12 + 30 - 7 =", "35"), Problem("9 + 9 =", "18"), Problem("1 + 34 =", "35")] * 2
    rb = SimpleNamespace(texts=drafts, truncated=[False, False, True, True])
    summaries, prompts = challenge_prompts(player, problems[:4], rb)
    assert summaries == ["42, so ?", "? then -? and 180", "", ""]
    assert [prompt.split("Rival: ")[1] for prompt in prompts] == summaries

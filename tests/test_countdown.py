"""Countdown: the trace and summary formats, the hiding rule, the SFT examples and the 0/1 scorer."""

from __future__ import annotations

import itertools
import random
import re
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agon_lightning.data.reasoning_gym import generate_problems
from agon_lightning.data.statements import pose
from agon_lightning.game.formats import ThinkAnswerFormat
from agon_lightning.game.text import extract_answer, thinking_part
from agon_lightning.game.types import Problem
from agon_lightning.infra.tiny import build_tokenizer
from agon_lightning.summarizers.hiding import arithmetic_pieces, mask_full_uses
from agon_lightning.testbeds.countdown.sft import CountdownExamples, slipped_path, target_of
from agon_lightning.testbeds.countdown.summarizer import CountdownSummarizer, countdown_numbers
from agon_lightning.testbeds.countdown.task import (
    MISS,
    SLIP,
    Attempt,
    SearchStyle,
    Step,
    after,
    apply,
    best,
    expression,
    leaves,
    moves,
    parse_claims,
    parse_reached,
    parse_tried,
    parse_verdicts,
    search,
    solve,
    tried_first,
)
from agon_lightning.training.sft_data import RIVALS, SFTDataModule
from agon_lightning.verifiers.reasoning_gym import ReasoningGymVerifier
from experiments.countdown.oracle import examples_of

RANGE = {"min_value": 1, "max_value": 9, "min_target": 10, "max_target": 99, "operators": ["+", "-", "*"]}
MAIN = {"countdown": {"min_numbers": 3, "max_numbers": 3, **RANGE}}
HARD = {"countdown": {"min_numbers": 4, "max_numbers": 4, **RANGE}}
BOTH = {"countdown": {"min_numbers": 3, "max_numbers": 4, **RANGE}}
FORMAT = "Make {target} from {numbers}"
VERDICT_LINE = re.compile(r"\d+[+*-]\d+=-?\d+ [yn](?:\|\d+[+*-]\d+=-?\d+ [yn])*")


@pytest.fixture(scope="module")
def problems() -> list[Problem]:
    return generate_problems(BOTH, 120, seed=5, question_format=FORMAT)


def problem_of(numbers: list[int], target: int) -> Problem:
    entry = {"metadata": {"numbers": numbers, "target": target}}
    return Problem(
        question=f"Make {target} from {numbers}", answer="", metadata={"task": "countdown", "entry": entry}
    )


def attempts_of(completion: str) -> list[str]:
    return thinking_part(completion).split("\n")


def parse_line(line: str) -> tuple[list[Step], str]:
    """A trace line's steps and how it ends (``hit``, ``miss``, ``slip``)."""
    outcome = "miss" if line.endswith(f"|{MISS}") else "slip" if line.endswith(SLIP) else "hit"
    body = line.removesuffix(f"|{MISS}").removesuffix(SLIP)
    return [parse_claims(part)[0] for part in body.split("|")], outcome


# ---------------------------------------------------------------------------------------------
# Trace, summary, answer
# ---------------------------------------------------------------------------------------------


def check_draft(completion: str, numbers: list[int], target: int) -> None:
    """Every line's arithmetic is right but a marked slip's last step; misses miss, the hit hits;
    the summary is the best attempt but its last step; the answer is that attempt's expression."""
    verifier = ReasoningGymVerifier()
    problem = problem_of(numbers, target)
    assert ThinkAnswerFormat().score(completion) == 1.0
    lines = [parse_line(line) for line in attempts_of(completion)]
    for steps, outcome in lines:
        assert after(numbers, steps) is not None  # each line starts from the given numbers
        if outcome == "slip":
            assert all(s.correct for s in steps[:-1]) and not steps[-1].correct
        else:
            assert all(s.correct for s in steps) and len(after(numbers, steps)) == 1
            assert (steps[-1].result == target) == (outcome == "hit")
    assert lines[-1][1] == "hit" and [o for _, o in lines].count("hit") == 1
    assert verifier.verify(completion, problem).correct
    summary = CountdownSummarizer().summarize(completion, problem)
    hit = lines[-1][0]
    assert parse_claims(summary) == hit[:-1]
    assert summary.endswith(f"-> {target}")
    assert extract_answer(completion) == expression(numbers, hit)


@pytest.mark.parametrize("ordering", ["random", "closest", "largest"])
def test_every_drawn_search_is_a_sound_trace(problems: list[Problem], ordering: str) -> None:
    rng = random.Random(0)
    for p in problems[:40]:
        completion = str(solve(countdown_numbers(p), target_of(p), SearchStyle(ordering, 0.2, 6), rng))
        check_draft(completion, countdown_numbers(p), target_of(p))


def test_the_example_of_the_design() -> None:
    attempts = [Attempt((Step(9, "*", 8, 72), Step(72, "+", 3, 75)), "miss"),
                Attempt((Step(9, "*", 3, 27), Step(27, "+", 8, 35)), "hit")]  # fmt: skip
    assert [str(a) for a in attempts] == ["9*8=72|72+3=75|x", "9*3=27|27+8=35"]
    assert str(Attempt((Step(9, "*", 3, 28),), "slip")) == "9*3=28!"
    assert expression([3, 8, 9], attempts[1].steps) == "9*3+8"
    assert (
        expression([2, 3, 4, 5], [Step(5, "-", 4, 1), Step(3, "-", 2, 1), Step(1, "*", 1, 1)])
        == "(3-2)*(5-4)"
    )
    assert expression([2, 3, 9], [Step(3, "+", 2, 5), Step(9, "-", 5, 4)]) == "9-(3+2)"


def test_length_is_the_number_of_attempts_and_varies_between_draws(problems: list[Problem]) -> None:
    p = next(p for p in problems if len(countdown_numbers(p)) == 4)
    counts = Counter()
    rng = random.Random(1)
    for _ in range(30):
        completion = solve(countdown_numbers(p), target_of(p), SearchStyle("random", 0.0, 6), rng)
        counts[len(completion.lines)] += 1
    assert len(counts) >= 3  # not one fixed strategy


def test_moves_never_go_negative_and_leaves_cover_the_tree() -> None:
    assert all(step.result >= 0 and step.correct for step, _ in moves([2, 7, 9]))
    paths = list(leaves([2, 7, 9], 30, "random", random.Random(0)))
    assert len(paths) == len(set(paths)) == 3 * 3 * 3  # 3 pairs × 3 ops, then 3 ops
    first = list(leaves([2, 7, 9], 30, "random", random.Random(0), prefix=(Step(9, "-", 7, 2),)))
    assert first[0][0] == Step(9, "-", 7, 2) and set(first) == set(paths)


def test_a_challenger_checks_the_claims_and_builds_on_the_true_ones() -> None:
    rng = random.Random(0)
    wrong = solve([3, 8, 9], 35, SearchStyle("random", 0.0), rng, rival_summary="9*3=28, left 28 8 -> 36")
    assert wrong.lines[0] == "9*3=27 n"
    right = solve([3, 8, 9], 35, SearchStyle("random", 0.0), rng, rival_summary="9*3=27, left 27 8 -> 35")
    assert right.lines[0] == "9*3=27 y" and right.lines[-1] == "9*3=27|27+8=35"
    assert all(line.startswith("9*3=27|") for line in right.lines[1:])  # the true claim's subtree first
    chain = solve([2, 5, 7, 9], 70, SearchStyle("random", 0.0), rng, "7*2=14, 14*5=71, left 71 9 -> 70")
    assert chain.lines[0] == "7*2=14 y|14*5=70 n" and chain.lines[1].startswith("7*2=14|")
    assert parse_verdicts(chain.lines[0]) == [(Step(7, "*", 2, 14), True), (Step(14, "*", 5, 70), False)]


def test_a_rival_that_missed_has_the_first_steps_it_tried_searched_last() -> None:
    # the rival ended at 62, not 61: its claims are checked, not built on, and the first steps it
    # says it tried come after every other first step
    tried = ("7*2", "9*7", "9+7")
    for seed in range(20):
        style = SearchStyle("random", 0.0, max_attempts=0)
        summary = "7*2=14, 14*5=70, left 70 9 -> 62, tried " + " ".join(tried)
        done = solve([2, 5, 7, 9], 61, style, random.Random(seed), rival_summary=summary)
        assert done.lines[0] == "7*2=14 y|14*5=70 y"
        firsts = [line.split("=")[0] for line in done.lines[1:]]
        seen_tried = [first in tried for first in firsts]
        assert seen_tried == sorted(seen_tried)  # never an untried first step after a tried one
        assert firsts[0] not in tried


def test_a_search_that_gives_up_summarizes_its_nearest_miss_and_what_it_tried() -> None:
    style = SearchStyle("closest", 0.0, max_attempts=0, give_up_after=4)
    done = solve([4, 5, 8, 8], 45, style, random.Random(0))
    misses = [line for line in done.lines if line.endswith("|x")]
    assert len(misses) == 4 == len(done.lines)  # gave up after four misses, no hit written
    assert parse_tried(done.summary) == tried_first([Attempt(parse_path(m), "miss") for m in misses])
    assert parse_reached(done.summary) != 45
    assert done.answer == expression(
        [4, 5, 8, 8], best([Attempt(parse_path(m), "miss") for m in misses], 45).steps
    )
    solved = solve([3, 8, 9], 35, SearchStyle("closest", 0.0, max_attempts=0), random.Random(0))
    assert "tried" not in solved.summary and parse_reached(solved.summary) == 35


def parse_path(line: str) -> tuple[Step, ...]:
    return tuple(parse_claims(line.replace("|", ", ")))


def test_tried_first_lists_distinct_first_steps_in_order_and_skips_slips() -> None:
    def attempt(*steps: tuple[int, str, int, int], outcome: str = "miss") -> Attempt:
        return Attempt(tuple(Step(*s) for s in steps), outcome)

    attempts = [
        attempt((9, "+", 6, 15), (15, "+", 3, 18)),
        attempt((9, "+", 6, 15), (15, "-", 3, 12)),
        attempt((9, "*", 3, 28), outcome="slip"),
        attempt((9, "*", 3, 27), (27, "+", 6, 33)),
    ]
    assert tried_first(attempts) == ("9+6", "9*3")
    many = [attempt((a, "+", 1, a + 1), (a + 1, "+", 2, a + 3)) for a in range(3, 9)]
    assert tried_first(many) == ("3+1", "4+1", "5+1", "6+1")  # at most MAX_TRIED
    assert parse_tried("9+6=15, left 15 3 -> 18, tried 9+6 9*3") == ("9+6", "9*3")
    assert parse_tried("9*3=27, left 27 8 -> 35") == () and parse_reached("left 3 -> -4") == -4


def test_max_attempts_zero_writes_every_attempt_and_never_skips_to_the_hit() -> None:
    for seed in range(10):
        full = search([2, 5, 7, 9], 61, SearchStyle("random", 0.0, max_attempts=0), random.Random(seed))
        skipping = search([2, 5, 7, 9], 61, SearchStyle("random", 0.0, max_attempts=3), random.Random(seed))
        assert [a.outcome for a in full][-1] == "hit" and len(skipping) <= 3
        assert full[: len(skipping) - 1] == skipping[:-1] and full[-1] == skipping[-1]


# ---------------------------------------------------------------------------------------------
# The hiding rule
# ---------------------------------------------------------------------------------------------


def full_uses_left(text: str, numbers: list[int]) -> bool:
    """Brute force: does some ordering of some claims in ``text`` combine every number, or does
    one piece of arithmetic hold every number?"""
    need = Counter(numbers)
    for _, _, operands, _ in arithmetic_pieces(text):
        if not need - Counter(operands):
            return True
    claims = parse_claims(text)
    for k in range(1, len(claims) + 1):
        for order in itertools.permutations(claims, k):
            left = after(numbers, order)
            if left is not None and len(left) == 1:
                return True
    return False


numbers_st = st.lists(st.integers(1, 9), min_size=3, max_size=4)


@st.composite
def summaries(draw):
    """A problem's numbers and a text mixing claims of a full path, its expression, junk."""
    numbers = draw(numbers_st)
    rng = random.Random(draw(st.integers(0, 10_000)))
    path = next(leaves(numbers, 0, "random", rng))
    pieces = [str(step) for step in path]
    if draw(st.booleans()):
        pieces.append(expression(numbers, path))
    if draw(st.booleans()):
        pieces.append(f"{expression(numbers, path)}={path[-1].result}")
    pieces += draw(st.lists(st.sampled_from(["left 3 4", "-> 12", "x", "ok", "12", "?", " "]), max_size=3))
    order = draw(st.permutations(pieces))
    joiner = draw(st.sampled_from([", ", ",", " ", "|", ""]))
    return numbers, joiner.join(order)


@settings(max_examples=300, deadline=None)
@given(summaries())
def test_no_summary_keeps_an_expression_that_uses_every_number(case) -> None:
    numbers, text = case
    hidden = mask_full_uses(text, numbers)
    assert not full_uses_left(hidden, numbers), (text, hidden)
    assert mask_full_uses(hidden, numbers) == hidden  # nothing left to mask


@settings(max_examples=200, deadline=None)
@given(numbers_st, st.integers(0, 10_000))
def test_honest_summaries_pass_unchanged_and_never_show_the_answer(numbers, seed) -> None:
    rng = random.Random(seed)
    target = next(leaves(numbers, 0, "random", rng))[-1].result
    completion = solve(numbers, target, SearchStyle("random", 0.1), rng)
    problem = problem_of(numbers, target)
    summary = CountdownSummarizer().summarize(str(completion), problem)
    assert summary == completion.summary  # the format's summaries need no mask
    assert completion.answer not in summary and not full_uses_left(summary, numbers)


def test_masking_examples() -> None:
    assert mask_full_uses("9*3=27, 27+8=35, left 35", [3, 8, 9]) == "9*3=27, ?, left 35"
    assert mask_full_uses("(9*3)+8=35 ok", [3, 8, 9]) == "? ok"
    assert mask_full_uses("8*9=72+3", [3, 8, 9]) == "8*9=?"
    kept = "8*9=72, 72-5=67, left 67 3 -> 70"
    assert mask_full_uses(kept, [3, 5, 8, 9]) == kept
    with pytest.raises(ValueError, match="at least two numbers, got \\[4\\]"):
        mask_full_uses("4", [4])


def test_a_draft_cut_in_its_trace_has_no_summary() -> None:
    problem = problem_of([3, 8, 9], 35)
    assert CountdownSummarizer().summarize("<think>9*3=27|27+8=3", problem, truncated=True) == ""
    with pytest.raises(ValueError, match="needs problem.metadata"):
        CountdownSummarizer().summarize("<think></think>x<answer>1</answer>", Problem("q", "1"))


# ---------------------------------------------------------------------------------------------
# The scorer, thresholded to 0/1
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "answer, correct, score",
    [
        ("9*3+8", True, 1.0),
        ("(9*3)+8", True, 1.0),
        ("9*3-8", False, 0.05),  # every number once, wrong value
        ("27+8", False, 0.05),  # the right value without the given numbers
        ("9*3+8+9-9", False, 0.05),  # the right value, 9 used three times
        ("9*3+8*1", False, 0.05),  # a number that was not given
        ("", False, 0.01),
    ],
)
def test_the_scorer_counts_only_full_credit(answer: str, correct: bool, score: float) -> None:
    problem = problem_of([3, 8, 9], 35)
    verdict = ReasoningGymVerifier().verify(f"<think></think><answer>{answer}</answer>", problem)
    assert (verdict.correct, verdict.score) == (correct, score)


# ---------------------------------------------------------------------------------------------
# The SFT examples
# ---------------------------------------------------------------------------------------------


def test_examples_mix_roles_and_rivals_and_every_target_solves(problems: list[Problem]) -> None:
    builder = CountdownExamples()
    examples = builder.build(problems, seed=0)
    assert [e.target for e in examples] == [e.target for e in builder.build(problems, seed=0)]
    kinds = Counter(e.kind for e in examples)
    assert 0.3 < kinds["draft"] / len(examples) < 0.7 and all(kinds[f"challenge_{r}"] for r in RIVALS)
    verifier, summarizer = ReasoningGymVerifier(), CountdownSummarizer()
    for e in examples:
        numbers, target = countdown_numbers(e.problem), target_of(e.problem)
        assert verifier.verify(e.target, e.problem).correct
        if e.rival_draft is None:
            check_draft(e.target, numbers, target)
            continue
        summary = summarizer.summarize(e.rival_draft, e.problem)
        claims = parse_claims(summary)
        assert not full_uses_left(summary, numbers)
        if e.rival == "empty":
            assert summary == ""
            check_draft(e.target, numbers, target)  # no claims to check: a plain search
            continue
        assert claims, summary
        verdicts = parse_verdicts(thinking_part(e.target))
        assert [v for _, v in verdicts] == [c.correct for c in claims]  # the check line judges each claim
        if e.rival == "slipped":
            assert not all(c.correct for c in claims)
        else:
            assert all(c.correct for c in claims)
            assert summary.endswith(f"-> {target}") == (e.rival == "right")


def test_the_amended_generator_gives_up_and_says_what_it_tried(problems: list[Problem]) -> None:
    # configs/sft_countdown.yaml's generator (amendments A2, A3): no skip to the hit, a search
    # gives up (at its habit, or after 1-12 misses) and its summary names the first steps it
    # tried; a challenger facing a rival that missed searches those first steps last
    builder = examples_of("configs/sft_countdown.yaml", {})
    assert (builder.max_attempts, builder.give_up, builder.rival_misses) == (0, (1, 12), None)
    assert builder.give_up_habit == {3: 6, 4: 5} and builder.habit_rate == 0.5
    verifier, summarizer = ReasoningGymVerifier(), CountdownSummarizer()
    gave_up = built_on_miss = 0
    for e in builder.build(problems, seed=1):
        numbers, target = countdown_numbers(e.problem), target_of(e.problem)
        think, shown = thinking_part(e.target), e.target.split("</think>")[1].split("<answer>")[0]
        lines = [line for line in think.split("\n") if not VERDICT_LINE.fullmatch(line)]
        if not verifier.verify(e.target, e.problem).correct:  # a search that gave up
            gave_up += 1
            assert 1 <= sum(line.endswith("|x") for line in lines) <= 12 and parse_reached(shown) != target
            assert parse_tried(shown) and not full_uses_left(shown, numbers)
        if e.rival_draft is None:
            continue
        summary = summarizer.summarize(e.rival_draft, e.problem)
        assert not full_uses_left(summary, numbers)
        if e.rival == "right":
            assert summary.endswith(f"-> {target}")
        if summary and parse_reached(summary) != target:
            tried = parse_tried(summary)
            seen = [line.split("=")[0] in tried for line in lines]
            assert seen == sorted(seen), (summary, e.target)  # the rival's first steps come last
            built_on_miss += bool(tried)
    assert gave_up and built_on_miss


def test_a_habit_gives_the_draw_a_mode_where_stopping_is_likelier() -> None:
    # half the searches of 3 numbers give up after 6 misses, the rest after 1-12 (uniform): at 6
    # stopping is likelier than going on (what a greedy base follows), and nowhere before it
    builder = CountdownExamples(
        give_up=(1, 12), give_up_habit={3: 6, 4: 5}, habit_rate=0.5, rival_misses=None
    )
    rng = random.Random(0)
    draws = Counter(builder.misses_before_giving_up(rng, 3) for _ in range(20000))
    assert set(draws) == set(range(1, 13)) and draws.most_common(1)[0][0] == 6
    left = 20000
    for misses in range(1, 13):
        stop = draws[misses] / left  # the chance to give up here, having come this far
        assert (stop > 0.5) == (misses in (6, 12)), (misses, stop)
        left -= draws[misses]
    assert Counter(builder.misses_before_giving_up(rng, 4) for _ in range(2000)).most_common(1)[0][0] == 5
    assert builder.rival_misses_of(random.Random(1), 3) == builder.misses_before_giving_up(
        random.Random(1), 3
    )
    assert CountdownExamples().misses_before_giving_up(rng, 3) == 0  # no give_up: never


def test_slips_carry_on_down_the_chain() -> None:
    path = (Step(7, "*", 2, 14), Step(14, "*", 5, 70), Step(70, "-", 9, 61))
    assert slipped_path(path, 0, 1) == (Step(7, "*", 2, 15), Step(15, "*", 5, 75), Step(75, "-", 9, 66))
    assert all(apply(s.op, s.left, s.right) == s.result for s in slipped_path(path, 1, 2)[2:])


def test_held_out_problems_are_never_trained_on() -> None:
    dm = SFTDataModule(
        tasks=MAIN, hard_tasks=HARD, train_tasks=BOTH, question_format=FORMAT, train_size=600, val_size=60,
        hard_size=60, batch_size=8, examples=CountdownExamples(),
    )  # fmt: skip
    dm.setup()
    held_out = {p.question for p in dm.val_problems}
    assert held_out and not held_out & {p.question for p in dm.train_problems}
    assert {len(countdown_numbers(p)) for p in dm.train_problems} == {3, 4}
    evaluated = next(iter(dm.val_dataloader()))
    assert all(len(countdown_numbers(e.problem)) == 3 for e in evaluated)  # the main split only
    with pytest.raises(ValueError, match="CountdownExamples carries its own proportions"):
        SFTDataModule(tasks=MAIN, rival_mix={"right": 1.0}, examples=CountdownExamples())


def test_errors_name_the_bad_value() -> None:
    with pytest.raises(ValueError, match="orderings must map"):
        CountdownExamples(orderings={"sideways": 1.0})
    with pytest.raises(ValueError, match="rival_misses must be"):
        CountdownExamples(rival_misses=(3, 1))
    with pytest.raises(ValueError, match=r"give_up must be \(low, high\).*got \(3, 1\)"):
        CountdownExamples(give_up=(3, 1))
    with pytest.raises(ValueError, match="give_up_habit must map.*got \\{1: 4\\}"):
        CountdownExamples(give_up=(1, 4), give_up_habit={1: 4}, habit_rate=0.5)
    with pytest.raises(ValueError, match="needs give_up"):
        CountdownExamples(give_up_habit={3: 6}, habit_rate=0.5)
    with pytest.raises(ValueError, match="rival_misses: null"):
        CountdownExamples(rival_misses=None)
    with pytest.raises(ValueError, match="ordering must be one of"):
        SearchStyle("sideways")
    with pytest.raises(ValueError, match="names \\{goal\\}, which is not in the entry's metadata"):
        pose("Make {goal}", {"metadata": {"target": 3}})


def test_questions_are_compact_and_sorted() -> None:
    assert pose(FORMAT, {"metadata": {"numbers": [9, 3, 8], "target": 35}}) == "Make 35 from 3 8 9"
    (p,) = generate_problems(MAIN, 1, seed=1, question_format=FORMAT)
    numbers = countdown_numbers(p)
    assert p.question == f"Make {target_of(p)} from {' '.join(map(str, sorted(numbers)))}"


# ---------------------------------------------------------------------------------------------
# The tokenizer
# ---------------------------------------------------------------------------------------------


def test_every_character_of_the_formats_is_one_token(problems: list[Problem]) -> None:
    tokenizer = build_tokenizer()
    byte_tokens = {tokenizer.convert_tokens_to_ids(f"<0x{v:02X}>") for v in range(256)}
    for e in CountdownExamples().build(problems[:40], seed=0):
        for text in (e.problem.question, e.target, e.rival_draft or ""):
            ids = tokenizer(text, add_special_tokens=False)["input_ids"]
            assert not byte_tokens & set(ids)
            assert tokenizer.decode(ids) == text


def test_the_shipped_base_drafts_a_search_in_the_format() -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from agon_lightning.game.prompts import Prompts
    from agon_lightning.infra.model_source import resolve_model_path

    path = Path(resolve_model_path("agon:tiny-countdown"))
    tokenizer, model = AutoTokenizer.from_pretrained(path), AutoModelForCausalLM.from_pretrained(path)
    assert tokenizer.get_vocab() == build_tokenizer().get_vocab()  # the tokenizer of tiny.py, unchanged
    assert 1_000_000 <= model.num_parameters() <= 1_100_000
    assert sum(f.stat().st_size for f in path.iterdir()) <= 10 * 2**20
    (problem,) = generate_problems(MAIN, 1, seed=10_001, question_format=FORMAT)  # held out
    prompt = Prompts().draft_prompt(tokenizer, problem)
    ids = tokenizer(prompt, return_tensors="pt", add_special_tokens=False)["input_ids"]
    out = model.generate(ids, max_new_tokens=192, do_sample=False, pad_token_id=tokenizer.pad_token_id)
    text = tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True)
    assert ThinkAnswerFormat().score(text) == 1.0, text
    assert parse_claims(attempts_of(text)[0]), text  # the trace opens with an attempt


# ---------------------------------------------------------------------------------------------
# The config, end to end
# ---------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_two_steps_of_the_shipped_config(tmp_path) -> None:
    import csv

    from agon_lightning.cli import main

    root = tmp_path / "run"
    config = Path(__file__).resolve().parents[1] / "configs" / "countdown.yaml"
    main([
        "fit", "--config", str(config), "--trainer.limit_train_batches=2", f"--trainer.default_root_dir={root}",
        "--data.init_args.batch_size=2", "--data.init_args.val_size=4", "--data.init_args.hard_size=4",
        "--data.init_args.train_size=20", "--model.grpo.num_generations=2", "--model.rollout.init_args.max_new_tokens=64",
    ])  # fmt: skip
    (metrics_file,) = root.rglob("metrics.csv")
    columns = set(next(csv.DictReader(metrics_file.open())))
    for name in ("train/draft/accuracy", "train/challenge/accuracy", "val/base/pass@1", "val/hard/base/pass@1",
                 "val/deployed/pass@1"):  # fmt: skip
        assert name in columns, name


def test_the_sft_config_holds_out_what_the_rl_config_evaluates(tmp_path) -> None:
    import yaml

    from agon_lightning.cli.sft import SFTCLI
    from agon_lightning.training.sft import SFTModule

    configs = Path(__file__).resolve().parents[1] / "configs"
    cli = SFTCLI(
        SFTModule, SFTDataModule, run=False,
        args=["--config", str(configs / "sft_countdown.yaml"), f"--trainer.default_root_dir={tmp_path}",
              "--trainer.logger=false"],
    )  # fmt: skip
    rl = yaml.safe_load((configs / "countdown.yaml").read_text())
    data, sft = rl["data"]["init_args"], cli.datamodule
    assert isinstance(sft.examples, CountdownExamples) and isinstance(
        cli.model.summarizer, CountdownSummarizer
    )
    for key in ("tasks", "hard_tasks", "val_seed", "hard_size", "hard_seed", "question_format"):
        assert getattr(sft, key) == data[key], key
    # The same held-out part: the SFT stopping rule reads the first 200 of what RL evaluates (all of it)
    holdout = data["holdout"]["init_args"]
    assert (sft.holdout.fraction, sft.holdout.salt) == (holdout["fraction"], holdout["salt"])
    assert data["val_size"] is None and sft.val_size == 200
    assert cli.model.prompts.challenge == rl["model"]["prompts"]["challenge"]
    assert cli.model.rollout.max_new_tokens == rl["model"]["rollout"]["init_args"]["max_new_tokens"]

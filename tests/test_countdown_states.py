"""Held out by state: no Countdown SFT trace passes through a held-out statement as a sub-step."""

from __future__ import annotations

import pytest

from agon_lightning.data.holdout import HashHoldout
from agon_lightning.data.reasoning_gym import generate_problems
from agon_lightning.game.types import Problem
from agon_lightning.testbeds.countdown.sft import CountdownExamples
from agon_lightning.testbeds.countdown.states import passes_through, states, target_of
from agon_lightning.testbeds.countdown.summarizer import countdown_numbers

FOUR = {"countdown": {"min_numbers": 4, "max_numbers": 4, "min_value": 1, "max_value": 9,
                      "min_target": 10, "max_target": 99, "operators": ["+", "-", "*"]}}  # fmt: skip
HOLDOUT = HashHoldout(0.4, "agon-s2")


def posed(target: int, numbers: tuple[int, ...]) -> Problem:
    """A 3-number statement as the generator's entry holds it (written here, not by the module under test)."""
    entry = {"metadata": {"target": target, "numbers": list(numbers)}}
    return Problem(f"Make {target} from {list(numbers)}", "", {"task": "countdown", "entry": entry})


def held_out_states_seen(examples) -> int:
    """Attempts, read as the audit reads them, that leave a held-out 3-number statement."""
    seen = 0
    for e in examples:
        numbers, target = countdown_numbers(e.problem), target_of(e.problem)
        for text in (e.target, e.rival_draft or ""):
            seen += sum(HOLDOUT.held_out(posed(*state)) for state, _ in passes_through(text, numbers, target))
    return seen


def test_states_are_every_statement_an_attempt_passes_through():
    completion = (
        "<think>9-1=8 y|6*6=37 n\n"  # a check line: not an attempt
        "9-1=8|6*6=36|36-8=28\n"
        "9+6=15|15+6=21|21*1=21|x\n"
        "6+1=8!\n"  # a slipped first step: no state
        "</think><answer>6*6-(9-1)</answer>"
    )
    assert states(completion, [1, 6, 6, 9], 28) == {(28, (6, 6, 8)), (28, (1, 6, 15))}


@pytest.fixture(scope="module")
def problems() -> list[Problem]:
    return generate_problems(FOUR, 300, 50001, "Make {target} from {numbers}")


def test_without_the_holdout_traces_pass_through_held_out_statements_and_with_it_none_does(problems):
    plain = CountdownExamples().build(problems, seed=0)
    assert held_out_states_seen(plain) > 20  # what S2's base was trained on

    examples = CountdownExamples()
    examples.hold_out_states(HOLDOUT.held_out)
    clean = examples.build(problems, seed=0)
    assert held_out_states_seen(clean) == 0
    counts = examples.last_build
    assert counts["redrawn"] > 0 and counts["problems"] == len(problems)
    assert len(clean) == len(problems) - counts["dropped"]
    assert counts["dropped"] < 0.15 * len(problems)  # 64 draws find a clean search for most problems
    assert examples.build(problems, seed=0) == clean  # seeded: the same examples again


def test_the_sft_data_module_holds_its_holdout_out_of_the_states():
    from agon_lightning.training.sft_data import SFTDataModule

    data = SFTDataModule(
        tasks=FOUR, examples=CountdownExamples(), holdout=HOLDOUT, train_size=10, val_size=4, batch_size=2
    )
    assert data.examples.held_out_state is not None
    assert (
        SFTDataModule(
            tasks=FOUR, examples=CountdownExamples(), train_size=10, batch_size=2
        ).examples.held_out_state
        is None
    )

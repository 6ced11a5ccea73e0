"""S2's audit: the 3-number states a 4-number trace passes through, and two archives' runs compared."""

from __future__ import annotations

import test_countdown_s2_endpoints as archived

from agon_lightning.game.types import Problem
from experiments.countdown.s2_audit import exposure, passes_through, same_outcomes


def problem(target: int, numbers: list[int]) -> Problem:
    entry = {"metadata": {"target": target, "numbers": numbers}}
    return Problem(f"Make {target} from {numbers}", "", {"task": "countdown", "entry": entry})


def test_each_attempt_leaves_the_state_of_its_first_step_and_a_hit_solves_it():
    completion = (
        "<think>9-1=8 y|6*6=37 n\n"  # a challenger's check line: claims with verdicts, not an attempt
        "9-1=8|6*6=36|36-8=28\n"  # a hit through (28, 6 6 8)
        "6*6=36|36-9=27|27+1=28\n"  # a hit through (28, 1 9 36): not a 3-number problem of the space
        "9+6=15|15+6=21|21*1=21|x\n"  # a miss through (28, 1 6 15)
        "6+1=8!\n"  # a slipped first step leaves no state
        "7*4=28</think>9-1=8<answer>6*6-(9-1)</answer>"  # a value not given: no state
    )
    assert passes_through(completion, [1, 6, 6, 9], 28) == [
        ((28, (6, 6, 8)), True),
        ((28, (1, 9, 36)), True),
        ((28, (1, 6, 15)), False),
    ]


def test_exposure_counts_held_out_states_of_four_number_examples_only():
    held_out = {(28, (6, 6, 8)), (41, (4, 9, 36)), (10, (1, 2, 3))}
    pairs = [
        (problem(28, [1, 6, 6, 9]), "<think>9-1=8|6*6=36|36-8=28</think>"),
        (problem(41, [4, 4, 9, 9]), "<think>9*4=36|36+9=45|45*4=180|x</think>"),  # seen, not solved
        (problem(10, [1, 2, 3]), "<think>1+2=3|3*3=9|x</think>"),  # three numbers: not counted
    ]
    found = exposure(pairs, held_out)
    assert found == {"examples": 2, "seen": [(28, (6, 6, 8)), (41, (4, 9, 36))], "solved": [(28, (6, 6, 8))]}


def test_two_archives_of_the_same_runs_agree_outcome_for_outcome_and_a_changed_one_does_not(
    tmp_path, monkeypatch
):
    for seed in (0, 1):
        archived.finished(tmp_path / "pilot", "grpo", seed)
    archived.finished(tmp_path / "sweep", "grpo", 0)
    real = archived.outcomes

    def one_flipped(variant: str, seed: int):
        made = real(variant, seed)
        made["alpha"][0] = not made["alpha"][0]
        return made

    monkeypatch.setattr(archived, "outcomes", one_flipped)
    archived.finished(tmp_path / "sweep", "grpo", 1)
    archived.finished(tmp_path / "sweep", "grpo", 2)  # the pilot never ran it: not compared
    found = same_outcomes(tmp_path / "pilot", tmp_path / "sweep")
    problems = 2 * archived.N
    assert found == {
        "grpo seed 0": {"alpha": {"problems": problems, "same": problems},
                        "cascade_aa": {"problems": problems, "same": problems}},
        "grpo seed 1": {"alpha": {"problems": problems, "same": problems - 1},
                        "cascade_aa": {"problems": problems, "same": problems}},
    }  # fmt: skip

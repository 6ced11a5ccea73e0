"""The held-out part of a problem space: fixed by a hash of the statement, never drawn by training or SFT."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from agon_lightning.data.holdout import HashHoldout, distinct, unit_hash
from agon_lightning.data.reasoning_gym import ReasoningGymDataModule, generate_problems
from agon_lightning.data.statements import countdown_space
from agon_lightning.game.types import Problem
from agon_lightning.training.sft_data import SFTDataModule
from agon_lightning.training.validation import SPLIT
from agon_lightning.verifiers.reasoning_gym import ReasoningGymVerifier

CONFIGS = Path(__file__).parents[1] / "configs"
THREE = {"min_numbers": 3, "max_numbers": 3, "min_value": 1, "max_value": 9, "min_target": 10, "max_target": 99,
         "operators": ["+", "-", "*"]}  # fmt: skip
FOUR = {**THREE, "min_numbers": 4, "max_numbers": 4}
FORMAT = "Make {target} from {numbers}"


def countdown(numbers: list[int], target: int, question: str = "q") -> Problem:
    entry = {"metadata": {"numbers": numbers, "target": target}}
    return Problem(question, None, {"task": "countdown", "entry": entry})


def test_the_hash_is_a_fixed_number_in_the_unit_interval_that_the_salt_changes():
    assert unit_hash("countdown|35|3 8 9", "agon-s2") == unit_hash("countdown|35|3 8 9", "agon-s2")
    assert 0 <= unit_hash("countdown|35|3 8 9", "agon-s2") < 1
    assert unit_hash("countdown|35|3 8 9", "agon-s2") != unit_hash("countdown|35|3 8 9", "other")
    with pytest.raises(ValueError, match="fraction must be in"):
        HashHoldout(1.0)
    with pytest.raises(ValueError, match="salt"):
        HashHoldout(0.4, salt="")


def test_a_problem_is_held_out_whatever_order_its_numbers_were_drawn_in_and_however_it_is_worded():
    h = HashHoldout(0.4)
    a, b = countdown([9, 3, 8], 35, "Using 9, 3, 8 make 35"), countdown([3, 8, 9], 35, "Make 35 from 3 8 9")
    assert h.statement(a) == h.statement(b) == "countdown|35|3 8 9"
    assert h.held_out(a) == h.held_out(b)
    assert h.statement(countdown([3, 8, 9], 36)) != h.statement(a)
    with pytest.raises(ValueError, match="needs the problem's reasoning-gym entry"):
        h.statement(Problem("Make 35 from 3 8 9"))


def test_the_counted_space_is_what_the_generator_draws_and_its_answers_score_full_credit():
    three = countdown_space(3)
    assert len(three) == 1319 and len(countdown_space(4)) == 16069
    for (target, numbers), expression in three.items():
        assert eval(expression) == target and sorted(int(c) for c in expression if c.isdigit()) == list(
            numbers
        )
    drawn = generate_problems({"countdown": THREE}, 3000, seed=7)
    keys = {(p.metadata["entry"]["metadata"]["target"], tuple(sorted(p.metadata["entry"]["metadata"]["numbers"])))
            for p in drawn}  # fmt: skip
    assert keys <= set(three)  # nothing the generator draws is outside the counted space


def test_training_never_draws_a_held_out_problem_and_evaluation_reads_each_held_out_one_once():
    h = HashHoldout(0.4)
    dm = ReasoningGymDataModule(tasks={"countdown": THREE}, hard_tasks={"countdown": FOUR}, question_format=FORMAT,
                                train_size=1500, val_size=None, hard_size=120, holdout=h)  # fmt: skip
    val, train = dm.load_val(), dm.load_train()
    main = [p for p in val if p.metadata.get(SPLIT) != "hard"]
    hard = [p for p in val if p.metadata.get(SPLIT) == "hard"]
    assert len(train) == 1500 and not any(h.held_out(p) for p in train)
    # every held-out 3-number statement of the space, each once; the hard set 120 distinct ones
    held = sum(h.position(countdown(list(n), t)) < 0.4 for t, n in countdown_space(3))
    assert len(main) == len({p.question for p in main}) == held
    assert len(hard) == len({p.question for p in hard}) == 120
    assert all(h.held_out(p) for p in val) and all(
        len(p.metadata["entry"]["metadata"]["numbers"]) == 4 for p in hard
    )
    assert not {p.question for p in val} & {p.question for p in train}
    verifier = ReasoningGymVerifier()
    assert all(verifier.verify(f"<answer>{p.answer}</answer>", p).correct for p in main[:50] + hard[:50])
    # the held-out part does not depend on how much of it is evaluated
    smaller = ReasoningGymDataModule(tasks={"countdown": THREE}, question_format=FORMAT, train_size=1500,
                                     val_size=100, holdout=h)  # fmt: skip
    assert [p.question for p in smaller.load_val()] == [p.question for p in main[:100]]
    assert [p.question for p in smaller.load_train()] == [p.question for p in train]


def test_sft_examples_never_come_from_the_held_out_part_of_either_space():
    h = HashHoldout(0.4)
    dm = SFTDataModule(tasks={"countdown": THREE}, train_tasks={"countdown": {**THREE, "max_numbers": 4}},
                       question_format=FORMAT, train_size=2000, val_size=50, data_seed=50001, holdout=h)  # fmt: skip
    train = dm.load_train()
    counts = {len(p.metadata["entry"]["metadata"]["numbers"]) for p in train}
    assert len(train) == 2000 and counts == {3, 4}
    assert not any(h.held_out(p) for p in train)


def test_a_task_whose_space_is_not_listed_draws_distinct_held_out_problems():
    h = HashHoldout(0.3, key_format=None)  # the question itself is the statement
    tasks = {"chain_sum": {"min_terms": 2, "max_terms": 2}}
    dm = ReasoningGymDataModule(tasks=tasks, train_size=200, val_size=40, holdout=h)
    val, train = dm.load_val(), dm.load_train()
    assert len(val) == len({p.question for p in val}) == 40 and all(h.held_out(p) for p in val)
    assert not any(h.held_out(p) for p in train)
    with pytest.raises(ValueError, match="cannot be listed"):
        ReasoningGymDataModule(tasks=tasks, val_size=None, holdout=h).load_val()
    with pytest.raises(ValueError, match="needs a holdout"):
        ReasoningGymDataModule(tasks=tasks, val_size=None)


def test_distinct_keeps_each_statement_once_in_hash_order():
    h = HashHoldout(0.5)
    problems = [countdown([3, 8, 9], 35), countdown([9, 8, 3], 35), countdown([1, 2, 9], 18)]
    out = distinct(problems, h)
    assert len(out) == 2 and [h.position(p) for p in out] == sorted(h.position(p) for p in out)


def test_the_rl_and_sft_configs_hold_out_the_same_part():
    rl = yaml.safe_load((CONFIGS / "countdown.yaml").read_text())["data"]["init_args"]["holdout"]
    sft = yaml.safe_load((CONFIGS / "sft_countdown.yaml").read_text())["data"]["holdout"]
    assert rl == sft and rl["init_args"]["fraction"] == 0.4

"""DeepMathDataModule: the hard split, invalid rows dropped, a deterministic held-out split."""

from __future__ import annotations

import json
import math
from pathlib import Path

import datasets
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from agon_lightning.data.deepmath import (
    COLUMNS,
    DeepMathDataModule,
    is_binary_answer,
    read_rows,
    select_problems,
    valid_difficulty,
)

FIXTURE = Path(__file__).parent / "fixtures" / "deepmath_fixture.jsonl"
ROWS = [json.loads(line) for line in FIXTURE.read_text().splitlines()]
SCHEMA = [
    "question",
    "final_answer",
    "difficulty",
    "topic",
    "r1_solution_1",
    "r1_solution_2",
    "r1_solution_3",
]


def questions(problems) -> set[str]:
    return {p.question for p in problems}


def rows_where(predicate) -> set[str]:
    """Questions of the valid, non-binary fixture rows that satisfy ``predicate``."""
    return {
        r["question"]
        for r in ROWS
        if valid_difficulty(r["difficulty"]) is not None and r["final_answer"] != "No" and predicate(r)
    }


def test_fixture_has_the_real_schema():
    for row in ROWS:
        assert list(row) == SCHEMA
        assert row["difficulty"] is None or isinstance(row["difficulty"], float)
        assert all(isinstance(row[k], str) for k in SCHEMA if k != "difficulty")


@pytest.mark.parametrize("value", [None, float("nan"), float("inf"), 0.0, 0.5, 10.5, -7.0, "hard", True])
def test_invalid_difficulties_are_rejected(value):
    assert valid_difficulty(value) is None


@pytest.mark.parametrize("value", [1.0, 7, 7.5, "8.0", 10.0])
def test_valid_difficulties_are_floats(value):
    assert valid_difficulty(value) == float(value)


def test_hard_split_is_difficulty_at_least_7_without_invalid_rows():
    hard = select_problems(read_rows(str(FIXTURE)))
    assert questions(hard) == rows_where(lambda r: r["difficulty"] >= 7)
    assert len(hard) == 11
    everything = select_problems(read_rows(str(FIXTURE)), min_difficulty=None, drop_binary=False)
    assert len(everything) == len(ROWS) - 2  # the null and the 0.0 difficulty rows
    assert len(select_problems(read_rows(str(FIXTURE)), min_difficulty=None)) == len(ROWS) - 3  # and "No"
    assert "What is $1 + 2$?" not in questions(everything) and "What is $2 + 2$?" not in questions(everything)


def test_problems_carry_the_answer_and_metadata():
    (problem,) = [p for p in select_problems(read_rows(str(FIXTURE))) if p.answer == "\\{1, 2, 3\\}"]
    assert problem.question == "Find the set of roots of $x^3 - 6x^2 + 11x - 6$."
    assert problem.metadata == {
        "index": 5,
        "difficulty": 7.0,
        "topic": "Mathematics -> Algebra -> Algebra -> Polynomial Operations",
    }


def test_band_and_topic_filters():
    easy = select_problems(read_rows(str(FIXTURE)), min_difficulty=None, max_difficulty=6.5)
    assert questions(easy) == rows_where(lambda r: r["difficulty"] <= 6.5) and len(easy) == 3
    precalc = select_problems(read_rows(str(FIXTURE)), topics=["Mathematics -> Precalculus"])
    assert questions(precalc) == rows_where(lambda r: r["difficulty"] >= 7 and "Precalculus" in r["topic"])
    assert len(precalc) == 2
    two = select_problems(
        read_rows(str(FIXTURE)), topics=["Mathematics -> Precalculus", "Mathematics -> Geometry"]
    )
    assert len(two) == 3


def test_held_out_split_is_deterministic_and_disjoint():
    def split(seed: int) -> tuple[list, list]:
        dm = DeepMathDataModule(source=str(FIXTURE), val_size=3, split_seed=seed, batch_size=2)
        return dm.train_problems, dm.val_problems

    train, val = split(7)
    assert len(train) == 8 and len(val) == 3
    assert not questions(train) & questions(val)
    assert questions(train) | questions(val) == rows_where(lambda r: r["difficulty"] >= 7)
    again_train, again_val = split(7)
    assert [p.question for p in again_train] == [p.question for p in train]
    assert [p.question for p in again_val] == [p.question for p in val]
    assert questions(split(8)[1]) != questions(val)


def test_train_size_takes_a_seeded_sample():
    dm = DeepMathDataModule(source=str(FIXTURE), val_size=3, train_size=4, batch_size=2)
    again = DeepMathDataModule(source=str(FIXTURE), val_size=3, train_size=4, batch_size=2)
    assert len(dm.train_problems) == 4
    assert [p.question for p in dm.train_problems] == [p.question for p in again.train_problems]
    assert not questions(dm.train_problems) & questions(dm.val_problems)


def test_batches_are_lists_of_problems():
    dm = DeepMathDataModule(source=str(FIXTURE), val_size=3, batch_size=4)
    batch = next(iter(dm.train_dataloader()))
    assert len(batch) == 4 and all(p.answer and p.metadata["difficulty"] >= 7 for p in batch)
    assert len(list(dm.train_dataloader())) == 2  # 8 training problems, drop_last


def test_parquet_file_and_folder_read_like_jsonl(tmp_path):
    table = pa.Table.from_pylist(ROWS).cast(
        pa.schema([(k, pa.float64() if k == "difficulty" else pa.string()) for k in SCHEMA])
    )
    # A NaN difficulty (possible in Parquet, not in JSON) is dropped like a null one.
    nan_row = {**ROWS[0], "question": "NaN row", "difficulty": math.nan}
    table = pa.concat_tables([table, pa.Table.from_pylist([nan_row], schema=table.schema)])
    pq.write_table(table, tmp_path / "train-00000-of-00001.parquet")
    from_parquet = select_problems(
        read_rows(str(tmp_path / "train-00000-of-00001.parquet")), min_difficulty=None
    )
    from_jsonl = select_problems(read_rows(str(FIXTURE)), min_difficulty=None)
    assert [(p.question, p.answer, p.metadata) for p in from_parquet] == [
        (p.question, p.answer, p.metadata) for p in from_jsonl
    ]
    assert len(read_rows(str(tmp_path))) == len(ROWS) + 1
    assert set(read_rows(str(tmp_path))[0]) == set(COLUMNS)  # the R1 solutions are never read


def test_hub_id_goes_through_datasets_with_our_columns(monkeypatch):
    calls = []

    def fake_load_dataset(path, split, columns):
        calls.append((path, split, columns))
        return datasets.Dataset.from_list([{k: r[k] for k in columns} for r in ROWS])

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    dm = DeepMathDataModule(val_size=2, batch_size=2)
    dm.prepare_data()
    assert len(dm.train_problems) + len(dm.val_problems) == 11
    assert calls == [("zwhe99/DeepMath-103K", "train", list(COLUMNS))] * 2


def test_bad_settings_name_the_value(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing.jsonl"):
        read_rows(str(tmp_path / "missing.jsonl"))
    with pytest.raises(FileNotFoundError, match="no .parquet"):
        read_rows(str(tmp_path))
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(ROWS[0]) + "\n{not json\n")
    with pytest.raises(ValueError, match="bad.jsonl:2 is not valid JSON"):
        read_rows(str(bad))
    with pytest.raises(ValueError, match="min_difficulty \\(8\\.0\\) must be <= max_difficulty"):
        DeepMathDataModule(min_difficulty=8.0, max_difficulty=7.0)
    with pytest.raises(
        ValueError, match=r"11 distinct problems pass the filters, and data.val_size=11 would hold out all"
    ):
        DeepMathDataModule(source=str(FIXTURE), val_size=11).setup()


@pytest.mark.parametrize(
    "answer, binary",
    [
        ("Yes", True), ("no", True), ("NO", True), ("True", True), ("false", True), (" yes ", True),
        ("Yes.", True), ("\\text{Yes}", True), ("$\\text{No}$", True), ("\\textbf{True}.", True),
        ("\\boxed{No}", True), ("\\(\\mathrm{false}\\)", True), ("$$\\text{ yes }$$", True),
        ("No solution", False), ("None", False), ("Yes, 3", False), ("0", False), ("1", False),
        ("Converges", False), ("T", False), ("\\text{Neither}", False), ("Yes or no", False), ("", False),
    ],
)  # fmt: skip
def test_binary_answers(answer, binary):
    assert is_binary_answer(answer) is binary


def many_rows(count: int) -> list[dict]:
    """``count`` rows in the real schema, each its own problem, difficulty 8."""
    base = ROWS[0]
    return [{**base, "question": f"Compute {i} + {i}.", "final_answer": str(2 * i), "difficulty": 8.0}
            for i in range(count)]  # fmt: skip


def write_jsonl(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


def test_the_papers_split_is_sized_disjoint_and_independent_of_row_order(tmp_path):
    rows = many_rows(60)
    shuffled = rows[::-1][::2] + rows[::-1][1::2]
    repeated = rows + [
        {**rows[5], "final_answer": "other"},
        rows[7],
    ]  # the same question twice is one problem

    def split(rows: list[dict], name: str, seed: int = 1234):
        dm = DeepMathDataModule(source=write_jsonl(tmp_path / name, rows), min_difficulty=8.0, val_size=10,
                                train_size=30, split_seed=seed, batch_size=2)  # fmt: skip
        return [p.question for p in dm.train_problems], [p.question for p in dm.val_problems]

    train, val = split(rows, "a.jsonl")
    assert len(train) == 30 and len(val) == 10 and not set(train) & set(val)
    assert split(rows, "again.jsonl") == (train, val)  # two loads
    assert split(shuffled, "shuffled.jsonl") == (train, val)  # another row order: the same lists
    assert split(repeated, "repeated.jsonl") == (train, val)  # each repeat dropped, never on both sides
    assert split(rows, "other_seed.jsonl", seed=7)[1] != val


def test_too_few_problems_for_the_training_size_is_logged(tmp_path, caplog):
    dm = DeepMathDataModule(source=write_jsonl(tmp_path / "few.jsonl", many_rows(12)), min_difficulty=8.0,
                            val_size=4, train_size=3000, batch_size=2)  # fmt: skip
    with caplog.at_level("WARNING"):
        assert len(dm.train_problems) == 8 and len(dm.val_problems) == 4
    assert "only 8 problems left for training after 4 held out (train_size=3000)" in caplog.text

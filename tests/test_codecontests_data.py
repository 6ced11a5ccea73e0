"""The CodeContests data module: the real schema in, judged problems out, filters that bite."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from agon_lightning.data.codecontests import (
    CHALLENGE_PROMPT,
    DRAFT_PROMPT,
    CodeContestsDataModule,
    difficulty_code,
    row_to_problem,
    time_limit_seconds,
)
from agon_lightning.data.reader import read_rows

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "codecontests_fixture.jsonl"
SHARED_SAMPLE = ROOT.parent / "shared" / "data" / "codecontests" / "codecontests_train_sample30.jsonl"


def names(problems) -> list[str]:
    """The problems' names, sorted: the module lists them in its seeded hash order."""
    return sorted(p.metadata["name"] for p in problems)


def by_name(problems, name: str):
    (problem,) = [p for p in problems if p.metadata["name"] == name]
    return problem


def module(**kwargs) -> CodeContestsDataModule:
    kwargs.setdefault("train_path", str(FIXTURE))
    kwargs.setdefault("val_path", str(FIXTURE))
    kwargs.setdefault("batch_size", 1)
    return CodeContestsDataModule(**kwargs)


def test_rows_become_problems_with_tests_and_limits():
    problems = module().train_problems
    # File-I/O and test-less problems are dropped.
    assert names(problems) == ["1_A. Sum of two", "2_B. Mean", "3_C. Shout", "6_L. Count down"]
    first = by_name(problems, "1_A. Sum of two")
    assert first.question.startswith("Given two integers a and b")
    assert first.answer is None
    assert [t["output"] for t in first.metadata["tests"]] == ["3\n", "0\n", "2000000000000000000\n", "-3\n"]
    assert first.metadata["time_limit"] == 1.0 and first.metadata["memory_limit_bytes"] == 256000000
    mean, shout = by_name(problems, "2_B. Mean"), by_name(problems, "3_C. Shout")
    assert mean.metadata["time_limit"] == 2.5
    assert shout.metadata["time_limit"] is None and shout.metadata["memory_limit_bytes"] is None


@pytest.mark.parametrize(
    "filters, expected",
    [
        ({"difficulties": ["A", "B"]}, ["1_A. Sum of two", "2_B. Mean"]),
        ({"difficulties": [9, "L"]}, ["3_C. Shout", "6_L. Count down"]),  # L is 19: the enum skips 18
        ({"min_rating": 1000}, ["2_B. Mean", "6_L. Count down"]),  # unrated (0) problems are dropped
        ({"max_rating": 1200}, ["1_A. Sum of two", "2_B. Mean"]),
        ({"sources": ["atcoder"]}, ["6_L. Count down"]),
        ({"sources": [2], "difficulties": ["C"]}, ["3_C. Shout"]),
    ],
)
def test_filters(filters, expected):
    assert names(module(**filters).train_problems) == expected


def test_test_sets_and_max_tests():
    public_only = by_name(module(test_sets=["public_tests"]).train_problems, "1_A. Sum of two")
    assert public_only.metadata["tests"] == [{"input": "1 2\n", "output": "3\n"}]
    assert len(by_name(module(max_tests=2).train_problems, "1_A. Sum of two").metadata["tests"]) == 2
    with pytest.raises(ValueError, match="hidden_tests"):
        module(test_sets=["hidden_tests"])


def test_difficulty_letters_follow_the_proto():
    assert [difficulty_code(x) for x in ("A", "k", "L", "V", 12)] == [7, 17, 19, 29, 12]
    with pytest.raises(ValueError, match="'Z'"):
        difficulty_code("Z")


def test_time_limit_forms():
    assert time_limit_seconds({"seconds": 2, "nanos": 500_000_000}) == 2.5
    assert time_limit_seconds({"seconds": 0, "nanos": 0}) is None
    assert time_limit_seconds(None) is None
    assert time_limit_seconds(3) == 3.0


def test_parquet_and_directories_read_like_jsonl(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = list(read_rows(str(FIXTURE)))
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "train-00000.parquet")
    from_parquet = module(train_path=str(tmp_path), val_path=str(tmp_path / "*.parquet")).train_problems
    assert [(p.question, p.metadata) for p in from_parquet] == [
        (p.question, p.metadata) for p in module().train_problems
    ]


def test_holdout_split_is_disjoint_and_seeded():
    dm = module(val_path=None, val_size=1, seed=3)
    train, val = names(dm.train_problems), names(dm.val_problems)
    assert len(val) == 1 and not set(train) & set(val) and len(train) == 3
    assert names(module(val_path=None, val_size=1, seed=3).val_problems) == val


def test_missing_local_file_is_an_error_not_a_download(tmp_path):
    for path in (str(tmp_path / "missing.jsonl"), "data/cc/missing", str(tmp_path)):
        with pytest.raises(FileNotFoundError, match="no .jsonl"):
            list(read_rows(path))


def test_batches_are_lists_of_problems():
    batch = next(iter(module(batch_size=2).train_dataloader()))
    assert len(batch) == 2 and all(p.metadata["tests"] for p in batch)


@pytest.mark.skipif(not SHARED_SAMPLE.exists(), reason=f"shared sample not found at {SHARED_SAMPLE}")
def test_the_shared_real_sample_loads():
    dm = module(train_path=str(SHARED_SAMPLE), val_path=None, val_size=5, max_tests=None)
    problems = dm.train_problems + dm.val_problems
    assert len(problems) == 30
    assert all(len(p.metadata["tests"]) == 10 for p in problems)
    assert all(p.metadata["source"] == 2 for p in problems)
    assert names(module(train_path=str(SHARED_SAMPLE), difficulties=["O"]).train_problems) == ["630_O. Arrow"]


def test_fixture_matches_the_dataset_schema():
    # The fields the Hub rows carry (and the shared sample has): the fixture must not drift from them.
    fields = {
        "name", "description", "public_tests", "private_tests", "generated_tests", "source", "difficulty",
        "solutions", "incorrect_solutions", "cf_contest_id", "cf_index", "cf_points", "cf_rating", "cf_tags",
        "is_description_translated", "untranslated_description", "time_limit", "memory_limit_bytes",
        "input_file", "output_file",
    }  # fmt: skip
    for line in FIXTURE.read_text().splitlines():
        assert set(json.loads(line)) == fields
    assert row_to_problem(json.loads(FIXTURE.read_text().splitlines()[0])).metadata["difficulty"] == 7


def test_shipped_config_uses_the_module_prompts():
    config = yaml.safe_load((ROOT / "configs" / "codecontests_qwen3.yaml").read_text())
    assert config["model"]["prompts"]["draft"] == DRAFT_PROMPT
    assert config["model"]["prompts"]["challenge"] == CHALLENGE_PROMPT
    assert config["data"]["class_path"] == "agon_lightning.data.codecontests.CodeContestsDataModule"


def test_the_held_out_split_is_sized_disjoint_and_independent_of_row_order(tmp_path):
    template = json.loads(FIXTURE.read_text().splitlines()[0])
    rows = [{**template, "name": f"{i}_A. Problem {i}", "cf_rating": 800 + 100 * (i % 8)} for i in range(40)]

    def split(rows, name, **kwargs):
        path = tmp_path / name
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
        dm = module(train_path=str(path), val_path=None, val_size=10, sources=["codeforces"], max_rating=1200,
                    **kwargs)  # fmt: skip
        return [p.metadata["name"] for p in dm.train_problems], [p.metadata["name"] for p in dm.val_problems]

    train, val = split(rows, "a.jsonl")
    easy = {row["name"] for row in rows if row["cf_rating"] <= 1200}
    assert len(val) == 10 and not set(train) & set(val) and set(train) | set(val) == easy
    assert split(rows[::-1], "reversed.jsonl") == (train, val)
    assert split(rows, "b.jsonl", train_size=5)[0] == train[:5]
    assert split(rows, "c.jsonl", split_seed=7)[1] != val

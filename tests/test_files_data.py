"""Problem files and Hub datasets: configurable columns, bad rows named by file and line."""

import json
import sys
import types
from pathlib import Path

import pytest

from agon_lightning.cli import AgonCLI
from agon_lightning.data.files import (
    FileProblemDataModule,
    ProblemFields,
    load_problems,
    read_problem_rows,
    write_problems,
)
from agon_lightning.game.types import Problem

ROOT = Path(__file__).resolve().parents[1]


def write_jsonl(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_columns_are_configurable_and_every_other_column_goes_to_metadata(tmp_path):
    path = write_jsonl(tmp_path / "p.jsonl", [
        json.dumps({"problem": "1+1?", "solution": 2, "meta": {"task": "add", "id": "not me"}, "id": "a"}),
        json.dumps({"problem": "Name it.", "meta": None, "id": "b"}),
    ])  # fmt: skip
    fields = ProblemFields(question="problem", answer="solution", metadata="meta")
    assert load_problems(str(path), fields) == [  # the answer's and the object's columns kept verbatim too
        Problem(
            "1+1?", "2", {"solution": 2, "meta": {"task": "add", "id": "not me"}, "id": "a", "task": "add"}
        ),
        Problem("Name it.", None, {"meta": None, "id": "b"}),
    ]


def test_written_problems_read_back_with_their_question_answer_and_metadata(tmp_path):
    problems = [
        Problem("1+1?", "2", {"task": "add", "entry": {"n": [1, 1]}}),
        Problem("open?", None, {"solution": "not the gold answer"}),
        Problem.from_messages(
            [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}], "4"
        ),
    ]
    back = load_problems(str(write_problems(problems, tmp_path / "out" / "p.jsonl")))
    assert back == [
        Problem("1+1?", "2", {"task": "add", "entry": {"n": [1, 1]}, "answer": "2"}),
        Problem("open?", None, {"solution": "not the gold answer", "answer": None}),
        Problem("2+2?", "4", {"answer": "4"}, problems[2].messages),
    ]
    assert load_problems(str(write_problems(back, tmp_path / "again.jsonl"))) == back  # stable


def test_bad_rows_are_named_by_file_and_line_and_the_others_survive(tmp_path):
    path = write_jsonl(tmp_path / "p.jsonl", [
        json.dumps({"question": "ok 1", "answer": "1"}),
        "{not json",
        "",
        json.dumps({"question": "   ", "answer": "3"}),
        json.dumps(["a", "list"]),
        json.dumps({"text": "wrong column"}),
        json.dumps({"question": "ok 2", "metadata": "not an object"}),
        json.dumps({"question": "ok 3"}),
    ])  # fmt: skip
    rows = read_problem_rows(str(path))
    assert [r.index for r in rows] == list(range(7))  # the blank line is no row
    assert [r.problem.question for r in rows if r.problem] == ["ok 1", "ok 3"]
    errors = [r.error for r in rows if r.error]
    assert errors[0].startswith(f"{path}:2: not valid JSON (") and errors[0].endswith("at column 2)")
    assert errors[1:] == [
        f"{path}:4: empty question in field 'question'",
        f"{path}:5: expected a JSON object, got list",
        f"{path}:6: no 'prompt' or 'question' column (the row has ['text']); set the question field "
        "(fields.question) to the column holding the prompt",
        f"{path}:7: field 'metadata' must be an object, got str",
    ]
    with pytest.raises(ValueError, match=r"5 of 7 rows of .* are bad:\n  .*p.jsonl:2: not valid JSON"):
        load_problems(str(path))


def test_parquet_json_array_and_folders_read_the_same_problems(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [{"question": f"q{i}", "answer": str(i)} for i in range(3)]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "a.parquet")
    (tmp_path / "b.json").write_text(json.dumps(rows))
    from_parquet = read_problem_rows(str(tmp_path / "a.parquet"))
    assert [r.location for r in from_parquet] == [f"{tmp_path / 'a.parquet'} row {n}" for n in (1, 2, 3)]
    expected = [Problem(f"q{i}", str(i), {"answer": str(i)}) for i in range(3)]
    assert [r.problem for r in from_parquet] == expected
    assert load_problems(str(tmp_path / "b.json")) == expected
    assert load_problems(str(tmp_path)) == expected + expected  # a folder: files in name order


def test_hub_dataset_id_goes_through_datasets(monkeypatch):
    calls = []

    def load_dataset(source, subset, split):
        calls.append((source, subset, split))
        if source == "nobody/nothing":
            raise ConnectionError("offline")
        return [{"question": "hub q", "final_answer": "7"}]

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    rows = read_problem_rows("org/set", ProblemFields(answer="final_answer"), split="test", subset="main")
    assert calls == [("org/set", "main", "test")]
    assert rows[0].problem == Problem("hub q", "7", {"final_answer": "7"})
    assert rows[0].location == "org/set[test] row 1"
    with pytest.raises(FileNotFoundError, match=r"'nobody/nothing' is neither a local file .* offline"):
        read_problem_rows("nobody/nothing")


def test_missing_or_unsupported_files_fail_with_their_name(tmp_path):
    with pytest.raises(FileNotFoundError, match="problem file '.*nope.jsonl' does not exist"):
        read_problem_rows(str(tmp_path / "nope.jsonl"))
    (tmp_path / "p.csv").write_text("question\n1+1\n")
    with pytest.raises(ValueError, match=r"unsupported problem file '.*p.csv'"):
        read_problem_rows(str(tmp_path / "p.csv"))


def test_data_module_splits_a_holdout_or_reads_a_val_source(tmp_path):
    path = write_jsonl(
        tmp_path / "p.jsonl", [json.dumps({"question": f"q{i}", "answer": str(i)}) for i in range(10)]
    )
    dm = FileProblemDataModule(str(path), val_size=3, split_seed=5, batch_size=2)
    again = FileProblemDataModule(str(path), val_size=3, split_seed=5, batch_size=2)
    assert len(dm.train_problems) == 7 and len(dm.val_problems) == 3
    assert dm.val_problems == again.val_problems
    assert not {p.question for p in dm.train_problems} & {p.question for p in dm.val_problems}
    other = FileProblemDataModule(str(path), val_source=str(path))
    assert other.val_problems == other.train_problems
    with pytest.raises(ValueError, match="not both"):
        FileProblemDataModule(str(path), val_source=str(path), val_size=2)


def test_data_module_refuses_a_file_with_bad_rows(tmp_path):
    path = write_jsonl(tmp_path / "p.jsonl", [json.dumps({"question": "q"}), "oops"])
    with pytest.raises(ValueError, match=r"p.jsonl:2: not valid JSON"):
        FileProblemDataModule(str(path)).setup()


def test_data_module_is_selectable_from_the_cli(tmp_path, tiny_model_dir):
    path = write_jsonl(
        tmp_path / "p.jsonl", [json.dumps({"problem": f"q{i}", "answer": str(i)}) for i in range(6)]
    )
    cli = AgonCLI(args=[
        "--config", str(ROOT / "configs/agon.yaml"), f"--model.model_name_or_path={tiny_model_dir}",
        "--data=agon_lightning.data.files.FileProblemDataModule", f"--data.train_source={path}",
        "--data.val_size=2", "--data.fields.question=problem", "--data.batch_size=2",
    ], run=False)  # fmt: skip
    assert isinstance(cli.datamodule, FileProblemDataModule)
    assert len(cli.datamodule.train_problems) == 4 and len(cli.datamodule.val_problems) == 2
    assert all(
        p.question.startswith("q") and set(p.metadata) == {"answer"} for p in cli.datamodule.train_problems
    )

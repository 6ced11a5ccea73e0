"""TRL's dataset format trains as it is: a ``prompt`` column (text or chat messages) and any other
columns, from every kind of source, with no field mapping; the chat template builds the prompts."""

from __future__ import annotations

import json
import shutil
import sys
import types
from pathlib import Path

import datasets
import pytest
import yaml
from conftest import build_char_tokenizer

from agon_lightning.cli import AgonCLI, main
from agon_lightning.data.dataset import DatasetDataModule
from agon_lightning.data.files import FileProblemDataModule, ProblemFields, load_problems, read_problem_rows
from agon_lightning.deploy.cascade import as_problems
from agon_lightning.game.prompts import Prompts
from agon_lightning.game.types import Problem, messages_fault
from agon_lightning.rollout.pipeline import CascadeResult, CascadeSample

ROOT = Path(__file__).resolve().parents[1]
SYSTEM = {"role": "system", "content": "Answer in <answer> tags."}
QUESTIONS = ["What is 1+1?", "What is 2+3?", "What is 4+4?", "What is 5+7?"]
ROLES_TEMPLATE = (  # every role shown, so a test sees what reaches the model
    "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}{% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}"
)


def trl_rows(conversational: bool) -> list[dict]:
    """TRL-format rows: a prompt, the ``solution`` accuracy_reward reads, and one more column."""
    return [
        {
            "prompt": [SYSTEM, {"role": "user", "content": q}] if conversational else q,
            "solution": str(sum(int(t) for t in q[8:-1].split("+"))),
            "level": i,
        }
        for i, q in enumerate(QUESTIONS)
    ]


def expected(conversational: bool) -> list[Problem]:
    problems = []
    for row in trl_rows(conversational):
        metadata = {"solution": row["solution"], "level": row["level"]}  # every column but the prompt
        if conversational:
            problems.append(Problem.from_messages(row["prompt"], row["solution"], metadata))
        else:
            problems.append(Problem(row["prompt"], row["solution"], metadata))
    return problems


def write_source(kind: str, rows: list[dict], root: Path) -> str:
    """``rows`` written the way a user would, as one kind of local source."""
    dataset = datasets.Dataset.from_list(rows)
    if kind == "jsonl":
        dataset.to_json(root / "data.jsonl")  # datasets writes JSON lines
        return str(root / "data.jsonl")
    if kind == "json":
        (root / "data.json").write_text(json.dumps(rows))
        return str(root / "data.json")
    if kind == "parquet":
        dataset.to_parquet(root / "data.parquet")
        return str(root / "data.parquet")
    if kind == "saved":
        dataset.save_to_disk(root / "saved")
        return str(root / "saved")
    if kind == "arrow":
        dataset.save_to_disk(root / "saved")
        (arrow,) = (root / "saved").glob("*.arrow")
        return str(shutil.copy(arrow, root / "data.arrow"))
    if kind == "saved_dict":
        other = datasets.Dataset.from_list(rows[:1])
        datasets.DatasetDict({"train": dataset, "test": other}).save_to_disk(root / "saved_dict")
        return str(root / "saved_dict")
    raise AssertionError(kind)


SOURCES = ["jsonl", "json", "parquet", "arrow", "saved", "saved_dict"]


# --------------------------------------------------------------------------- every source kind
@pytest.mark.parametrize("conversational", [False, True], ids=["text", "messages"])
@pytest.mark.parametrize("kind", SOURCES)
def test_a_local_source_in_trls_format_reads_with_no_field_mapping(kind, conversational, tmp_path):
    source = write_source(kind, trl_rows(conversational), tmp_path)
    assert load_problems(source) == expected(conversational)
    dm = FileProblemDataModule(source, val_size=1)
    assert len(dm.train_problems) == 3 and dm.val_problems[0] in expected(conversational)


@pytest.mark.parametrize("conversational", [False, True], ids=["text", "messages"])
@pytest.mark.parametrize("kind", ["dataset", "dataset_dict", "iterable", "iterable_dict"])
def test_a_datasets_object_in_trls_format_trains_as_it_is(kind, conversational):
    dataset = datasets.Dataset.from_list(trl_rows(conversational))
    if kind.startswith("iterable"):
        dataset = dataset.to_iterable_dataset()
    if kind.endswith("dict"):
        held_out = dataset.take(1) if kind.startswith("iterable") else dataset.select([0])
        dict_type = datasets.IterableDatasetDict if kind.startswith("iterable") else datasets.DatasetDict
        dataset = dict_type({"train": dataset, "test": held_out})
    dm = DatasetDataModule(dataset, batch_size=2, val_batch_size=3)  # the call from_config makes
    assert dm.train_problems == expected(conversational)
    assert dm.val_problems == (expected(conversational)[:1] if kind.endswith("dict") else [])
    (batch, _) = list(dm.train_dataloader())
    assert len(batch) == 2 and all(isinstance(p, Problem) for p in batch)


def test_a_hub_dataset_in_trls_format_goes_through_the_same_rows(monkeypatch):
    rows = trl_rows(conversational=True)
    monkeypatch.setitem(
        sys.modules, "datasets", types.SimpleNamespace(load_dataset=lambda s, subset, split: rows)
    )
    assert [r.problem for r in read_problem_rows("org/trl-set")] == expected(conversational=True)


def test_held_out_rows_come_from_eval_dataset_a_split_or_val_size():
    rows = trl_rows(conversational=True)
    train, held = datasets.Dataset.from_list(rows[1:]), datasets.Dataset.from_list(rows[:1])
    assert DatasetDataModule(train, eval_dataset=held).val_problems == expected(True)[:1]
    both = datasets.DatasetDict({"train": train, "validation": held, "test": train})
    assert DatasetDataModule(both).val_problems == expected(True)[:1]  # validation before test
    assert DatasetDataModule(train, eval_dataset=both).val_problems == expected(True)[:1]
    split_off = DatasetDataModule(train, val_size=1, split_seed=3)
    assert len(split_off.train_problems) == 2 and split_off.val_problems[0] in expected(True)[1:]
    with pytest.raises(
        ValueError, match=r"give val_size \(1\) or held-out rows \(train_dataset's 'validation'"
    ):
        DatasetDataModule(both, val_size=1)
    with pytest.raises(ValueError, match=r"give val_size \(1\) or held-out rows \(eval_dataset\)"):
        DatasetDataModule(train, eval_dataset=held, val_size=1)
    with pytest.raises(
        ValueError, match=r"train_dataset has no 'training' split \(its splits: \['test', 'train', "
    ):
        DatasetDataModule(both, split="training")
    with pytest.raises(
        ValueError, match=r"eval_dataset has no 'validation' or 'test' split \(its splits: \['train'\]"
    ):
        DatasetDataModule(train, eval_dataset=datasets.DatasetDict({"train": held})).setup()


def test_a_streamed_dataset_longer_than_max_rows_is_an_error_not_a_cut():
    stream = datasets.Dataset.from_list(trl_rows(False)).to_iterable_dataset()
    assert len(DatasetDataModule(stream, max_rows=4).train_problems) == 4
    with pytest.raises(
        ValueError, match=r"train_dataset is an IterableDataset of more than max_rows=3 rows.*take\(n\)"
    ):
        DatasetDataModule(stream, max_rows=3).setup()


def test_what_is_not_a_datasets_object_is_named():
    with pytest.raises(
        TypeError, match=r"train_dataset must be a datasets.Dataset, .* got list; .*from_list"
    ):
        DatasetDataModule(trl_rows(False))


# --------------------------------------------------------------------------- which column is what
def test_the_automatic_columns_and_the_explicit_ones():
    auto = ProblemFields()
    both = {"prompt": "p", "question": "q", "answer": "a", "solution": "s"}
    assert (auto.question_column(both), auto.answer_column(both)) == ("prompt", "answer")
    assert (
        auto.question_column({"question": "q", "solution": "s"}),
        auto.answer_column({"solution": "s"}),
    ) == (
        "question",
        "solution",
    )
    assert auto.answer_column({"prompt": "p"}) is None
    assert ProblemFields(answer="").answer_column(both) is None  # "": no gold answer, whatever the row has
    assert ProblemFields(question="question", answer="solution").question_column(both) == "question"
    problem = load_problems_from([both])[0]
    assert (problem.question, problem.answer) == ("p", "a")
    assert problem.metadata == {"question": "q", "answer": "a", "solution": "s"}  # all but the prompt
    with pytest.raises(ValueError, match=r"fields.question must name a column, or be null"):
        ProblemFields(question="")


def load_problems_from(rows: list[dict], fields: ProblemFields | None = None) -> list[Problem]:
    dm = DatasetDataModule(datasets.Dataset.from_list(rows), fields=fields or ProblemFields())
    return dm.train_problems


def test_bad_rows_are_named_with_what_is_wrong(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(
        "\n".join(
            json.dumps(row)
            for row in [
                {"prompt": [SYSTEM, {"role": "user", "content": "ok"}]},
                {"prompt": ["just a string"]},
                {"prompt": [{"role": "user"}]},
                {"prompt": [SYSTEM]},
                {"prompt": []},
                {"prompt": 3},
                {"prompt": [{"role": "user", "content": " "}]},
                {"text": "no prompt"},
                {"prompt": [{"role": "user", "content": ["a", "part"]}]},
            ]
        )
        + "\n"
    )
    errors = [r.error for r in read_problem_rows(str(path)) if r.error]
    accepted = 'expected a list of chat messages, each {"role": str, "content": str}'
    assert errors == [
        f"{path}:2: field 'prompt': not a conversational prompt: message 0 is a str; {accepted}",
        f"{path}:3: field 'prompt': not a conversational prompt: message 0 is a dict with keys ['role']; {accepted}",
        f"{path}:4: field 'prompt': not a conversational prompt: no user message (roles: ['system'])",
        f"{path}:5: field 'prompt': not a conversational prompt: {accepted}, got an empty list",
        f"{path}:6: field 'prompt' must be a string or a list of chat messages, got int",
        f"{path}:7: empty question in the last user message of field 'prompt'",
        f"{path}:8: no 'prompt' or 'question' column (the row has ['text']); set the question field "
        "(fields.question) to the column holding the prompt",
        f"{path}:9: field 'prompt': not a conversational prompt: message 0's content is a list; {accepted}",
    ]
    with pytest.raises(
        ValueError, match=r"rows of train_dataset are bad:\n  train_dataset row 1: no 'prompt' or"
    ):
        load_problems_from([{"text": "no prompt", "id": 1}])


def test_a_problems_messages_and_question_agree():
    messages = [SYSTEM, {"role": "user", "content": "first"}, {"role": "assistant", "content": "hm"},
                {"role": "user", "content": "second"}]  # fmt: skip
    assert Problem.from_messages(messages).question == "second"
    with pytest.raises(ValueError, match=r"question must be the content of the last user message .*'second'"):
        Problem("first", messages=messages)
    assert messages_fault(messages) is None and "no user message" in messages_fault([SYSTEM])


# --------------------------------------------------------------------------- the prompts
def roles_tokenizer():
    tok = build_char_tokenizer()
    tok.chat_template = ROLES_TEMPLATE
    return tok


def test_a_conversational_prompt_goes_through_the_chat_template_for_both_roles():
    tok = build_char_tokenizer()  # the test models' template (user turns only)
    problem = expected(conversational=True)[0]
    prompts = Prompts(challenge="{question}\nRival: {summary}")
    assert prompts.draft_prompt(tok, problem) == "<|user|>What is 1+1?<|assistant|>"
    assert prompts.challenge_prompt(tok, problem, "3") == "<|user|>What is 1+1?\nRival: 3<|assistant|>"
    tok = roles_tokenizer()
    system = "<system>Answer in <answer> tags."
    assert prompts.draft_prompt(tok, problem) == f"{system}<user>What is 1+1?<assistant>"
    assert prompts.challenge_prompt(tok, problem, "3") == f"{system}<user>What is 1+1?\nRival: 3<assistant>"
    assert (
        Prompts(draft="Q: {question}").draft_prompt(tok, problem)
        == f"{system}<user>Q: What is 1+1?<assistant>"
    )
    # Prompts.system only where the dataset's messages have none
    assert Prompts(system="Think.").draft_prompt(tok, problem) == f"{system}<user>What is 1+1?<assistant>"
    plain = Problem.from_messages([{"role": "user", "content": "Hi?"}])
    assert Prompts(system="Think.").draft_prompt(tok, plain) == "<system>Think.<user>Hi?<assistant>"
    assert Prompts(system="Think.").draft_prompt(tok, Problem("Hi?")) == "<system>Think.<user>Hi?<assistant>"


def test_earlier_turns_stay_and_a_final_assistant_message_is_continued():
    tok = roles_tokenizer()
    turns = [
        {"role": "user", "content": "a?"},
        {"role": "assistant", "content": "b"},
        {"role": "user", "content": "c?"},
    ]
    assert Prompts(draft="[{question}]").draft_prompt(tok, Problem.from_messages(turns)) == (
        "<user>a?<assistant>b<user>[c?]<assistant>"
    )
    prefill = Problem.from_messages(
        [{"role": "user", "content": "c?"}, {"role": "assistant", "content": "<think>"}]
    )
    assert Prompts().draft_prompt(tok, prefill) == "<user>c?<assistant><think>"


def test_without_a_chat_template_only_a_lone_user_message_renders():
    tok = build_char_tokenizer()
    lone = Problem.from_messages([{"role": "user", "content": "Hi?"}])
    assert Prompts(chat_template=False).draft_prompt(tok, lone) == "Hi?"
    with pytest.raises(ValueError, match=r"conversational prompt of 2 messages .* needs a chat template, and "
                                         r"prompts.chat_template is false"):  # fmt: skip
        Prompts(chat_template=False).draft_prompt(tok, expected(conversational=True)[0])
    tok.chat_template = None
    with pytest.raises(ValueError, match="the tokenizer has none"):
        Prompts().challenge_prompt(tok, expected(conversational=True)[0], "3")


def test_string_prompts_are_unchanged():
    tok = roles_tokenizer()
    problem = expected(conversational=False)[0]
    assert Prompts().draft_prompt(tok, problem) == "<user>What is 1+1?<assistant>"
    assert Prompts(chat_template=False).challenge_prompt(tok, problem, "3").startswith("What is 1+1?\n\n")


# --------------------------------------------------------------------------- the CLI and deployment
def printed_data(*args: str, capsys) -> dict:
    with pytest.raises(SystemExit) as stop:
        AgonCLI(args=["fit", "--config", str(ROOT / "configs/agon.yaml"), *args, "--print_config"])
    out = capsys.readouterr()
    assert stop.value.code in (0, None), out.err[-2000:]
    return yaml.safe_load(out.out)["data"]


@pytest.mark.parametrize("name", ["files", "FileProblemDataModule"])
def test_a_data_module_is_selected_by_its_short_name(name, tmp_path, capsys):
    source = write_source("jsonl", trl_rows(True), tmp_path)
    data = printed_data(f"--data={name}", f"--data.train_source={source}", capsys=capsys)
    assert data["class_path"].endswith(".FileProblemDataModule")
    assert data["init_args"]["train_source"] == source and data["init_args"]["fields"]["question"] is None


def test_an_unknown_data_module_lists_the_registered_ones(capsys):
    with pytest.raises(SystemExit):
        main(["fit", "--config", str(ROOT / "configs/agon.yaml"), "--data=Nope"])
    err = capsys.readouterr().err
    assert "unknown data 'Nope' for --data; available: CodeContestsDataModule, DeepMathDataModule, " in err
    assert "(or by entry-point name: codecontests, deepmath, files, reasoning_gym;" in err


def test_the_cli_reads_a_conversational_dataset_for_the_models_chat_template(tmp_path, tiny_model_dir):
    from transformers import AutoTokenizer

    source = write_source("parquet", trl_rows(True), tmp_path)
    cli = AgonCLI(args=[
        "--config", str(ROOT / "configs/agon.yaml"), f"--model.model_name_or_path={tiny_model_dir}",
        "--data=files", f"--data.train_source={source}", "--data.val_size=1", "--data.batch_size=2",
        "--model.verifier=exact_match",
    ], run=False)  # fmt: skip
    problem = cli.datamodule.train_problems[0]
    assert problem.messages is not None and set(problem.metadata) == {"solution", "level"}
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)  # the saved model's own template
    assert cli.model.prompts.draft_prompt(tokenizer, problem) == f"<|user|>{problem.question}<|assistant|>"


@pytest.mark.slow
def test_agon_fit_trains_a_trl_dataset_with_no_field_mapping(tmp_path, caplog):
    """The shipped tiny model (its chat template shows every role) on conversational rows, 1 step."""
    source = write_source("jsonl", trl_rows(True), tmp_path)
    root = tmp_path / "run"
    main([
        "fit", "--config", str(ROOT / "configs/agon.yaml"), "--data=files", f"--data.train_source={source}",
        "--data.val_size=2", "--data.batch_size=2", "--data.val_batch_size=2", "--model.verifier=exact_match",
        "--model.grpo.num_generations=2", "--model.rollout.init_args.max_new_tokens=4",
        "--trainer.limit_train_batches=1", f"--trainer.default_root_dir={root}",
    ])  # fmt: skip
    said = "data.jsonl:1: question from 'prompt' (chat messages), gold answer from 'solution'; every other"
    assert said in caplog.text and "FileProblemDataModule: 2 training and 2 held-out problems" in caplog.text
    (outcomes,) = root.rglob("outcomes.jsonl")
    questions = {json.loads(line)["question"] for line in outcomes.read_text().splitlines()}
    assert len(questions) == 2 and questions <= set(QUESTIONS)


def test_deployment_takes_and_reports_conversational_problems():
    row = trl_rows(conversational=True)[1]
    (problem,) = as_problems([row])
    assert problem == expected(conversational=True)[1]
    sample = CascadeSample("d", "s", "f", "5", 1, 1, False, False)
    record = CascadeResult(problem, "alpha", "beta", [sample]).to_dict()
    assert record["question"] == "What is 2+3?" and record["messages"] == row["prompt"]
    assert "messages" not in CascadeResult(Problem("q"), "alpha", "beta", [sample]).to_dict()


def test_a_missing_local_path_never_reaches_the_hub(tmp_path, monkeypatch):
    def no_hub(*args, **kwargs):
        raise AssertionError(f"went to the Hub with {args}")

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=no_hub))
    for source in [
        "./nope",
        "~/nope-agon-xyz",
        str(tmp_path / "nope"),
        "a/nope/c",
        "nope.arrow",
        "org/nope.parquet",
    ]:
        with pytest.raises(FileNotFoundError, match="nope"):
            read_problem_rows(source)
    (tmp_path / "empty").mkdir()
    with pytest.raises(
        FileNotFoundError, match=r"holds no .* files, nor is it a datasets save_to_disk folder"
    ):
        read_problem_rows(str(tmp_path / "empty"))

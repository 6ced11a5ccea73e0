"""Inputs are checked at the door: data a run cannot train on as given is refused in one line (exit 2)
naming the file and the fix, before the model loads; prompts that leave no room for the completion
in the model's context are dropped with a count in the log (or refused), never sampled.

Each case goes through the user's path, ``agon fit`` on ``configs/agon.yaml`` with a JSON-lines
file (``--data=files``) and the tiny test model (512-token context), where that is cheap: every
refusal comes before the model loads, and one run trains a step on what is left after dropping.
The rest are unit checks of the same code.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
import torch
from conftest import build_char_tokenizer, build_tiny_model

from agon_lightning.cli import main
from agon_lightning.cli.origins import data_origins
from agon_lightning.data.deepmath import DeepMathDataModule
from agon_lightning.data.files import FileProblemDataModule
from agon_lightning.infra.errors import UsageError
from agon_lightning.rollout import decode_loop as decode
from agon_lightning.rollout.hf import HFRollout

ROOT = Path(__file__).resolve().parents[2]
CONFIG = str(ROOT / "configs" / "agon.yaml")


def write_rows(path: Path, questions: list[str]) -> Path:
    path.write_text(
        "".join(json.dumps({"prompt": q, "answer": str(i)}) + "\n" for i, q in enumerate(questions))
    )
    return path


def fit_args(model_dir: Path, data: Path, root: Path, *extra: str) -> list[str]:
    return [
        "fit", "--config", CONFIG, f"--model.model_name_or_path={model_dir}", "--model.verifier=ExactMatchVerifier",
        "--data=files", f"--data.train_source={data}", f"--trainer.default_root_dir={root}", "--threads=1", *extra,
    ]  # fmt: skip


def refused(args: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """The one line ``agon fit ARGS`` printed, having exited with status 2 and no traceback."""
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err, err[-3000:]
    lines = [line for line in err.splitlines() if line.startswith("agon fit: error: ")]
    assert len(lines) == 1, err[-3000:]
    return lines[0]


@pytest.fixture
def loaded(monkeypatch):
    """Fails the test if the base model's weights are loaded: every refusal here comes before that."""
    import transformers

    def no_weights(*args, **kwargs):
        raise AssertionError("the model's weights were loaded before the data was checked")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", no_weights)


# ---------------------------------------------------------------------- empty, too small, unreadable
def test_an_empty_file_is_refused_naming_it(tiny_model_dir, tmp_path, capsys, loaded):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    line = refused(fit_args(tiny_model_dir, empty, tmp_path, "--data.val_size=0"), capsys)
    assert f"data.train_source '{empty}' holds no rows" in line


def test_too_few_rows_for_one_batch_are_refused_naming_rows_val_size_and_batch_size(
    tiny_model_dir, tmp_path, capsys, loaded
):
    data = write_rows(tmp_path / "rows.jsonl", [f"What is {i} + 1?" for i in range(36)])
    line = refused(
        fit_args(tiny_model_dir, data, tmp_path, "--data.val_size=0", "--data.batch_size=64"), capsys
    )
    assert (
        "36 training problems are left after data.val_size=0 (given on the command line) held out 0" in line
    )
    assert "fewer than one batch of data.batch_size=64 (given on the command line)" in line
    assert "set --data.batch_size to at most 36" in line


def test_one_row_without_a_held_out_set_is_refused_too(tmp_path):
    data = write_rows(tmp_path / "one.jsonl", ["What is 1 + 1?"])
    with pytest.raises(
        UsageError, match=r"1 training problem is left after data.val_size=0 \(the default of "
    ):
        FileProblemDataModule(str(data), batch_size=4).setup("fit")


def test_bytes_that_are_not_utf8_are_named_by_file_and_line(tiny_model_dir, tmp_path, capsys, loaded):
    data = write_rows(tmp_path / "latin1.jsonl", [f"What is {i} + 1?" for i in range(8)])
    data.write_bytes(data.read_bytes() + '{"prompt": "Combien fait 2 + 2, café?"}\n'.encode("latin-1"))
    line = refused(
        fit_args(tiny_model_dir, data, tmp_path, "--data.val_size=0", "--data.batch_size=2"), capsys
    )
    assert f"{data}:9: not UTF-8 text (byte 0xe9 at column " in line and "save the file as UTF-8" in line


def test_conversational_rows_without_a_chat_template_are_refused_in_one_line(
    tiny_model_dir, tmp_path, capsys, loaded
):
    data = tmp_path / "chat.jsonl"
    row = {"prompt": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "1 + 1?"}]}
    data.write_text("".join(json.dumps({**row, "answer": "2"}) + "\n" for _ in range(4)))
    args = fit_args(tiny_model_dir, data, tmp_path, "--data.val_size=0", "--data.batch_size=2")
    line = refused([*args, "--model.prompts.chat_template=false"], capsys)
    assert "a conversational prompt of 2 messages (roles ['system', 'user']) needs a chat template" in line
    assert "prompts.chat_template is false" in line


# ---------------------------------------------------------------------- val_size: the option and its origin
def test_a_val_size_the_user_never_wrote_names_the_config_and_class_it_came_from(
    tiny_model_dir, tmp_path, capsys, loaded
):
    data = write_rows(tmp_path / "rows.jsonl", [f"What is {i} + 1?" for i in range(64)])
    line = refused(fit_args(tiny_model_dir, data, tmp_path), capsys)
    assert (
        f"data.val_size=200 (set in {CONFIG} for ReasoningGymDataModule, kept when --data chose "
        f"FileProblemDataModule) leaves no problem to train on: data.train_source '{data}' holds 64; "
        "set --data.val_size to at most 63 (0: no validation)"
    ) in line


def test_a_default_val_size_names_its_class(tmp_path):
    rows = [{"question": f"q{i}", "final_answer": str(i), "difficulty": 8.0, "topic": "t"} for i in range(5)]
    source = tmp_path / "deepmath.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(
        UsageError, match=r"data.val_size=300 \(the default of DeepMathDataModule\) would hold out"
    ):
        DeepMathDataModule(str(source)).setup()


def test_origins_follow_the_arguments_in_order_and_say_nothing_they_cannot_vouch_for(tmp_path):
    overlay = tmp_path / "overlay.yaml"
    overlay.write_text("data:\n  init_args:\n    val_size: 7\n")
    files = "agon_lightning.data.files.FileProblemDataModule"
    argv = ["fit", "--config", CONFIG, "--data.val_size=3", "--config", str(overlay), "--data", files]
    assert data_origins(argv, files, {"val_size": 7, "batch_size": 16}) == {
        "val_size": f"set in {overlay} for ReasoningGymDataModule, kept when --data chose FileProblemDataModule",
        "batch_size": f"set in {CONFIG} for ReasoningGymDataModule, kept when --data chose FileProblemDataModule",
    }
    # a value other than the one the reading found (set some way it does not follow): no origin
    assert "val_size" not in data_origins(argv, files, {"val_size": 9})


# ---------------------------------------------------------------------- prompts longer than the context
def test_prompts_leaving_no_room_are_dropped_with_a_count_and_the_run_trains_on_the_rest(
    tiny_model_dir, tmp_path
):
    # The test model's context is 512 tokens (one per character); max_new_tokens 8 leaves 504 for a
    # prompt, chat template included. Two training rows too long, one of them 200k tokens, one held out.
    questions = [f"What is {i} + 1?" for i in range(18)]
    questions[3], questions[11], questions[17] = "x" * 603, "y" * 200_000, "z" * 603
    data = write_rows(tmp_path / "rows.jsonl", questions)
    args = fit_args(
        tiny_model_dir, data, tmp_path, "--data.val_size=2", "--data.split_seed=3", "--data.batch_size=2",
        "--data.val_batch_size=2", "--model.rollout.init_args.max_new_tokens=8", "--model.grpo.num_generations=2",
        "--trainer.max_steps=1", "--trainer.limit_val_batches=1",
    )  # fmt: skip
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        main(args)
    dropped = [str(w.message) for w in caught if str(w.message).startswith("dropped ")]
    train = FileProblemDataModule(str(data), val_size=2, split_seed=3)
    held_out_long = sum(len(p.question) > 500 for p in train.val_problems)
    expected = [f"dropped {3 - held_out_long} of 16 training problems of FileProblemDataModule '{data}'"]
    if held_out_long:
        expected.append(f"dropped {held_out_long} of 2 held-out problems of FileProblemDataModule '{data}'")
    assert [m.split(", each with")[0] for m in dropped] == expected, dropped
    assert "a prompt longer than 504 tokens (longest " in dropped[0]
    assert (
        "the model's 512-token context (max_position_embeddings) less model.rollout.max_new_tokens=8"
        in dropped[0]
    )
    assert json.loads(next(tmp_path.rglob("checkpoints/last/agon.json")).read_text())["step"] == 1


@pytest.mark.parametrize(
    "questions, option, expected",
    [
        (["x" * 603] + ["What is 1 + 1?"] * 7, "--data.too_long=error", "1 of 8 training problems of "),
        (["x" * 603] * 8, "--data.too_long=drop", "8 of 8 training problems of "),
    ],
    ids=["too_long=error", "all-too-long"],
)
def test_too_long_prompts_are_refused_by_the_option_or_when_none_would_be_left(
    questions, option, expected, tiny_model_dir, tmp_path, capsys, loaded
):
    data = write_rows(tmp_path / "rows.jsonl", questions)
    args = fit_args(
        tiny_model_dir, data, tmp_path, "--data.val_size=0", "--data.batch_size=1", option,
        "--model.rollout.init_args.max_new_tokens=8",
    )  # fmt: skip
    line = refused(args, capsys)
    assert expected in line and "have a prompt longer than 504 tokens (longest 605)" in line
    assert "lower model.rollout.max_new_tokens" in line


def test_the_decode_loop_refuses_a_prompt_longer_than_the_context_before_allocating(monkeypatch):
    model = build_tiny_model(build_char_tokenizer())  # max_position_embeddings=512
    w = decode.weights(model, None)
    assert w.context == 512
    monkeypatch.setattr(decode, "_Cache", lambda *a, **k: pytest.fail("the cache was allocated"))
    ids = torch.ones(2, 600, dtype=torch.long)
    attn = torch.ones(2, 600, dtype=torch.long)
    attn[1, :300] = 0  # left padding: the second prompt has 300 tokens
    with pytest.raises(UsageError, match=r"a prompt to sample has 600 tokens, more than the model's context of 512 "
                                         r"\(max_position_embeddings; 1 of the batch's 2 rows are over it\)"):  # fmt: skip
        decode.decode(w, ids, attn, 4, [1], 0, decode.Sampling(greedy=True))


def test_generate_refuses_a_prompt_longer_than_the_context_before_either_path_samples(monkeypatch):
    tokenizer = build_char_tokenizer()
    model = build_tiny_model(tokenizer)  # max_position_embeddings=512
    rollout = HFRollout(max_new_tokens=4, fused_decode=False)  # the generate() path, not the decode loop
    monkeypatch.setattr(model, "generate", lambda *a, **k: pytest.fail("generate ran on a too-long prompt"))
    with pytest.raises(
        UsageError, match="a prompt to sample has 600 tokens, more than the model's context of 512"
    ):
        rollout.generate(model, tokenizer, ["x" * 600])

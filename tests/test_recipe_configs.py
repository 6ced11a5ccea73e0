"""The paper's recipe configs: parsed as a user would run them, every setting the paper gives checked."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from agon_lightning.cli import AgonCLI

ROOT = Path(__file__).resolve().parents[1]
MATH = ROOT / "configs" / "deepmath_qwen3_0.6b.yaml"
MATH_1_7B = ROOT / "configs" / "deepmath_qwen3_1.7b.yaml"
CODE = ROOT / "configs" / "codecontests_qwen3.yaml"


def parsed(*configs: Path, capsys) -> dict:
    """The whole config ``agon fit --config ...`` would run, as ``--print_config`` shows it."""
    with pytest.raises(SystemExit) as exit_info:
        AgonCLI(args=["fit", *[f"--config={c}" for c in configs], "--print_config"])
    out = capsys.readouterr()
    assert exit_info.value.code in (0, None), out.err[-2000:]
    return yaml.safe_load(out.out)


def check_the_papers_training_settings(config: dict) -> None:
    model = config["model"]
    rollout = model["rollout"]
    assert rollout["class_path"] == "agon_lightning.rollout.vllm.VLLMRollout"
    assert (rollout["init_args"]["temperature"], rollout["init_args"]["top_p"]) == (0.6, 0.95)
    assert model["grpo"]["num_generations"] == 8 and model["lora"]["r"] == 16
    assert model["optimizer"]["init_args"]["lr"] == 5e-5
    schedule = model["lr_scheduler"]
    assert schedule["class_path"] == "agon_lightning.training.lr_schedule.WarmupLinearDecay"
    assert schedule["init_args"]["warmup_fraction"] == 0.1 and schedule["init_args"]["final_fraction"] == 0.0
    # The decay ends with the run: both count optimizer steps.
    assert schedule["init_args"]["total_steps"] == config["trainer"]["max_steps"]


def test_the_math_recipe_is_the_papers(capsys):
    config = parsed(MATH, capsys=capsys)
    check_the_papers_training_settings(config)
    assert config["model"]["model_name_or_path"] == "Qwen/Qwen3-0.6B"
    assert config["model"]["verifier"]["init_args"]["answer"] == "tag"
    for prompt in (config["model"]["prompts"]["draft"], config["model"]["prompts"]["challenge"]):
        assert "<answer></answer>" in prompt and "boxed" not in prompt
    data = config["data"]["init_args"]
    assert (data["min_difficulty"], data["drop_binary"], data["val_size"], data["train_size"]) == (
        8.0,
        True,
        300,
        3000,
    )


def test_the_1_7b_overlay_changes_the_model_and_nothing_of_the_recipe(capsys):
    small, large = parsed(MATH, capsys=capsys), parsed(MATH, MATH_1_7B, capsys=capsys)
    assert large["model"]["model_name_or_path"] == "Qwen/Qwen3-1.7B"
    assert large["model"]["grpo"]["micro_batch_size"] == 2  # memory only: the same update
    for config in (small, large):
        config["model"].pop("model_name_or_path")
        config["model"]["grpo"].pop("micro_batch_size")
        config["trainer"].pop("default_root_dir")
        config.pop("config", None)  # the list of files given
    assert large == small


def test_the_code_recipe_is_the_papers_on_the_easy_subset(capsys):
    config = parsed(CODE, capsys=capsys)
    check_the_papers_training_settings(config)
    assert config["model"]["model_name_or_path"] == "Qwen/Qwen3-1.7B"
    data = config["data"]["init_args"]
    assert data["val_path"] is None and data["val_size"] == 300
    assert (data["sources"], data["max_rating"]) == (["codeforces"], 1200)

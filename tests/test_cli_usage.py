"""The ``agon`` command as a new user meets it: every input mistake is one line that names the
option and what is accepted (exit 2), the help lists every command, configs come with the
package.

Most tests run the installed ``agon`` entry point as a subprocess, with no network: Hub
failures are produced with ``HF_HUB_OFFLINE`` and an endpoint on a closed local port.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agon_lightning.cli import COMMANDS, main

ROOT = Path(__file__).resolve().parents[1]
AGON = str(Path(sys.executable).with_name("agon"))
CONFIG = str(ROOT / "configs" / "agon.yaml")


def agon(
    *args: str, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if k != "AGON_VERBOSE"}
    environment |= {"HF_HUB_OFFLINE": "1", **(env or {})}  # no test reaches the network
    return subprocess.run(
        [AGON, *args], capture_output=True, text=True, env=environment, cwd=cwd, timeout=300
    )


def usage_error(result: subprocess.CompletedProcess, *needles: str) -> str:
    """The one error line of a run that exited 2; fails unless it holds every needle."""
    assert result.returncode == 2, f"exit {result.returncode}\n{result.stderr[-3000:]}"
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if ": error: " in line]
    assert len(errors) == 1 and result.stderr.rstrip().endswith(errors[0]), result.stderr[-3000:]
    for needle in needles:
        assert needle in errors[0], errors[0]
    return errors[0]


# ---------------------------------------------------------------------- values out of range
@pytest.mark.parametrize(
    "override,needles",
    [
        (
            "--model.grpo.num_generations=1",
            ["--model.grpo", "grpo.num_generations (N) must be >= 2", "got 1"],
        ),
        ("--model.lora.r=0", ["--model.lora", "lora.r must be >= 1, got 0"]),
        ("--model.reward.conversion_bonus=-1", ["--model.reward", "conversion_bonus must be >= 0, got -1.0"]),
        ("--data.init_args.batch_size=0", ["--data", "batch_size must be >= 1, got 0"]),
    ],
    ids=["num_generations", "lora_r", "conversion_bonus", "batch_size"],
)
def test_a_value_out_of_range_is_one_line_naming_option_value_and_range(override, needles):
    usage_error(agon("fit", "--config", CONFIG, override), *needles)


def test_verbose_flag_or_environment_variable_bring_the_traceback_back():
    for args, env in [(["--verbose"], None), ([], {"AGON_VERBOSE": "1"})]:
        result = agon("fit", "--config", CONFIG, "--model.lora.r=0", *args, env=env)
        assert result.returncode != 0
        assert "Traceback" in result.stderr and "lora.r must be >= 1, got 0" in result.stderr


# ---------------------------------------------------------------------- unknown components
def test_an_unknown_verifier_lists_the_registered_ones():
    usage_error(
        agon("fit", "--config", CONFIG, "--model.verifier=NopeVerifier"),
        "unknown verifier 'NopeVerifier' for --model.verifier",
        "available: CodeVerifier, ExactMatchVerifier, MathVerifier, ReasoningGymVerifier",
        "agon_lightning.verifiers",
    )


@pytest.mark.parametrize(
    "option,kind,available",
    [
        ("rollout", "rollout", "HFRollout"),
        (
            "summarizer",
            "summarizer",
            "CodeSummarizer, CountdownSummarizer, FullSummarizer, HiddenSummarizer, OtherProblemSummarizer, Qwen3Summarizer",
        ),
        ("reward", "reward", "CompetitiveReward, CorrectnessReward"),
    ],
)
def test_every_component_group_lists_its_names(option, kind, available, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--config", CONFIG, f"--model.{option}=Nope"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert f"agon fit: error: unknown {kind} 'Nope' for --model.{option}; available: {available}" in err


def test_an_unknown_class_path_in_yaml_lists_the_registered_ones(tmp_path, capsys):
    # A plugin's class in that list: test_cli.py::test_third_party_verifier_from_an_entry_point.
    overlay = tmp_path / "overlay.yaml"
    overlay.write_text("model:\n  reward:\n    class_path: NopeReward\n")
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--config", CONFIG, "--config", str(overlay)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert (
        "unknown reward 'NopeReward' for --model.reward; available: CompetitiveReward, CorrectnessReward"
        in err
    )


# ---------------------------------------------------------------------- the base model
def test_a_path_that_does_not_exist_is_never_sent_to_the_hub(tmp_path):
    missing = tmp_path / "nope"
    result = agon("fit", "--config", CONFIG, f"--model.model_name_or_path={missing}")
    usage_error(result, f"--model.model_name_or_path: no model directory {missing}")
    assert "Repo id" not in result.stderr


QWEN3_LOCAL_DATA = [
    "fit", "--config", str(ROOT / "configs" / "deepmath_qwen3_0.6b.yaml"),
    f"--data.init_args.source={ROOT / 'tests' / 'fixtures' / 'deepmath_fixture.jsonl'}",
]  # fmt: skip


def test_the_qwen3_config_offline_fails_at_once_naming_the_model(tmp_path):
    start = time.monotonic()
    result = agon(*QWEN3_LOCAL_DATA, env={"HF_HOME": str(tmp_path / "hf")})  # an empty cache
    usage_error(result, "'Qwen/Qwen3-0.6B' is not in the local Hugging Face cache", "HF_HUB_OFFLINE",
                "--model.model_name_or_path=/path/to/Qwen3-0.6B")  # fmt: skip
    assert time.monotonic() - start < 60


def test_an_unreachable_hub_is_tried_once_and_names_the_model(tmp_path):
    # Port 9 on the loopback interface: the connection is refused at once, no network involved.
    env = {"HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "0", "HF_ENDPOINT": "http://127.0.0.1:9"}
    start = time.monotonic()
    result = agon(*QWEN3_LOCAL_DATA, env=env)
    usage_error(result, "cannot reach the Hugging Face Hub for 'Qwen/Qwen3-0.6B'", "point at a local copy")
    assert time.monotonic() - start < 60, "retried instead of failing after one try"


# ---------------------------------------------------------------------- options and commands
def test_an_abbreviated_option_is_rejected_with_the_full_name():
    usage_error(
        agon("fit", "--config", CONFIG, "--model.grpo.num_generation=4"),
        "unrecognized arguments: --model.grpo.num_generation=4",
        "did you mean --model.grpo.num_generations?",
    )


def test_our_own_commands_reject_abbreviations_too(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["sweep", "--variant", "grpo", "--dry-run"])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == "agon sweep: error: unrecognized arguments: --variant grpo\n"


def test_ckpt_path_last_with_nothing_to_resume_names_the_directory(tmp_path):
    usage_error(
        agon("fit", "--config", CONFIG, f"--trainer.default_root_dir={tmp_path}", "--ckpt_path", "last"),
        f"--ckpt_path last: no last checkpoint to resume in {tmp_path / 'checkpoints'}",
    )


def test_help_lists_every_command_and_version_works():
    result = agon("--help")
    assert result.returncode == 0 and result.stderr == ""
    for command in ("fit", "validate", "test", "predict", "sft", "sweep", "export", "config"):
        (line,) = [ln for ln in result.stdout.splitlines() if ln.startswith(f"  {command} ")]
        assert line.split(None, 1)[1] == COMMANDS[command][1]
    version = agon("--version")
    assert version.returncode == 0 and version.stdout.strip().startswith("agon 0.")


def test_sft_help_is_clean_and_leads_with_the_main_options():
    result = agon("sft", "--help")
    assert result.returncode == 0 and "Warning" not in result.stderr and "warn" not in result.stderr.lower()
    lines = result.stdout.splitlines()
    assert lines[0].startswith("usage: agon sft [-h] [-c CONFIG ...]")
    first = {prefix: next(i for i, ln in enumerate(lines) if ln.lstrip().startswith(prefix))
             for prefix in ("-c CONFIG", "--threads", "--model.model_name_or_path", "--data.", "--trainer.")}  # fmt: skip
    assert first["-c CONFIG"] < first["--model.model_name_or_path"] < first["--data."] < first["--trainer."]
    assert first["--threads"] < first["--model.model_name_or_path"]


def test_fit_without_a_config_says_where_configs_are():
    usage_error(agon("fit"), "agon fit --config configs/agon.yaml", "agon fit --config agon:agon.yaml")


def test_an_unknown_command_is_one_line():
    usage_error(agon("fitt"), "unknown command 'fitt'; commands: fit, validate")


# ---------------------------------------------------------------------- shipped configs
def test_shipped_configs_by_name_without_the_repository(tmp_path):
    listed = agon("config", cwd=tmp_path)
    assert listed.returncode == 0 and "agon:agon.yaml" in listed.stdout.split()
    assert "agon:experiments/grpo.yaml" in listed.stdout.split()
    printed = agon("config", "agon.yaml", cwd=tmp_path)
    assert printed.returncode == 0 and printed.stdout == (ROOT / "configs" / "agon.yaml").read_text()
    parsed = agon("fit", "--config", "agon:agon.yaml", "--config=agon:experiments/grpo", "--print_config",
                  cwd=tmp_path)  # fmt: skip
    assert parsed.returncode == 0, parsed.stderr[-2000:]
    assert "game: grpo" in parsed.stdout
    usage_error(agon("fit", "--config", "agon:agn.yaml", cwd=tmp_path), "did you mean agon:agon.yaml?")


@pytest.mark.parametrize("page", ["README.md", "docs/get-started.md"])
def test_the_readme_and_the_docs_show_the_help_list(page):
    text = (ROOT / page).read_text()
    width = max(map(len, COMMANDS))
    for name, (_, line) in COMMANDS.items():
        assert f"\n  {name:<{width}}  {line}\n" in text, name

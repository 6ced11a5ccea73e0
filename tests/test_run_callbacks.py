"""Every shipped config that trains gets what a run needs, from one source (callbacks/defaults.py).

The standard set — the checkpoint bundle (saved on a signal, resumable), progress lines, the
validation report with ``outcomes.jsonl``, trace-length and divergence monitoring, sample games
and the closing list of outputs — is added by ``agon fit`` to whatever a config lists, so no
config can drop one by accident; a config's own instance of a class replaces the standard one.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import lightning as L
import pytest
from lightning.pytorch.cli import LightningCLI

from agon_lightning.callbacks import (
    STANDARD,
    AgonCheckpoint,
    DivergenceMonitor,
    ProgressLog,
    RunOutputs,
    TraceLengthMonitor,
    ValidationReport,
    standard_callbacks,
)
from agon_lightning.callbacks.summary import AdapterSummary
from agon_lightning.cli import AgonCLI
from agon_lightning.cli.config_files import shipped_configs
from agon_lightning.infra.errors import UsageError

ROOT = Path(__file__).resolve().parents[1]
# The configs `agon fit` starts from (overlays such as experiments/ and strategy/ add to one of these).
TRAINING = ["agon.yaml", "countdown.yaml", "deepmath_qwen3_0.6b.yaml", "codecontests_qwen3.yaml"]
SFT = ["sft_tiny.yaml", "sft_countdown.yaml"]  # `agon sft`'s
# What a run needs, named here rather than read from STANDARD, so that a class dropped from the
# standard set fails here too.
REQUIRED = (
    AgonCheckpoint,  # the bundle, save on a signal, --ckpt_path last
    ProgressLog,  # progress lines where stdout is a log
    ValidationReport,  # report.md, validation.png, outcomes.jsonl
    TraceLengthMonitor,
    DivergenceMonitor,
    RunOutputs,  # the last lines: where it all went
)


def trainer_of(*args: str) -> L.Trainer:
    """The trainer ``agon fit ARGS`` builds, on CPU, without loading any weights."""
    cli = AgonCLI(
        args=[
            *args,
            "--trainer.accelerator=cpu",
            "--model.rollout=HFRollout",
            "--trainer.logger=false",
            "--model.model_name_or_path=agon:tiny-qwen3",
        ],
        run=False,
    )
    return cli.trainer


def test_the_configs_held_here_are_every_shipped_config_that_trains_with_agon_fit():
    import yaml

    top = [n for n in shipped_configs() if "/" not in n]
    trains = {n for n in top if "data" in (yaml.safe_load((ROOT / "configs" / n).read_text()) or {})}
    assert {n for n in trains if not n.startswith("sft_")} == set(TRAINING), trains
    assert {n for n in trains if n.startswith("sft_")} == set(SFT), trains


@pytest.mark.parametrize("config", [*TRAINING, "deepmath_qwen3_0.6b.yaml+deepmath_qwen3_1.7b.yaml"])
def test_every_training_config_carries_each_standard_callback_once(config):
    args = [a for name in config.split("+") for a in ("--config", str(ROOT / "configs" / name))]
    trainer = trainer_of(*args)
    counts = Counter(type(cb) for cb in trainer.callbacks)
    for cls in {*REQUIRED, *STANDARD}:
        assert sum(n for t, n in counts.items() if issubclass(t, cls)) == 1, (config, cls.__name__, counts)
    (checkpoint,) = [cb for cb in trainer.callbacks if isinstance(cb, AgonCheckpoint)]
    # what --ckpt_path last and a signal need
    assert checkpoint.save_last and checkpoint.save_on_interrupt, config
    (progress,) = [cb for cb in trainer.callbacks if isinstance(cb, ProgressLog)]
    assert progress.when != "never", config


def test_a_config_setting_replaces_the_standard_instance_and_skip_leaves_one_out():
    trainer = trainer_of(
        "--config", str(ROOT / "configs" / "deepmath_qwen3_0.6b.yaml"), "--skip_callbacks=[DivergenceMonitor]"
    )
    checkpoints = [cb for cb in trainer.callbacks if isinstance(cb, AgonCheckpoint)]
    assert len(checkpoints) == 1 and checkpoints[0].every_n_train_steps == 25  # the config's cadence, not 10
    assert not any(isinstance(cb, DivergenceMonitor) for cb in trainer.callbacks)


def test_skipping_an_unknown_callback_names_the_standard_ones():
    with pytest.raises(UsageError, match="not standard callbacks.*ProgressLog"):
        trainer_of("--config", str(ROOT / "configs" / "agon.yaml"), "--skip_callbacks=[Divergence]")


def test_checkpointing_off_drops_the_checkpoint_a_config_lists_too():
    # deepmath lists its own AgonCheckpoint; Lightning would refuse it beside enable_checkpointing=false
    trainer = trainer_of(
        "--config", str(ROOT / "configs" / "deepmath_qwen3_0.6b.yaml"), "--trainer.enable_checkpointing=false"
    )
    assert not any(isinstance(cb, AgonCheckpoint) for cb in trainer.callbacks)
    assert any(isinstance(cb, DivergenceMonitor) and cb.every_n_steps == 25 for cb in trainer.callbacks)


def test_a_plain_lightning_trainer_gets_the_same_set_from_python():
    names = [type(cb).__name__ for cb in standard_callbacks()]
    assert names == [cls.__name__ for cls in STANDARD]
    mine = DivergenceMonitor(every_n_steps=50)
    assert [cb for cb in standard_callbacks([mine]) if isinstance(cb, DivergenceMonitor)] == []


def sft_cli(config: str, *args: str) -> LightningCLI:
    """``agon sft --config configs/CONFIG ARGS`` parsed and its trainer built, nothing loaded."""
    from agon_lightning.cli.sft import SFTCLI
    from agon_lightning.training.sft import SFTDataModule, SFTModule

    args = ["--config", str(ROOT / "configs" / config), "--trainer.logger=false", *args]
    return SFTCLI(SFTModule, SFTDataModule, run=False, args=args)


@pytest.mark.parametrize("config", SFT)
def test_every_sft_config_gets_a_last_checkpoint_under_its_root_and_progress_lines(config, tmp_path):
    from lightning.pytorch.callbacks import ModelCheckpoint

    cli = sft_cli(config, "--ckpt_path=last", f"--trainer.default_root_dir={tmp_path}")
    kinds = Counter(type(cb) for cb in cli.trainer.callbacks)
    for cls in (AdapterSummary, ProgressLog, ModelCheckpoint, RunOutputs):
        assert kinds[cls] == 1, (config, cls.__name__, kinds)
    (checkpoint,) = [cb for cb in cli.trainer.callbacks if isinstance(cb, ModelCheckpoint)]
    assert checkpoint.save_last and "'every_n_train_steps': 50" in checkpoint.state_key
    assert Path(checkpoint.dirpath) == tmp_path / "checkpoints"  # not the logger's versioned folder
    assert cli.config["ckpt_path"] == "last"  # what sft_main hands to fit


def test_agon_sft_skips_a_callback_by_name_and_names_its_set_for_an_unknown_one():
    trainer = sft_cli("sft_tiny.yaml", "--skip_callbacks=[ProgressLog]").trainer
    assert not any(isinstance(cb, ProgressLog) for cb in trainer.callbacks)
    assert any(isinstance(cb, RunOutputs) for cb in trainer.callbacks)
    with pytest.raises(UsageError, match="not standard callbacks.*ModelCheckpoint"):
        sft_cli("sft_tiny.yaml", "--skip_callbacks=[DivergenceMonitor]")


# ---------------------------------------------------------------------------------------- the log
AGON = str(Path(sys.executable).with_name("agon"))
TINY = [  # a run of seconds on the shipped tiny model
    "--threads=1", "--trainer.limit_train_batches=1", "--data.init_args.train_size=8", "--data.init_args.batch_size=2",
    "--data.init_args.val_size=4", "--data.init_args.hard_size=4", "--data.init_args.val_batch_size=4",
    "--model.grpo.num_generations=2", "--model.rollout.init_args.max_new_tokens=8",
]  # fmt: skip
SFT_TINY = [
    "--trainer.max_steps=2", "--trainer.val_check_interval=2", "--data.train_size=64", "--data.batch_size=4",
    "--data.val_size=4", "--model.rollout.init_args.max_new_tokens=8", "--trainer.logger.init_args.save_dir=runs/sft",
    "--trainer.default_root_dir=runs/sft", "--model.output_dir=runs/sft/model",
]  # fmt: skip
# What a dependency says that no user can act on, and the progress bar's frames in a file.
NOISE = re.compile(r"Warning|warnings\.warn|💡|FLOPs|DeepSpeed|Setting accelerator|it/s\]|━")


@pytest.mark.slow
@pytest.mark.parametrize(
    "command",
    [["fit", "--config", "agon:agon.yaml", *TINY], ["sft", "--config", "agon:sft_tiny.yaml", *SFT_TINY]],
    ids=["fit", "sft"],
)
def test_a_logged_run_has_progress_lines_no_dependency_noise_and_ends_with_its_outputs(command, tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    run = subprocess.run(  # stdout and stderr to one file, as `> log 2>&1` does
        [AGON, *command], cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        timeout=300,
    )  # fmt: skip
    log = run.stdout
    assert run.returncode == 0, log[-3000:]
    lines = log.rstrip().splitlines()
    # "never reached" is sft's own warning: raise max_steps or lower the threshold
    noise = [line for line in lines if NOISE.search(line) and "never reached" not in line]
    assert not noise, noise
    assert re.search(r"^step \d+/\d+ \| ", log, flags=re.M), log  # progress lines where no bar draws
    head = lines.index("Outputs of this run:")
    listed = [line.split("  (")[0].strip() for line in lines[head + 1 :]]
    assert listed and all((tmp_path / path).exists() for path in listed), lines[head:]  # the last lines
    assert any(path.endswith("metrics.csv") for path in listed), listed
    if command[0] == "fit":
        for name in ("checkpoints/last", "report.md", "validation.png", "outcomes.jsonl", "samples.jsonl"):
            assert any(path.endswith(name) for path in listed), (name, listed)
    else:
        assert any(path.endswith("checkpoints/last.ckpt") for path in listed), listed

"""Every shipped config that trains gets what a run needs, from one source (callbacks/defaults.py).

The standard set — the checkpoint bundle (saved on a signal, resumable), progress lines, the
validation report with ``outcomes.jsonl``, trace-length and divergence monitoring, sample games
and the closing list of outputs — is added by ``agon fit`` to whatever a config lists, so no
config can drop one by accident; a config's own instance of a class replaces the standard one.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import lightning as L
import pytest

from agon_lightning.callbacks import STANDARD, AgonCheckpoint, DivergenceMonitor, standard_callbacks
from agon_lightning.cli import AgonCLI
from agon_lightning.cli.config_files import shipped_configs
from agon_lightning.errors import UsageError

ROOT = Path(__file__).resolve().parents[1]
# The configs `agon fit` starts from (overlays such as experiments/ and strategy/ add to one of these).
TRAINING = ["agon.yaml", "countdown.yaml", "deepmath_qwen3_0.6b.yaml", "codecontests_qwen3.yaml"]


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

    top = [n for n in shipped_configs() if "/" not in n and not n.startswith("sft_")]
    trains = {n for n in top if "data" in (yaml.safe_load((ROOT / "configs" / n).read_text()) or {})}
    assert trains == set(TRAINING), trains


@pytest.mark.parametrize("config", [*TRAINING, "deepmath_qwen3_0.6b.yaml+deepmath_qwen3_1.7b.yaml"])
def test_every_training_config_carries_each_standard_callback_once(config):
    args = [a for name in config.split("+") for a in ("--config", str(ROOT / "configs" / name))]
    trainer = trainer_of(*args)
    counts = Counter(type(cb) for cb in trainer.callbacks)
    for cls in STANDARD:
        assert sum(n for t, n in counts.items() if issubclass(t, cls)) == 1, (config, cls.__name__, counts)


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


def test_a_plain_lightning_trainer_gets_the_same_set_from_python():
    names = [type(cb).__name__ for cb in standard_callbacks()]
    assert names == [cls.__name__ for cls in STANDARD]
    mine = DivergenceMonitor(every_n_steps=50)
    assert [cb for cb in standard_callbacks([mine]) if isinstance(cb, DivergenceMonitor)] == []


@pytest.mark.parametrize("config", ["sft_tiny.yaml", "sft_countdown.yaml"])
def test_the_sft_configs_keep_a_last_checkpoint_that_agon_sft_resumes_from(config, tmp_path):
    from lightning.pytorch.callbacks import ModelCheckpoint

    from agon_lightning.training.sft import SFTCLI, SFTDataModule, SFTModule

    cli = SFTCLI(
        SFTModule, SFTDataModule, run=False,
        args=["--config", str(ROOT / "configs" / config), "--trainer.logger=false", "--ckpt_path=last"],
    )  # fmt: skip
    (checkpoint,) = [cb for cb in cli.trainer.callbacks if isinstance(cb, ModelCheckpoint)]
    assert checkpoint.save_last
    assert cli.config["ckpt_path"] == "last"  # what sft_main hands to fit

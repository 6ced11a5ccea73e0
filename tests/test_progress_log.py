"""Progress lines for a log: their format by hand, and their cadence in a real tiny run."""

from __future__ import annotations

import re

import lightning as L
import pytest
from test_module import make_module

from agon_lightning.callbacks import ProgressLog
from agon_lightning.callbacks.progress_log import duration, evaluation_line, progress_line
from agon_lightning.data.reasoning_gym import ReasoningGymDataModule

LINE = re.compile(
    r"^step (\d+)/(\d+) \| draft (alpha|beta|alpha/beta): reward -?\d+\.\d{3} pass \d\.\d{3} "
    r"\| challenge (alpha|beta|alpha/beta): reward -?\d+\.\d{3} pass \d\.\d{3}( \| conversion \d\.\d{3})? "
    r"\| \d+\.\d\d s/step \| (\d+s|\d+m\d\ds) left$"
)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0s"), (44.6, "45s"), (60, "1m00s"), (125, "2m05s"), (3720, "1h02m"), (float("nan"), "?")],
)
def test_durations_read_at_a_glance(seconds, text):
    assert duration(seconds) == text


def test_a_progress_line_names_each_role_its_adapter_reward_and_pass_rate():
    means = {
        "train/draft/reward": 0.4125, "train/draft/accuracy": 0.375,
        "train/challenge/reward": 0.6031, "train/challenge/accuracy": 0.55,
        "train/conversion_rate": 0.2857, "train/loss": 1.0,
    }  # fmt: skip
    line = progress_line(10, 60, means, {"draft": "alpha", "challenge": "beta"}, 2.4)
    assert line == (
        "step 10/60 | draft alpha: reward 0.412 pass 0.375 | challenge beta: reward 0.603 pass 0.550"
        " | conversion 0.286 | 2.40 s/step | 2m00s left"
    )
    # GRPO: no challenger, no conversion; an unbounded run has no total and no time left
    grpo = progress_line(
        3, None, {"train/draft/reward": 1.0, "train/draft/accuracy": 1.0}, {"draft": "alpha"}, 0.5
    )
    assert grpo == "step 3 | draft alpha: reward 1.000 pass 1.000 | 0.50 s/step"


def test_an_evaluation_line_lists_every_policys_pass_at_1_without_the_splits():
    metrics = {"val/alpha/pass@1": 0.3, "val/base/pass@1": 0.25, "val/cascade_ab/pass@1": 0.35,
               "val/alpha/length": 12.0, "val/hard/alpha/pass@1": 0.1}  # fmt: skip
    assert evaluation_line(20, metrics) == "eval step 20 | pass@1 alpha 0.300 base 0.250 cascade_ab 0.350"
    assert evaluation_line(0, {}) == "eval step 0 | (no pass@1 logged)"


def test_bad_settings_are_named():
    with pytest.raises(ValueError, match="every_n_steps must be >= 1, got 0"):
        ProgressLog(every_n_steps=0)
    with pytest.raises(ValueError, match="when must be one of .*got 'sometimes'"):
        ProgressLog(when="sometimes")


def run(model_dir, tmp_path, callback, steps=5, val_check_interval=None, validate_at_start=True):
    module = make_module(model_dir)
    module.validate_at_start = validate_at_start  # the evaluations before the first step and after the last
    trainer = L.Trainer(
        max_steps=-1, max_epochs=1, limit_train_batches=steps, limit_val_batches=1, num_sanity_val_steps=0,
        val_check_interval=val_check_interval, check_val_every_n_epoch=None if val_check_interval else 1,
        logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
        default_root_dir=tmp_path, accelerator="cpu", callbacks=[callback],
    )  # fmt: skip
    trainer.fit(module, ReasoningGymDataModule(train_size=20, val_size=2, batch_size=2, val_batch_size=2))


def test_a_piped_run_prints_a_line_every_k_steps_the_last_step_and_every_evaluation(
    tiny_model_dir, tmp_path, capsys
):
    # pytest's captured stdout is not a terminal: the default `no_terminal` prints
    run(tiny_model_dir, tmp_path, ProgressLog(every_n_steps=2), steps=5, val_check_interval=4)
    lines = capsys.readouterr().out.splitlines()
    ours = [line for line in lines if line.startswith(("step ", "eval step "))]
    assert [line.split(" |")[0] for line in ours] == [
        "eval step 0",  # before the first step
        "step 2/5",
        "step 4/5",
        "eval step 4",  # val_check_interval
        "step 5/5",  # the last step, off the cadence
        "eval step 5",  # after the last step
    ]
    for line in ours:
        if line.startswith("step "):
            assert LINE.match(line), line
    roles = [LINE.match(line).group(3, 4) for line in ours if line.startswith("step ")]
    # roles rotate every step: two steps saw both adapters in each role, the last step one each
    assert roles == [("alpha/beta", "alpha/beta"), ("alpha/beta", "alpha/beta"), ("alpha", "beta")]
    assert "pass@1 alpha" in ours[0] and "base" in ours[0]


def test_on_a_terminal_or_when_never_it_prints_nothing(tiny_model_dir, tmp_path, capsys, monkeypatch):
    run(
        tiny_model_dir,
        tmp_path / "never",
        ProgressLog(every_n_steps=1, when="never"),
        steps=2,
        validate_at_start=False,
    )
    monkeypatch.setattr("sys.stdout.isatty", lambda: True)
    run(tiny_model_dir, tmp_path / "tty", ProgressLog(every_n_steps=1), steps=2, validate_at_start=False)
    out = capsys.readouterr().out
    assert not re.search(r"^(eval )?step \d", out, flags=re.M), out


@pytest.mark.parametrize("terminal", [False, True])
def test_in_a_log_it_turns_the_progress_bar_off_and_on_a_terminal_leaves_it(monkeypatch, terminal):
    # Lightning's default bar (Rich) would print its last frame below the run's closing lines.
    monkeypatch.setattr("sys.stdout.isatty", lambda: terminal)
    trainer = L.Trainer(
        accelerator="cpu", logger=False, enable_checkpointing=False, enable_model_summary=False
    )
    ProgressLog().setup(trainer, None, "fit")
    assert trainer.progress_bar_callback.is_enabled is terminal


def test_an_sft_line_shows_the_loss():
    line = progress_line(50, 4000, {"train/loss": 1.23456}, {}, 0.2)
    assert line == "step 50/4000 | loss 1.235 | 0.20 s/step | 13m10s left"

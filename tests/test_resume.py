"""Exact resume: a run stopped after step k and resumed with ``--ckpt_path last`` logs what an
uninterrupted run logs from step k+1 on, value for value.

All runs are real ``agon fit`` processes on the tiny in-process model. The verifier below
(correct when the completion's length is even) gives every step a learning signal, so the
adapters, the optimizer state and the divergence metrics really move; the run spans
two epochs, so the data position, the per-epoch shuffle and the RNG streams all have to be
restored for the numbers to match. One run is SIGKILLed one batch into the second epoch,
right after a checkpoint; the others get SIGINT or SIGTERM in the middle of a step, long
before the next periodic checkpoint, and must save one themselves.
"""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import lightning as L
import pytest
import torch

from agon_lightning.callbacks.run_lock import LOCK_NAME
from agon_lightning.game.types import Problem, Verdict
from agon_lightning.verifiers.base import Verifier

ROOT = Path(__file__).resolve().parents[1]
KILL_AFTER = 4  # steps completed before the kill: 3 in epoch 0, 1 in epoch 1


class EvenLengthVerifier(Verifier):
    """Correct when the completion has an even number of characters: a signal on any model."""

    def verify(self, completion: str, problem: Problem) -> Verdict:
        return Verdict(correct=len(completion) % 2 == 0)


class KillAfterStep(L.Callback):
    """SIGKILLs its own process as the step after ``step`` starts (after that step's checkpoint)."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if trainer.global_step >= self.step:
            os.kill(os.getpid(), signal.SIGKILL)


class SignalInStep(L.Callback):
    """Sends ``signum`` to its own process in the middle of step ``step`` (0-based), before its backward."""

    def __init__(self, step: int, signum: int) -> None:
        self.step = step
        self.signum = signum
        self.sent = False

    def on_before_backward(self, trainer, pl_module, loss) -> None:
        if trainer.global_step == self.step and not self.sent:
            self.sent = True
            os.kill(os.getpid(), self.signum)


def agon_fit(
    model_dir: Path,
    root: Path,
    *extra: str,
    kill_after: int | None = None,
    signal_in_step: tuple[int, int] | None = None,
    every_n_train_steps: int = 1,
) -> subprocess.Popen:
    callbacks = [
        {
            "class_path": "agon_lightning.callbacks.AgonCheckpoint",
            "init_args": {"every_n_train_steps": every_n_train_steps},
        },
        {"class_path": "agon_lightning.callbacks.TraceLengthMonitor"},
        {
            "class_path": "agon_lightning.callbacks.DivergenceMonitor",
            "init_args": {"every_n_steps": 2, "num_probes": 2},
        },
        {
            "class_path": "agon_lightning.callbacks.SampleTable",
            "init_args": {"every_n_steps": 2, "num_rows": 2},
        },
    ]
    if kill_after is not None:
        callbacks.append({"class_path": "test_resume.KillAfterStep", "init_args": {"step": kill_after}})
    if signal_in_step is not None:
        step, signum = signal_in_step
        callbacks.append(
            {"class_path": "test_resume.SignalInStep", "init_args": {"step": step, "signum": signum}}
        )
    root.mkdir(parents=True, exist_ok=True)
    overrides = root.parent / f"{root.name}.yaml"
    overrides.write_text(json.dumps({  # JSON is YAML
        "trainer": {
            "callbacks": callbacks, "enable_progress_bar": False, "enable_model_summary": False,
            # metrics.csv is what is compared; TensorBoard would only add start-up time.
            "logger": {"class_path": "lightning.pytorch.loggers.CSVLogger", "init_args": {"save_dir": str(root)}},
        },
        "model": {"verifier": {"class_path": "test_resume.EvenLengthVerifier"}},
    }))  # fmt: skip
    args = [
        "fit", "--config", str(ROOT / "configs/agon.yaml"), "--config", str(overrides),
        f"--model.model_name_or_path={model_dir}", f"--trainer.default_root_dir={root}",
        "--trainer.max_epochs=2", "--trainer.limit_train_batches=3", "--trainer.val_check_interval=2",
        "--data.init_args.train_size=12", "--data.init_args.batch_size=2", "--data.init_args.val_size=2",
        "--data.init_args.val_batch_size=2", "--model.grpo.num_generations=2",
        "--model.rollout.init_args.max_new_tokens=8", *extra,
    ]  # fmt: skip
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]),
        "OMP_NUM_THREADS": "1",  # two runs at once on a tiny model: more threads only contend
    }
    code = f"from agon_lightning.cli import main; main({args!r})"
    return subprocess.Popen(
        [sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )


def finish(proc: subprocess.Popen) -> tuple[int, str]:
    out, _ = proc.communicate(timeout=300)
    return proc.returncode, out.decode(errors="replace")[-3000:]


def is_timing(key: str) -> bool:
    """A wall-clock metric: ``time/*`` and validation's ``val/…/cost/wall_s``."""
    return key.startswith("time/") or key.endswith("/wall_s")


def rows_after(path: Path, steps_done: int) -> list[dict[str, str]]:
    """The rows a run logs once ``steps_done`` steps are behind it; empty cells and timings dropped.

    A training row's ``step`` is the step's index, a validation row's the number of steps
    trained (its metrics start with ``val/`` or ``trace/val/``, or its ``split`` is ``val``).
    """
    if path.suffix == ".csv":
        rows = list(csv.DictReader(path.open()))
    else:
        rows = [json.loads(line) for line in path.read_text().splitlines()]
    kept = []
    for row in rows:
        row = {k: v for k, v in row.items() if v not in ("", None) and not is_timing(k)}
        is_val = row.get("split") == "val" or any(k.startswith(("val/", "trace/val/")) for k in row)
        if int(row["step"]) >= steps_done + is_val:
            kept.append(row)
    return kept


@pytest.fixture(scope="module")
def straight(tiny_model_dir, tmp_path_factory):
    """An uninterrupted run, started once for the tests here; call it for its log directory."""
    root = tmp_path_factory.mktemp("straight")
    proc = agon_fit(tiny_model_dir, root)
    done: list[Path] = []

    def log_dir() -> Path:
        if not done:
            code, out = finish(proc)
            assert code == 0, out
            done.append(root / "lightning_logs" / "version_0")
        return done[0]

    yield log_dir
    if proc.poll() is None:
        proc.kill()
        proc.communicate()


def assert_resumes_exactly(
    model_dir: Path, root: Path, straight_dir: Path, steps_done: int, extra: tuple[str, ...] = ()
) -> None:
    """``--ckpt_path last`` in ``root`` (with the runs' ``extra`` arguments) logs what the straight run
    logged after ``steps_done`` steps."""
    last = root / "checkpoints" / "last.ckpt"
    state = torch.load(last, map_location="cpu", weights_only=False)
    assert state["global_step"] == steps_done and state["agon"]["step"] == steps_done
    # A SIGKILLed run leaves its lock (the resume takes it over); nothing else may be left behind.
    leftovers = [p.name for p in last.parent.glob(".*") if p.name != LOCK_NAME]
    assert not leftovers, f"a partial checkpoint was left behind: {leftovers}"

    code_r, out_r = finish(agon_fit(model_dir, root, *extra, "--ckpt_path", "last"))
    assert code_r == 0, out_r
    assert "not resumable" not in out_r
    assert not (last.parent / LOCK_NAME).exists(), "the resumed run released its lock"

    resumed_dir = root / "lightning_logs" / "version_1"
    for name in ("metrics.csv", "trace_lengths.jsonl", "samples.jsonl"):
        expected = rows_after(straight_dir / name, steps_done)
        got = rows_after(resumed_dir / name, steps_done)
        assert expected, f"{name} has no rows from step {steps_done}"
        assert got == expected, name  # exact: the same strings in the CSV, the same JSON values

    metrics = rows_after(resumed_dir / "metrics.csv", steps_done)
    # Not vacuous: the adapters moved, and the drafter alternates as the schedule says.
    assert any(float(r.get("divergence/alpha_delta_norm", 0)) > 0 for r in metrics)
    drafters = [r["train/drafter"] for r in metrics if "train/drafter" in r]
    assert drafters == [["0.0", "1.0"][(steps_done + i) % 2] for i in range(6 - steps_done)]


def straight_log(model_dir: Path, root: Path, *extra: str) -> Path:
    """The log directory of an uninterrupted 6-step run with ``extra`` arguments."""
    code, out = finish(agon_fit(model_dir, root, *extra))
    assert code == 0, out
    return root / "lightning_logs" / "version_0"


def assert_a_killed_run_resumes_exactly(model_dir: Path, root: Path, straight_dir: Path, *extra: str) -> dict:
    """Kill a run with ``extra`` after step 4, resume it, compare with ``straight_dir``; its checkpoint's state."""
    code, _ = finish(agon_fit(model_dir, root, *extra, kill_after=KILL_AFTER))
    assert code != 0, f"the run was meant to be killed after step {KILL_AFTER}"
    state = torch.load(root / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    assert_resumes_exactly(model_dir, root, straight_dir, KILL_AFTER, extra)
    return state


def test_sigkilled_run_resumes_exactly(tiny_model_dir, tmp_path, straight):
    killed = agon_fit(tiny_model_dir, tmp_path / "killed", kill_after=KILL_AFTER)
    code_k, out_k = finish(killed)
    assert code_k == -signal.SIGKILL, f"the run was meant to be SIGKILLed, exit code {code_k}:\n{out_k}"
    assert (tmp_path / "killed" / "checkpoints" / LOCK_NAME).exists(), "a killed run cannot release its lock"
    assert_resumes_exactly(tiny_model_dir, tmp_path / "killed", straight(), KILL_AFTER)


@pytest.mark.parametrize(
    "signum,stop_after",
    [
        # Mid step 4 (index 3): a validation is due after it, and runs before the stop.
        (signal.SIGINT, 4),
        # Mid step 3, the last of epoch 0: no validation; the stop comes as epoch 1 starts.
        (signal.SIGTERM, 3),
    ],
    ids=["SIGINT", "SIGTERM"],
)
def test_interrupted_run_saves_a_checkpoint_and_resumes_exactly(
    tiny_model_dir, tmp_path, straight, signum, stop_after
):
    root = tmp_path / "interrupted"
    # Periodic checkpoints every 10 steps: none is due before the interrupt.
    proc = agon_fit(tiny_model_dir, root, signal_in_step=(stop_after - 1, signum), every_n_train_steps=10)
    code, out = finish(proc)
    name = signal.Signals(signum).name
    assert code == 128 + signum, f"exit code {code}:\n{out}"
    assert f"{name}: stopped after step {stop_after}; resumable checkpoint" in out, out
    assert "Traceback" not in out, out
    assert not (root / "checkpoints" / LOCK_NAME).exists(), "a run stopped by a signal releases its lock"
    # the run's last lines still say where its bundle is, and how to resume
    assert f"Outputs of this run:\n  {root / 'checkpoints' / 'last'}  (the last bundle" in out, out
    assert_resumes_exactly(tiny_model_dir, root, straight(), stop_after)

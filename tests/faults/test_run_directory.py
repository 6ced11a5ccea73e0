"""A fit owns its checkpoint directory: nothing of another run is replaced or deleted, and a refusal
is one line (exit 2) naming the directory and the fix.

Real ``agon fit`` runs of the tiny test model: one in a subprocess that trains for long enough to
hold the lock while a second fit starts in-process; a two-step run that finishes, followed by a
fit from scratch into its directory. The lock's own cases (a dead holder, another host) are unit
checks of :class:`~agon_lightning.callbacks.run_lock.RunLock`.
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import lightning as L
import pytest
import torch
import yaml

from agon_lightning.callbacks import AgonCheckpoint
from agon_lightning.callbacks.checkpoint_dir import clean_leftovers
from agon_lightning.callbacks.run_lock import LOCK_NAME, STALE_AFTER_S, DirectoryRefused, RunLock
from agon_lightning.cli import main

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


CONFIG = str(ROOT / "configs/agon.yaml")


def overrides(model_dir: Path, root: Path, steps: int = 2) -> list[str]:
    """The tiny model for ``steps`` steps into ``root``, no validation, no logger."""
    return [
        f"--model.model_name_or_path={model_dir}", f"--trainer.default_root_dir={root}", "--trainer.max_epochs=1",
        f"--trainer.limit_train_batches={steps}", "--trainer.limit_val_batches=0", "--trainer.logger=false",
        "--model.validate_at_start=false", f"--data.init_args.train_size={2 * steps}", "--data.init_args.batch_size=2",
        "--data.init_args.val_size=2", "--data.init_args.val_batch_size=2", "--model.grpo.num_generations=2",
        "--model.rollout.init_args.max_new_tokens=4",
    ]  # fmt: skip


def fit_args(model_dir: Path, root: Path, *extra: str, steps: int = 2) -> list[str]:
    """``agon fit`` of :func:`overrides`, one thread, then ``extra``."""
    return ["fit", "--config", CONFIG, *overrides(model_dir, root, steps), "--threads=1", *extra]


def refused(args: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """Run ``agon ARGS`` in this process; it must exit 2. Its one-line message."""
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    out, err = capsys.readouterr()
    assert exit_info.value.code == 2, err[-2000:]
    lines = [line for line in err.splitlines() if line.startswith("agon fit: error:")]
    assert len(lines) == 1 and "Traceback" not in err, err[-2000:]
    assert "Outputs of this run" not in out, "a refused run lists another run's outputs as its own"
    return lines[0]


class Pause(L.Callback):
    """Holds a run at the start of training (its directory locked) for ``seconds``, without using the CPU."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        time.sleep(self.seconds)


@pytest.fixture(scope="module")
def live_run(tiny_model_dir, tmp_path_factory):
    """A real ``agon fit`` in a subprocess, paused at the start of training with its directory locked."""
    root = tmp_path_factory.mktemp("live")
    pause = root.parent / "pause.yaml"
    pause.write_text(json.dumps({"trainer": {"callbacks": [
        {"class_path": "test_run_directory.Pause", "init_args": {"seconds": 600}},
    ]}}))  # fmt: skip
    args = fit_args(tiny_model_dir, root, "--config", str(pause))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join([str(HERE), *sys.path])}
    code = f"from agon_lightning.cli import main; main({args!r})"
    proc = subprocess.Popen(
        [sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    importlib.import_module("agon_lightning.cli.game")  # this process's imports, while that one starts
    lock = root / "checkpoints" / LOCK_NAME
    deadline = time.monotonic() + 240
    while not lock.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    if not lock.exists():
        proc.kill()
        pytest.fail(f"the first run never took its lock:\n{proc.communicate()[0].decode()[-3000:]}")
    yield root, proc
    proc.send_signal(signal.SIGKILL)
    proc.communicate()


def test_a_second_fit_into_a_live_runs_directory_is_refused_naming_it(live_run, tiny_model_dir, capsys):
    root, first = live_run
    line = refused(fit_args(tiny_model_dir, root), capsys)
    assert f"another run is writing checkpoints into {root / 'checkpoints'}" in line, line
    assert f"pid {first.pid} on host {socket.gethostname()}" in line, line
    assert "another --trainer.default_root_dir" in line, line
    assert first.poll() is None, "the first run must go on"
    assert json.loads((root / "checkpoints" / LOCK_NAME).read_text())["pid"] == first.pid


def test_a_refused_fit_leaves_the_live_runs_save_in_progress(live_run, tiny_model_dir, capsys):
    # What the first run's save has in flight: a checkpoint being written, its bundle being staged
    # (under a name the first run never writes itself: it validates never, so it saves no best).
    root, first = live_run
    in_flight = [
        root / "checkpoints" / ".best-step=9.ckpt.partial",
        root / "checkpoints" / ".best-step=9.tmp-x1y2",
    ]
    in_flight[0].write_bytes(b"half a checkpoint")
    in_flight[1].mkdir()
    refused(fit_args(tiny_model_dir, root), capsys)
    assert all(p.exists() for p in in_flight), "a refused run deleted another run's save in progress"
    assert first.poll() is None


@pytest.fixture(scope="module")
def finished_run(tiny_model_dir, tmp_path_factory):
    """A two-step run that finished: ``last.ckpt`` at step 2."""
    root = tmp_path_factory.mktemp("finished")
    main(fit_args(tiny_model_dir, root))
    return root


def test_a_fresh_fit_into_a_finished_runs_directory_is_refused(finished_run, tiny_model_dir, capsys):
    last = finished_run / "checkpoints" / "last.ckpt"
    before = last.read_bytes()
    assert torch.load(last, map_location="cpu", weights_only=False)["global_step"] == 2
    assert not (last.parent / LOCK_NAME).exists(), "a finished run releases its lock"
    line = refused(fit_args(tiny_model_dir, finished_run, steps=1), capsys)
    assert f"{last.parent} holds checkpoints of an earlier run (last.ckpt)" in line, line
    assert "--ckpt_path last" in line and "--overwrite" in line, line
    assert last.read_bytes() == before, "the earlier run's checkpoint was replaced"
    assert not (last.parent / LOCK_NAME).exists(), "a refused run releases the lock it took"


def test_overwrite_replaces_the_earlier_run_from_python(finished_run, tiny_model_dir):
    from agon_lightning import from_config  # a Trainer with AgonCheckpoint, as a script builds it

    args = overrides(tiny_model_dir, finished_run, steps=1)
    model, data, trainer = from_config(CONFIG, *args)
    with pytest.raises(DirectoryRefused, match="holds checkpoints of an earlier run"):
        trainer.fit(model, datamodule=data)
    last = finished_run / "checkpoints" / "last.ckpt"
    assert torch.load(last, map_location="cpu", weights_only=False)["global_step"] == 2
    model, data, trainer = from_config(CONFIG, *args, "--overwrite")
    (callback,) = [cb for cb in trainer.callbacks if isinstance(cb, AgonCheckpoint)]
    assert callback.overwrite
    trainer.fit(model, datamodule=data)
    assert torch.load(last, map_location="cpu", weights_only=False)["global_step"] == 1


def test_overwrite_from_the_cli_is_not_carried_by_the_runs_config(tiny_model_dir, tmp_path):
    main(fit_args(tiny_model_dir, tmp_path))
    main(fit_args(tiny_model_dir, tmp_path, "--overwrite", steps=1))
    last = tmp_path / "checkpoints" / "last.ckpt"
    assert torch.load(last, map_location="cpu", weights_only=False)["global_step"] == 1
    saved = yaml.safe_load((tmp_path / "config.yaml").read_text())
    # reused as --config, the run's config must not delete the checkpoints where it is pointed
    assert saved["overwrite"] is False, saved.get("overwrite")


# ---------------------------------------------------------------------------------------------
# The lock itself
# ---------------------------------------------------------------------------------------------
def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def write_lock(directory: Path, pid: int, host: str) -> Path:
    path = directory / LOCK_NAME
    path.write_text(json.dumps({"pid": pid, "host": host, "started": "earlier"}))
    return path


def test_a_dead_runs_lock_is_taken_over_with_a_line(tmp_path):
    pid = dead_pid()
    path = write_lock(tmp_path, pid, socket.gethostname())
    lock = RunLock()
    note = lock.acquire(tmp_path)
    try:
        assert (
            note
            == f"took over {path} from a run that is gone (pid {pid} on host {socket.gethostname()}, started earlier)"
        )
        assert json.loads(path.read_text())["pid"] == os.getpid()
    finally:
        lock.release()
    assert not path.exists()


def test_a_held_lock_refuses_another_holder_until_released(tmp_path):
    first, second = RunLock(), RunLock()
    assert first.acquire(tmp_path) is None
    try:
        with pytest.raises(DirectoryRefused, match=f"pid {os.getpid()} on host"):
            second.acquire(tmp_path)  # another open file: the kernel's lock holds even within one process
    finally:
        first.release()
    assert second.acquire(tmp_path) is None
    second.release()


def test_another_hosts_lock_holds_until_its_heartbeat_is_stale(tmp_path):
    path = write_lock(tmp_path, 1, "some-other-node")
    with pytest.raises(DirectoryRefused, match="host some-other-node.*stale 300 s after its last heartbeat"):
        RunLock().acquire(tmp_path)
    old = time.time() - STALE_AFTER_S - 10
    os.utime(path, (old, old))
    lock = RunLock()
    assert "took over" in lock.acquire(tmp_path)
    lock.release()


def test_the_lock_is_released_when_a_fit_fails(tiny_model_dir, tmp_path):
    from test_resume import EvenLengthVerifier

    from agon_lightning.adapters.policy import LoraOptions
    from agon_lightning.data.reasoning_gym import ReasoningGymDataModule
    from agon_lightning.rollout.hf import HFRollout
    from agon_lightning.training.module import AgonModule, GRPOOptions

    class Fails(L.Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            assert (tmp_path / "checkpoints" / LOCK_NAME).exists()
            raise RuntimeError("boom")

    module = AgonModule(
        model_name_or_path=str(tiny_model_dir), lora=LoraOptions(r=2, target_modules=["q_proj"]),
        grpo=GRPOOptions(num_generations=2), rollout=HFRollout(max_new_tokens=4), verifier=EvenLengthVerifier(),
        validate_at_start=False,
    )  # fmt: skip
    trainer = L.Trainer(
        max_steps=1, logger=False, callbacks=[AgonCheckpoint(), Fails()], enable_progress_bar=False,
        enable_model_summary=False, default_root_dir=tmp_path, accelerator="cpu", limit_val_batches=0,
    )  # fmt: skip
    with pytest.raises(RuntimeError, match="boom"):
        trainer.fit(module, ReasoningGymDataModule(train_size=4, val_size=2, batch_size=2, val_batch_size=2))
    assert not (tmp_path / "checkpoints" / LOCK_NAME).exists()


def test_leftovers_of_killed_saves_are_cleaned_and_an_only_copy_put_back(tmp_path):
    # What a killed save leaves: a partial checkpoint, a partial digest list, a staged bundle, a
    # bundle moved aside whose replacement arrived, and one whose replacement never did.
    (tmp_path / ".last.ckpt.partial").write_bytes(b"half")
    (tmp_path / ".last.ckpt.sha256.partial").write_text("half")
    (tmp_path / ".last.tmp-ab12").mkdir()
    (tmp_path / "last").mkdir()
    (tmp_path / ".last.old-41").mkdir()
    (tmp_path / ".best-step=4.old-41").mkdir()
    (tmp_path / ".best-step=4.old-41" / "agon.json").write_text("{}")
    (tmp_path / "gone.ckpt.sha256").write_text("digest of a checkpoint that was removed")
    restored = clean_leftovers(tmp_path)
    assert restored == [
        f"put {tmp_path / 'best-step=4'} back from .best-step=4.old-41, left by a save that was killed"
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best-step=4", "last"]
    assert (tmp_path / "best-step=4" / "agon.json").is_file()

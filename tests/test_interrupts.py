"""SIGTERM and Ctrl-C stop a multi-process run within seconds, with the checkpoint of the last finished step.

Real ``agon fit`` runs of the shipped default config under DDP (2 gloo processes), real
signals: SIGTERM to rank zero alone (what ``kill`` does), SIGINT to the whole process group
(what Ctrl-C in a terminal does). And a process blocked in a collective, where no Python
signal handler can run, still exits soon after the signal.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
STEPS_BEFORE_SIGNAL = 2
STOP_WITHIN_S = 30  # the step in flight finishes first: a few seconds on the tiny model


def group_members(pgid: int) -> list[int]:
    """Live processes of a process group (from /proc: zombies left out)."""
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            pids.append(int(stat.parent.name))
    return pids


def train_steps(root: Path) -> set[int]:
    """The training steps rank zero has finished (TraceLengthMonitor writes a row per role and step)."""
    found = list(root.glob("lightning_logs/*/trace_lengths.jsonl"))
    if not found:
        return set()
    rows = [json.loads(line) for line in found[0].read_text().splitlines() if line.strip()]
    return {row["step"] for row in rows if row["split"] == "train"}


@pytest.mark.slow
@pytest.mark.parametrize("how", ["sigterm_to_rank_zero", "ctrl_c_to_the_group"])
def test_a_signal_stops_every_rank_within_seconds_with_the_last_finished_step(how, tmp_path):
    root = tmp_path / "run"
    args = [
        "fit", "--config", str(ROOT / "configs/agon.yaml"), "--config", str(ROOT / "configs/strategy/ddp.yaml"),
        "--trainer.accelerator=cpu", "--trainer.devices=2", "--trainer.limit_train_batches=100",
        f"--trainer.default_root_dir={root}", "--trainer.val_check_interval=1000", "--model.validate_at_start=false",
        "--data.init_args.val_size=2", "--data.init_args.hard_size=2", "--data.init_args.batch_size=2",
        "--model.rollout.init_args.max_new_tokens=16", "--threads", "1",
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    # The installed command: Lightning starts rank one by re-running this process's command line.
    agon = str(Path(sys.executable).with_name("agon"))
    with (tmp_path / "log.txt").open("w") as log:
        proc = subprocess.Popen(
            [agon, *args], env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        deadline = time.monotonic() + 300
        while len(train_steps(root)) < STEPS_BEFORE_SIGNAL:
            assert proc.poll() is None, (tmp_path / "log.txt").read_text()[-3000:]
            assert time.monotonic() < deadline, "the run did not reach its second step"
            time.sleep(0.2)
        sent = time.monotonic()
        if how == "sigterm_to_rank_zero":
            os.kill(proc.pid, signal.SIGTERM)
            signum = signal.SIGTERM
        else:
            os.killpg(proc.pid, signal.SIGINT)
            signum = signal.SIGINT
        code_ = proc.wait(timeout=120)
        while group_members(proc.pid) and time.monotonic() - sent < STOP_WITHIN_S:
            time.sleep(0.1)
        stopped = time.monotonic() - sent
    finally:
        if proc.poll() is None or group_members(proc.pid):
            os.killpg(proc.pid, signal.SIGKILL)
    log_text = (tmp_path / "log.txt").read_text()
    assert code_ == 128 + signum, log_text[-3000:]
    assert not group_members(proc.pid), "a rank is still running"
    assert stopped < STOP_WITHIN_S, f"stopped {stopped:.1f} s after the signal"
    # The checkpoint is the last finished step: every step rank zero logged, none half-done.
    saved = torch.load(root / "checkpoints/last.ckpt", weights_only=False)
    done = train_steps(root)
    assert saved["global_step"] == len(done) == max(done) + 1 >= STEPS_BEFORE_SIGNAL
    assert saved["agon"]["step"] == len(done)
    assert f"stopped after step {len(done)}" in log_text


BLOCKED = textwrap.dedent(
    """
    import importlib.util, os, sys, time
    import torch, torch.distributed as dist

    spec = importlib.util.spec_from_file_location("interrupt", {interrupt!r})  # the module alone: stdlib only
    interrupt = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(interrupt)

    rank = int(sys.argv[1])
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:" + sys.argv[2], rank=rank, world_size=2)
    if rank == 1:
        print("rank 1 elsewhere", flush=True)
        time.sleep(60)  # never joins rank 0's collective in time
        sys.exit(0)
    signals = interrupt.StopSignals(timeout_s=2.0)
    signals.install()
    print("rank 0 blocked", flush=True)
    dist.all_reduce(torch.zeros(1))  # waits for rank 1: no Python handler can run in here
    print("rank 0 unblocked", flush=True)
    """
)


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_process_blocked_in_a_collective_still_exits_soon_after_the_signal(tmp_path):
    script = tmp_path / "blocked.py"
    script.write_text(BLOCKED.format(interrupt=str(ROOT / "callbacks" / "interrupt.py")))
    port = str(free_port())
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    other = subprocess.Popen(
        [sys.executable, str(script), "1", port], env=env, stdout=subprocess.PIPE, text=True
    )
    blocked = subprocess.Popen(
        [sys.executable, str(script), "0", port],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert blocked.stdout.readline().strip() == "rank 0 blocked"
        time.sleep(1.0)  # inside all_reduce by now
        sent = time.monotonic()
        blocked.send_signal(signal.SIGTERM)
        _, err = blocked.communicate(timeout=30)
        took = time.monotonic() - sent
    finally:
        for p in (blocked, other):
            if p.poll() is None:
                p.kill()
    assert blocked.returncode == 128 + signal.SIGTERM, err[-2000:]
    assert 2.0 <= took < 10.0, took
    assert "still running" in err and "all_reduce" in err  # says why, with the stack where it was stuck

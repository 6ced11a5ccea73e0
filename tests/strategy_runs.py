"""Runs of tests/ddp_worker.py shared by the DDP and sharded-strategy tests (each strategy, 2 gloo processes)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import torch

WORKER = Path(__file__).with_name("ddp_worker.py")


def run_worker(strategy: str, devices: int, out: Path, model_dir: Path, *extra: str) -> list[dict]:
    """Run the worker in fresh processes; each rank's saved record, by rank."""
    out.mkdir(parents=True)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(WORKER.parent)}
    proc = subprocess.run(
        [sys.executable, str(WORKER), strategy, str(devices), str(out), str(model_dir), *extra],
        env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-6000:]
    return [torch.load(out / f"rank{r}.pt", weights_only=False) for r in range(devices)]

"""Launches of 2 gloo processes shared by the DDP, sharded-strategy and rank-dependent tests.

Process start and DeepSpeed's initialisation dominate these tests, so each strategy gets one
launch (tests/launch_worker.py) that runs everything the tests need of it in the same two
processes: tests/ddp_worker.py's 2 steps for each of its checkpoint settings, then every
rank-dependent case of tests/rank_cases_worker.py. The resumes get one more launch per
strategy: a fresh pair of processes, as a resume after a crash has. Each launch runs at most
once per test session, on the first test that needs it; a failed launch fails, with its stderr, every test of a
job it did not finish, without being run again.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

HERE = Path(__file__).parent
WORKER = HERE / "ddp_worker.py"
LAUNCHER = HERE / "launch_worker.py"
TIMEOUT_S = 1200
# The 2-step runs, by name: (worker strategy, checkpoint format, activation checkpointing).
STEPS = {
    "ddp": ("ddp", "sharded", True),
    "fsdp2": ("fsdp2", "sharded", False),
    "fsdp2_one_file": ("fsdp2", "file", True),
    "deepspeed_zero2": ("zero2", "sharded", True),
    "deepspeed_zero3": ("zero3", "sharded", False),
}
RESUME_FROM = "checkpoints/epoch-epoch=0.ckpt"  # written after step 1
# The strategies that share a launch (and a resume launch): every one, as it costs one start only.
GROUPS = {"all": ("ddp", "fsdp2", "zero2", "zero3")}
NEEDS = {"zero2": "deepspeed", "zero3": "deepspeed"}


def available(strategy: str) -> bool:
    """Whether ``strategy``'s package is installed (a launch leaves out those that are not)."""
    return strategy not in NEEDS or importlib.util.find_spec(NEEDS[strategy]) is not None


def group(strategy: str) -> str:
    """The launch that runs ``strategy``."""
    (name,) = [g for g, members in GROUPS.items() if strategy in members]
    return name


def _env() -> dict:
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(HERE)}


def _records(out: Path, devices: int = 2) -> list[dict]:
    return [torch.load(out / f"rank{r}.pt", weights_only=False) for r in range(devices)]


def run_worker(strategy: str, devices: int, out: Path, model_dir: Path, *extra: str) -> list[dict]:
    """Run tests/ddp_worker.py alone in fresh processes; each rank's saved record, by rank."""
    out.mkdir(parents=True)
    proc = subprocess.run(
        [sys.executable, str(WORKER), strategy, str(devices), str(out), str(model_dir), *extra],
        env=_env(), capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-6000:]
    return _records(out, devices)


class Launches:
    """The shared launches of one test session, under ``root``, on the tiny model at ``model_dir``."""

    def __init__(self, root: Path, model_dir: Path) -> None:
        self.root, self.model_dir = root, model_dir
        self._done: dict[str, str | None] = {}  # launch name -> None (ran) or its failure

    def run_dir(self, name: str) -> Path:
        """Where the 2-step run ``name`` (a key of :data:`STEPS`) wrote its checkpoints."""
        return self.root / STEPS[name][0] / name

    def steps(self, name: str) -> list[dict]:
        """Each rank's record of the 2-step run ``name`` (a key of :data:`STEPS`)."""
        return self._records(group(STEPS[name][0]), self.run_dir(name))

    def cases(self, strategy: str) -> list[dict]:
        """Each rank's results, by case, of the rank-dependent cases under worker ``strategy``."""
        return self._records(group(strategy), self.root / strategy / "rank-cases")

    def resumed(self, name: str) -> list[dict]:
        """Each rank's record of a fresh pair of processes resuming run ``name`` from its step-1 checkpoint."""
        self.steps(name)
        return self._records(
            group(STEPS[name][0]), self.root / STEPS[name][0] / f"{name}-resumed", resume=True
        )

    def _records(self, launch: str, out: Path, resume: bool = False) -> list[dict]:
        """The job's records once its launch ran; a launch that failed fails the tests of the jobs it did not finish."""
        self._launch(launch, resume)
        name = f"{launch}-resumed" if resume else launch
        if self._done[name] is not None and not all((out / f"rank{r}.pt").is_file() for r in range(2)):
            pytest.fail(f"the {name} launch failed before {out.name} was saved:\n{self._done[name]}")
        return _records(out)

    def _jobs(self, launch: str, resume: bool) -> list[dict]:
        jobs = []
        for strategy in filter(available, GROUPS[launch]):
            for name, (s, fmt, ckpt) in STEPS.items():
                if s != strategy or (resume and s == "ddp"):  # DDP's run is the reference, not resumed
                    continue
                job = {"kind": "steps", "strategy": s, "format": fmt, "checkpointing": ckpt}
                if resume:
                    job |= {
                        "out": str(self.root / s / f"{name}-resumed"),
                        "resume": str(self.run_dir(name) / RESUME_FROM),
                    }
                else:
                    job["out"] = str(self.run_dir(name))
                jobs.append(job)
            if not resume:
                jobs.append(
                    {"kind": "cases", "strategy": strategy, "out": str(self.root / strategy / "rank-cases")}
                )
        return jobs

    def _launch(self, launch: str, resume: bool = False) -> None:
        name = f"{launch}-resumed" if resume else launch
        if name not in self._done:
            try:
                proc = subprocess.run(
                    [sys.executable, str(LAUNCHER), str(self.model_dir), json.dumps(self._jobs(launch, resume))],
                    env=_env(), capture_output=True, text=True, timeout=TIMEOUT_S,
                )  # fmt: skip
                failure = None if proc.returncode == 0 else proc.stderr[-6000:]
            except subprocess.TimeoutExpired as e:
                failure = f"timed out after {TIMEOUT_S} s: {str(e.stderr or '')[-6000:]}"
            self._done[name] = failure

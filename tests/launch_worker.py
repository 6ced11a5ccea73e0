"""Several jobs of the strategy tests in one launch of 2 gloo processes (process start dominates).

Launched by tests/strategy_runs.py::

    python tests/launch_worker.py MODEL_DIR JOBS_JSON

``JOBS_JSON`` is a list of jobs, run in order in the same 2 processes: Lightning's launcher
re-runs this command for rank 1 at the first ``fit``; later fits join the process group that
stands (as the rank-dependent cases always did). A job is one of

* ``{"kind": "steps", "strategy": S, "out": DIR, "format": "sharded"|"file",
  "checkpointing": bool, "resume": CKPT|null}``: tests/ddp_worker.py's 2 steps;
* ``{"kind": "cases", "strategy": S, "out": DIR}``: tests/rank_cases_worker.py's cases.

Each job saves each rank's record in its own ``DIR/rankR.pt``.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from ddp_worker import run_steps
from rank_cases_worker import run_cases

from agon_lightning.cli.game import release_process_group

KINDS = ("steps", "cases")


def run_job(job: dict, model_dir: str) -> None:
    kind = job.get("kind")
    if kind == "steps":
        run_steps(
            job["strategy"], 2, Path(job["out"]), model_dir, resume=job.get("resume"),
            file_format=job.get("format", "sharded"), checkpointing=job.get("checkpointing", True),
        )  # fmt: skip
    elif kind == "cases":
        run_cases(job["strategy"], Path(job["out"]), model_dir)
    else:
        raise ValueError(f"unknown job kind {kind!r}: expected one of {KINDS}")


def main() -> None:
    model_dir, jobs = sys.argv[1], json.loads(sys.argv[2])
    for job in jobs:
        run_job(job, model_dir)
    release_process_group()  # as `agon fit` does: no gloo group left alive at interpreter exit
    os.environ.pop("LOCAL_RANK", None)


if __name__ == "__main__":
    main()

"""Exact resume: a run SIGKILLed after step k and resumed with ``--ckpt_path last`` logs what an
uninterrupted run logs from step k+1 on, value for value.

Both runs are real ``agon fit`` processes on the tiny in-process model. The verifier below
(correct when the completion's length is even) gives every step a learning signal, so the
adapters, the optimizer state and the divergence metrics really move; the run spans
two epochs and is killed one batch into the second, so the data position, the per-epoch
shuffle and the RNG streams all have to be restored for the numbers to match.
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
import torch

from agon_lightning.types import Problem, Verdict
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


def agon_fit(model_dir: Path, root: Path, *extra: str, kill_after: int | None = None) -> subprocess.Popen:
    callbacks = [
        {"class_path": "agon_lightning.callbacks.AgonCheckpoint", "init_args": {"every_n_train_steps": 1}},
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
        row = {k: v for k, v in row.items() if v not in ("", None) and not k.startswith("time/")}
        is_val = row.get("split") == "val" or any(k.startswith(("val/", "trace/val/")) for k in row)
        if int(row["step"]) >= steps_done + is_val:
            kept.append(row)
    return kept


def test_sigkilled_run_resumes_exactly(tiny_model_dir, tmp_path):
    straight = agon_fit(tiny_model_dir, tmp_path / "straight")
    killed = agon_fit(tiny_model_dir, tmp_path / "killed", kill_after=KILL_AFTER)
    (code_s, out_s), (code_k, out_k) = finish(straight), finish(killed)
    assert code_s == 0, out_s
    assert code_k == -signal.SIGKILL, f"the run was meant to be SIGKILLed, exit code {code_k}:\n{out_k}"

    last = tmp_path / "killed" / "checkpoints" / "last.ckpt"
    state = torch.load(last, map_location="cpu", weights_only=False)
    assert state["global_step"] == KILL_AFTER and state["agon"]["step"] == KILL_AFTER
    assert not list(last.parent.glob(".*")), "a partial checkpoint was left behind"

    code_r, out_r = finish(agon_fit(tiny_model_dir, tmp_path / "killed", "--ckpt_path", "last"))
    assert code_r == 0, out_r
    assert "not resumable" not in out_r

    straight_dir = tmp_path / "straight" / "lightning_logs" / "version_0"
    resumed_dir = tmp_path / "killed" / "lightning_logs" / "version_1"
    for name in ("metrics.csv", "trace_lengths.jsonl", "samples.jsonl"):
        expected = rows_after(straight_dir / name, KILL_AFTER)
        got = rows_after(resumed_dir / name, KILL_AFTER)
        assert expected, f"{name} has no rows from step {KILL_AFTER}"
        assert got == expected, name  # exact: the same strings in the CSV, the same JSON values

    metrics = rows_after(resumed_dir / "metrics.csv", KILL_AFTER)
    # Not vacuous: the adapters moved, and the drafter alternates as the schedule says.
    assert any(float(r.get("divergence/alpha_delta_norm", 0)) > 0 for r in metrics)
    drafters = [r["train/drafter"] for r in metrics if "train/drafter" in r]
    assert drafters == ["0.0", "1.0"]

"""Exact resume, whole files: a run killed before, during and after a save logs what an unbroken run logs.

One run is killed three times and resumed each time with ``--ckpt_path last``: SIGKILLed in the
middle of a step (before that step's save), SIGKILLed half-way through writing a checkpoint (the
previous one must be the one resumed), and SIGKILLed just after a save. Each process's
``metrics.csv`` is cut at the step the next one resumed from, and the pieces put together must be
the uninterrupted run's ``metrics.csv``, row for row (timings aside), as must its trace-length and
sample tables; the outcomes of the last evaluation must be the same problem by problem.

The verifier is right by the problem (never, on an even-length completion, or always), so some
steps have no right draft — no regression rate — and some no wrong one — no conversion rate. Such a
cell must stay empty: a value carried over from an earlier step would also differ after a resume,
which has no earlier step to carry from. The divergence monitor leaves out, likewise, a cosine with
an adapter that has not moved and a KL over no token.
"""

from __future__ import annotations

import io
import json
import os
import signal
import zlib
from pathlib import Path

import lightning as L
import torch
from test_resume import agon_fit, finish, is_timing, rows_after

from agon_lightning.adapters.policy import LoraOptions
from agon_lightning.callbacks.divergence import DivergenceMonitor, delta_stats, mean_token_kls
from agon_lightning.game.types import Problem, Verdict
from agon_lightning.training.module import AgonModule
from agon_lightning.verifiers.base import Verifier

HERE = "faults.test_resume_exact"
SMALL = (  # no second held-out set: the evaluations stay one batch
    "--data.init_args.hard_tasks=null", f"--model.verifier={HERE}.ByProblemVerifier",
)  # fmt: skip
ALL = -1  # rows_after(path, ALL): every row, the evaluation before the first step too
STEPS = 6  # 2 epochs of 3 steps
TABLES = ("metrics.csv", "trace_lengths.jsonl", "samples.jsonl")
HALF_WRITTEN = "half_written.txt"  # where KillInSave names the file it left half written


class ByProblemVerifier(Verifier):
    """Right never, on an even-length completion, or always, as a hash of the question picks."""

    def verify(self, completion: str, problem: Problem) -> Verdict:
        kind = zlib.crc32(problem.question.encode()) % 3
        return Verdict(correct=kind == 2 or (kind == 1 and len(completion) % 2 == 0))


class KillInSave(L.Callback):
    """SIGKILLs its process half-way through writing the checkpoint of ``step``: half the file is on disk.

    The file's path goes to ``HALF_WRITTEN`` in the run's root first, for the test to find.
    """

    def __init__(self, step: int) -> None:
        self.step = step

    def on_save_checkpoint(self, trainer, pl_module, checkpoint) -> None:
        if trainer.global_step != self.step:
            return

        def write_half_and_die(checkpoint, path, storage_options=None) -> None:
            (Path(trainer.default_root_dir) / HALF_WRITTEN).write_text(str(path))
            buffer = io.BytesIO()
            torch.save(checkpoint, buffer)
            with open(path, "wb") as f:
                f.write(buffer.getvalue()[: buffer.tell() // 2])
                f.flush()
                os.fsync(f.fileno())
            os.kill(os.getpid(), signal.SIGKILL)

        # The checkpoint this hook is filling in is written next, through the strategy's checkpoint IO.
        trainer.strategy.checkpoint_io.save_checkpoint = write_half_and_die


def fit(model_dir: Path, root: Path, *extra: str, **kill) -> tuple[int, str]:
    """One ``agon fit`` of the test's 6-step run in ``root`` (see ``test_resume.agon_fit``), to its end."""
    return finish(agon_fit(model_dir, root, *SMALL, *extra, **kill))


def last_step(root: Path) -> int:
    """The steps done in ``root``'s ``last.ckpt``."""
    state = torch.load(root / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    assert state["global_step"] == state["agon"]["step"]
    return state["global_step"]


def rows_until(path: Path, start: int, end: int | None) -> list[dict]:
    """The rows of ``path`` from ``start`` steps done (see ``rows_after``) to ``end`` steps done.

    What one process of a resumed run contributes: the steps after its checkpoint and the
    evaluations after them, up to the checkpoint the next process resumed from.
    """
    rows = rows_after(path, start)
    later = [] if end is None else rows_after(path, end)
    return [r for r in rows if r not in later]


def outcomes(run_dir: Path) -> list[dict]:
    """The last evaluation's outcomes, problem by problem, timings aside."""
    lines = (run_dir / "outcomes.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(line).items() if not is_timing(k)} for line in lines]


def test_a_run_killed_before_during_and_after_a_save_logs_what_an_unbroken_run_logs(tiny_model_dir, tmp_path):
    straight = agon_fit(tiny_model_dir, tmp_path / "straight", *SMALL)  # meanwhile
    root = tmp_path / "killed"

    # Before a save: in the middle of the second step; its checkpoint is never written.
    code, out = fit(tiny_model_dir, root, signal_in_step=(1, signal.SIGKILL))
    assert code == -signal.SIGKILL, out
    starts = [ALL, last_step(root)]
    assert starts[-1] == 1

    # During a save: half of the checkpoint after step 3 is on disk; the one after step 2 is resumed.
    save_kill = json.dumps({"class_path": f"{HERE}.KillInSave", "init_args": {"step": 3}})
    code, out = fit(tiny_model_dir, root, "--ckpt_path", "last", f"--trainer.callbacks+={save_kill}")
    assert code == -signal.SIGKILL, out
    half = Path((root / HALF_WRITTEN).read_text())
    assert half.parent == root / "checkpoints" and half.name != "last.ckpt" and half.stat().st_size > 0
    starts.append(last_step(root))
    assert starts[-1] == 2

    # After a save: as step 5 starts, the checkpoint after step 4 written.
    code, out = fit(tiny_model_dir, root, "--ckpt_path", "last", kill_after=4)
    assert code == -signal.SIGKILL, out
    starts.append(last_step(root))
    assert starts[-1] == 4

    code, out = fit(tiny_model_dir, root, "--ckpt_path", "last")
    assert code == 0, out
    assert last_step(root) == STEPS
    assert not half.exists(), "the half-written checkpoint was left behind"

    code, out = finish(straight)
    assert code == 0, out
    expected_dir = tmp_path / "straight" / "lightning_logs" / "version_0"
    runs = [root / "lightning_logs" / f"version_{i}" for i in range(len(starts))]
    for name in TABLES:
        got = [
            row
            for run, start, end in zip(runs, starts, [*starts[1:], None])
            for row in rows_until(run / name, start, end)
        ]
        assert got == rows_after(expected_dir / name, ALL), name
    assert outcomes(runs[-1]) == outcomes(expected_dir)

    # Not vacuous: steps with no right draft and with no wrong one, whose rate cells are empty.
    metrics = rows_after(expected_dir / "metrics.csv", ALL)
    accuracy = {int(r["step"]): float(a) for r in metrics if (a := r.get("train/draft/accuracy"))}
    assert sorted(accuracy) == list(range(STEPS))
    for rate, undefined_at in (("train/regression_rate", 0.0), ("train/conversion_rate", 1.0)):
        steps = {s for s, a in accuracy.items() if a == undefined_at}
        assert steps, f"no step without {rate}: the verifier no longer leaves one"
        assert not [r for r in metrics if int(r["step"]) in steps and rate in r], f"{rate} where undefined"
        assert any(rate in r for r in metrics), f"{rate} is never logged"


def test_a_divergence_with_no_angle_or_no_token_is_left_out_not_zero(tiny_model_dir):
    module = AgonModule(
        model_name_or_path=str(tiny_model_dir), lora=LoraOptions(r=2, target_modules=["q_proj", "v_proj"])
    )
    module.configure_model()
    stats = delta_stats(module.policy, ("alpha", "beta"))  # alpha's B starts at zero: its ΔW is 0
    assert stats["alpha_delta_norm"] == 0 and stats["beta_delta_norm"] > 0
    assert "delta_cosine" not in stats, "a cosine with a zero vector has no value"
    hidden = {"p": torch.randn(1, 3, 4), "q": torch.randn(1, 3, 4)}
    assert mean_token_kls(hidden, torch.randn(5, 4), torch.zeros(1, 3), [("kl", "p", "q")]) == {}
    # no value is no collapse: nothing to compare with the thresholds
    assert not DivergenceMonitor(warmup_steps=0)._check_collapse(None, 5, {"symmetric_kl": 1.0, **stats})

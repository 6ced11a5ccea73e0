"""Every shipped strategy overlay runs the shipped default config end to end: 2 gloo processes on CPU.

``agon fit --config configs/agon.yaml --config configs/strategy/X.yaml`` with the default
callbacks (checkpoints and bundles, trace lengths, divergence, sample tables, the report),
the real sampling path (our decode loop, gathered once per rollout under sharding) and the
evaluation before the first step and after the last, bounded to 2 steps and a few held-out
problems, under a timeout: a deadlock (a collective on one rank only) fails the test instead
of hanging it. The removed FSDP1 overlay fails at once with a message that points at FSDP2.
"""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
OVERLAYS = sorted(p.stem for p in (ROOT / "configs/strategy").glob("*.yaml") if p.stem != "fsdp")
NEEDS = {"deepspeed_zero2": "deepspeed", "deepspeed_zero3": "deepspeed"}
TIMEOUT_S = 420
BOUNDS = [
    "--trainer.accelerator=cpu", "--trainer.devices=2", "--trainer.limit_train_batches=2",
    "--data.init_args.batch_size=2", "--data.init_args.val_size=4", "--data.init_args.hard_size=4",
    "--data.init_args.val_batch_size=4", "--model.grpo.num_generations=4", "--model.rollout.init_args.max_new_tokens=24",
]  # fmt: skip


def agon_fit(root: Path, overlay: str, *extra: str) -> subprocess.CompletedProcess:
    # The installed command: Lightning starts rank one by re-running this process's command line.
    agon = str(Path(sys.executable).with_name("agon"))
    args = [
        agon, "fit", "--config", str(ROOT / "configs/agon.yaml"), "--config", str(ROOT / f"configs/strategy/{overlay}.yaml"),
        *BOUNDS, f"--trainer.default_root_dir={root}", "--threads", "1", *extra,
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        args, env=env, capture_output=True, text=True, timeout=TIMEOUT_S, start_new_session=True
    )


@pytest.mark.slow
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_overlay_runs_the_default_config_on_two_cpu_processes(overlay, tmp_path):
    if overlay in NEEDS:
        pytest.importorskip(NEEDS[overlay])
    root = tmp_path / "run"
    proc = agon_fit(root, overlay)
    assert proc.returncode == 0, proc.stderr[-6000:]
    (log_dir,) = root.glob("lightning_logs/version_*")
    for name in ("trace_lengths.jsonl", "samples.jsonl", "report.md", "outcomes.jsonl", "validation.png"):
        assert (log_dir / name).is_file(), f"{name} missing"
    assert (root / "checkpoints/last.ckpt").exists()
    for adapter in ("alpha", "beta"):
        assert (root / f"checkpoints/last/{adapter}/adapter_model.safetensors").is_file()
    with (log_dir / "metrics.csv").open() as f:
        rows = list(csv.DictReader(f))
    steps = {r["step"] for r in rows if r.get("train/loss")}
    assert len(steps) == 2, steps
    assert any(r.get("divergence/symmetric_kl") for r in rows), "the divergence probe did not run"
    # The evaluation before the first step and after the last: two points on the curve.
    assert len([r for r in rows if r.get("val/deployed/pass@1")]) == 2
    assert "Held-out validation, start vs end" in proc.stdout


def test_the_removed_fsdp1_overlay_fails_with_a_message_pointing_at_fsdp2(tmp_path):
    proc = agon_fit(tmp_path / "run", "fsdp", "--trainer.devices=1")
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "fsdp2.yaml" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.slow
@pytest.mark.vllm
def test_vllm_rollouts_under_zero3_sample_the_whole_trained_adapters(tmp_path):
    """One engine per rank; every weight partitioned, so an adapter pushed from a shard would not load.

    The engine's log-probs of its own samples match the trainer's to float32 round-off after an
    update too: both engines hold the whole adapters as trained (beta's large init makes a wrong
    beta visible at once).
    """
    pytest.importorskip("deepspeed")
    root = tmp_path / "run"
    proc = agon_fit(
        root, "deepspeed_zero3", "--model.rollout=vllm", "--model.rollout.init_args.kv_cache_memory_gib=0.25",
        "--model.rollout.init_args.enforce_eager=true", "--model.rollout.init_args.max_new_tokens=24",
        "--model.lora.beta_init_std=0.05", "--trainer.strategy.init_args.param_persistence_threshold=0",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-6000:]
    (metrics,) = root.glob("lightning_logs/version_*/metrics.csv")
    with metrics.open() as f:
        mismatch = {
            r["step"]: float(r["train/logprob_mismatch"])
            for r in csv.DictReader(f)
            if r.get("train/logprob_mismatch")
        }
    assert set(mismatch) == {"0", "1"}
    assert max(mismatch.values()) < 1e-3, mismatch

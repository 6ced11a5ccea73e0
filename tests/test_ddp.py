"""2-process DDP (gloo, CPU): ranks agree, match one process over the same global batch, and the plain reference."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from ddp_worker import GRPO, LORA, SGD
from reference import reference_step

from agon_lightning.policy import attach_adapters, load_base

WORKER = Path(__file__).with_name("ddp_worker.py")


def run_worker(devices: int, out: Path, model_dir: Path) -> None:
    out.mkdir()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(WORKER.parent)}
    proc = subprocess.run([sys.executable, str(WORKER), str(devices), str(out), str(model_dir)],
                          env=env, capture_output=True, text=True, timeout=600)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]


@pytest.mark.slow
def test_two_process_ddp_matches_one_process(tiny_model_dir, tmp_path):
    run_worker(2, tmp_path / "ddp", tiny_model_dir)
    run_worker(1, tmp_path / "single", tiny_model_dir)
    rank0 = torch.load(tmp_path / "ddp/rank0.pt", weights_only=False)
    rank1 = torch.load(tmp_path / "ddp/rank1.pt", weights_only=False)
    single = torch.load(tmp_path / "single/rank0.pt", weights_only=False)
    assert rank0["steps"] == rank1["steps"] == single["steps"] == 2
    init = None
    for name, w in rank0["weights"].items():
        assert torch.equal(w, rank1["weights"][name]), f"ranks disagree on {name}"
        assert torch.allclose(w, single["weights"][name], atol=1e-5, rtol=1e-4), f"DDP != 1 process on {name}"
        init = init or name
    # The comparison is not vacuous: both adapters moved away from their initial values.
    moved = [n for n in rank0["weights"] if ".lora_B.alpha." in n and rank0["weights"][n].abs().sum() > 0]
    assert moved, "alpha's B is still zero: no update happened"

    # The same reference every training option is held to: each rank's games, one role at a time,
    # full logits, no checkpointing, gradients averaged over the ranks as DDP does.
    base, _ = load_base(str(tiny_model_dir))
    plain = attach_adapters(base, ("alpha", "beta"), LORA)
    buffers: dict = {}
    for (before, record0, after), (_, record1, _) in zip(rank0["recorded"], rank1["recorded"]):
        params = dict(plain.named_parameters())
        with torch.no_grad():
            for name, value in before.items():
                params[name].copy_(value)
        expected = reference_step(plain, [record0, record1], GRPO, 1.0, 16, ("alpha", "beta"), SGD, buffers)
        for name, value in expected.items():
            assert torch.allclose(after[name], value, atol=2e-6), f"DDP step != reference on {name}"

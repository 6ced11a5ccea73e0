"""2-process DDP (gloo, CPU): ranks agree, and match one process over the same global batch."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

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
    rank0 = torch.load(tmp_path / "ddp/rank0.pt")
    rank1 = torch.load(tmp_path / "ddp/rank1.pt")
    single = torch.load(tmp_path / "single/rank0.pt")
    assert rank0["steps"] == rank1["steps"] == single["steps"] == 2
    init = None
    for name, w in rank0["weights"].items():
        assert torch.equal(w, rank1["weights"][name]), f"ranks disagree on {name}"
        assert torch.allclose(w, single["weights"][name], atol=1e-5, rtol=1e-4), f"DDP != 1 process on {name}"
        init = init or name
    # The comparison is not vacuous: both adapters moved away from their initial values.
    moved = [n for n in rank0["weights"] if ".lora_B.alpha." in n and rank0["weights"][n].abs().sum() > 0]
    assert moved, "alpha's B is still zero: no update happened"

"""Each sharded strategy computes DDP's step, and saves, reloads and resumes it exactly.

2 gloo processes on the tiny model, scripted rollouts (the same games under every strategy),
gradient clipping on (and active), the evaluation before the first step and after the last.
For FSDP2 (both checkpoint formats), DeepSpeed ZeRO-2 and ZeRO-3 (every weight partitioned):

* both adapters start exactly as under DDP (alpha's ``lora_B`` zero, beta's seeded noise) and
  every step's update equals DDP's to float32 precision, on every rank;
* a checkpoint written after step 1 holds only the adapters and the optimizer state; a fresh
  pair of processes resumes from it: the adapters it restores are bit-identical, the optimizer
  state of both parameter groups too, and step 2 then lands bit-identically where the
  unbroken run did;
* the adapter bundle beside each checkpoint holds the whole adapters.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from strategy_runs import RESUME_FROM, STEPS

# The checkpoint format each run writes (the runs: tests/strategy_runs.py's STEPS).
CASES = {
    "fsdp2": "torch_distributed",
    "fsdp2_one_file": "file",
    "deepspeed_zero2": "deepspeed",
    "deepspeed_zero3": "deepspeed",
}
ATOL = 1e-6  # float32 round-off of a different reduction order; the updates are ~1e-2


def saved_keys(path: Path, kind: str) -> list[str]:
    """The model tensors a checkpoint holds, in whichever format it was written."""
    if kind == "file":
        assert path.is_file()
        return list(torch.load(path, weights_only=False)["state_dict"])
    assert path.is_dir()
    if kind == "torch_distributed":
        import torch.distributed.checkpoint as dcp

        keys = dcp.FileSystemReader(path).read_metadata().state_dict_metadata
        return [k.removeprefix("state_dict.") for k in keys if k.startswith("state_dict.")]
    # ZeRO-2: mp_rank_00_model_states.pt; ZeRO-3: one zero_pp_rank_R_mp_rank_00_model_states.pt per rank.
    model_file = sorted(path.glob("checkpoint/*model_states.pt"))[0]
    return list(torch.load(model_file, weights_only=False)["module"])


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_a_sharded_strategy_computes_saves_and_resumes_ddps_step(case, ddp_run, launches):
    kind = CASES[case]
    if STEPS[case][0].startswith("zero"):
        pytest.importorskip("deepspeed")
    ddp = ddp_run[0]
    runs = launches.steps(case)
    run_dir = launches.run_dir(case)
    first = runs[0]
    assert first["steps"] == 2

    # The adapters' init exactly as configured, as under DDP (ZeRO-3 builds the model whole first).
    init = first["restored"][0]
    for name, value in ddp["restored"][0].items():
        assert torch.equal(init[name], value), f"init differs from DDP's on {name}"
    assert all(init[n].abs().sum() == 0 for n in init if ".lora_B.alpha." in n)
    beta_b = torch.cat([init[n].flatten() for n in init if ".lora_B.beta." in n])
    assert 0.5e-3 < float(beta_b.std()) < 2e-3  # beta_init_std=1e-3

    # Every step: DDP's update, on every rank.
    for step, ((_, _, ours), (_, _, theirs)) in enumerate(zip(first["recorded"], ddp["recorded"])):
        for name, value in theirs.items():
            assert torch.allclose(ours[name], value, atol=ATOL, rtol=0), (
                f"step {step}: {name} differs from DDP"
            )
    for name, value in first["weights"].items():
        assert torch.equal(value, runs[1]["weights"][name]), f"ranks disagree on {name}"
    for adapter in ("alpha", "beta"):
        moved = max(float((first["weights"][n] - init[n]).abs().max()) for n in init if f".{adapter}." in n)
        assert moved > 1e-3, f"{adapter} did not move"
    # Evaluated before the first step (outside the loop) and after each epoch (inside it).
    assert [step for step, _ in first["history"]] == [0, 1, 2]

    # The checkpoint after step 1 holds the adapters (all of them, nothing else) and the optimizer state.
    keys = saved_keys(run_dir / RESUME_FROM, kind)  # after step 1
    assert keys and all("lora_" in k for k in keys), [k for k in keys if "lora_" not in k][:3]
    assert len(keys) == len(init)

    # A fresh pair of processes resumes from it: restored bit for bit, then step 2 exactly.
    resumed = launches.resumed(case)
    for rank, (a, b) in enumerate(zip(runs, resumed)):
        weights, optimizer = b["restored"]
        after_step_1 = a["recorded"][0][2]
        for name, value in after_step_1.items():
            assert torch.equal(weights[name], value), f"rank {rank}: {name} not restored exactly"
        saved = a["optimizer"][0]
        assert optimizer["groups"] == saved["groups"] == ["alpha", "beta"]
        assert len(optimizer["state"]) == len(saved["state"]) > 0
        for x, y in zip(optimizer["state"], saved["state"]):
            assert torch.equal(x, y), f"rank {rank}: optimizer state not restored exactly"
        assert b["steps"] == 2
        for name, value in a["weights"].items():
            assert torch.equal(b["weights"][name], value), f"rank {rank}: resumed step 2 differs on {name}"

    # The bundle beside the last checkpoint: the whole adapters, in PEFT's layout.
    for adapter in ("alpha", "beta"):
        bundle = load_file(run_dir / f"checkpoints/last/{adapter}/adapter_model.safetensors")
        ours = {n.replace(f".{adapter}.", "."): v for n, v in first["weights"].items() if f".{adapter}." in n}
        assert set(bundle) == set(ours)
        for name, value in ours.items():
            assert torch.equal(bundle[name], value), f"bundle {adapter}: {name}"

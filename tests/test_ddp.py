"""2-process DDP (gloo, CPU): ranks agree, match one process over the same global batch, and the plain reference."""

import pytest
import torch
from ddp_worker import GRPO, LORA, MAX_GRAD_NORM, SGD
from reference import reference_step
from strategy_runs import run_worker

from agon_lightning.adapters.policy import attach_adapters, load_base


@pytest.mark.slow
def test_two_process_ddp_matches_one_process(ddp_run, tiny_model_dir, tmp_path):
    rank0, rank1 = ddp_run
    (single,) = run_worker("ddp", 1, tmp_path / "single", tiny_model_dir)
    assert rank0["steps"] == rank1["steps"] == single["steps"] == 2
    for name, w in rank0["weights"].items():
        assert torch.equal(w, rank1["weights"][name]), f"ranks disagree on {name}"
        assert torch.allclose(w, single["weights"][name], atol=1e-5, rtol=1e-4), f"DDP != 1 process on {name}"
    # The comparison is not vacuous: both adapters moved away from their initial values.
    moved = [n for n in rank0["weights"] if ".lora_B.alpha." in n and rank0["weights"][n].abs().sum() > 0]
    assert moved, "alpha's B is still zero: no update happened"

    # The same reference every training option is held to: each rank's games, one role at a time,
    # full logits, no checkpointing, gradients averaged over the ranks as DDP does, the global norm
    # of both adapters' gradients clipped (and the clipping is not idle: unclipped is another step).
    base, _ = load_base(str(tiny_model_dir))
    plain = attach_adapters(base, ("alpha", "beta"), LORA)
    buffers: dict = {}
    for (before, record0, after), (_, record1, _) in zip(rank0["recorded"], rank1["recorded"]):
        params = dict(plain.named_parameters())
        with torch.no_grad():
            for name, value in before.items():
                params[name].copy_(value)
        unclipped = reference_step(
            plain,
            [record0, record1],
            GRPO,
            1.0,
            16,
            ("alpha", "beta"),
            SGD,
            {n: b.clone() for n, b in buffers.items()},
        )
        with torch.no_grad():
            for name, value in before.items():
                params[name].copy_(value)
        expected = reference_step(plain, [record0, record1], GRPO, 1.0, 16, ("alpha", "beta"), SGD, buffers,
                                  max_grad_norm=MAX_GRAD_NORM)  # fmt: skip
        assert any(not torch.allclose(unclipped[n], expected[n], atol=1e-4) for n in expected), (
            "nothing clipped"
        )
        for name, value in expected.items():
            assert torch.allclose(after[name], value, atol=2e-6), f"DDP step != reference on {name}"

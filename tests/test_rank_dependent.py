"""Work that differs between ranks, under every strategy: each case finishes and lands where DDP does.

Every real run has it: ranks sample different lengths, read prompts of different lengths, see
groups without a signal or drafts without an answer, meet a non-finite loss alone, get a last
batch smaller than the rest, or a validation set that does not divide by the number of ranks.
Such work must never reach what every rank has to do alike: a collective, or under ZeRO-3 a
hooked module call (ZeRO-3 compares the module trace across ranks and stopped ``agon fit`` at
the second step when the decode loop called the activation module once per decode step).

One launch of 2 gloo processes per strategy runs all the cases (``tests/rank_cases_worker.py``,
after the strategy's 2-step runs of tests/test_strategies.py in the same launch: process start
and DeepSpeed's initialisation dominate, the cases take about a second each), with
:class:`~call_trace.CallTrace` comparing each step's collectives and hooked module calls across
the ranks. Per case and strategy: no error, no divergence, both ranks hold the same adapters,
the steps taken and skipped that the case implies, and DDP's adapters (and validation metrics)
to float32 round-off. The recorder is shown to fail: the ``old_act`` case puts the activation
module back in the decode loop, and under ZeRO-3 it reports the first differing call, naming
the activation module, at the end of the first step, and stops there (before the forward that
crashed).
"""

from __future__ import annotations

import pytest
import torch
from call_trace import first_difference
from rank_cases_worker import CASES

STRATEGIES = ("ddp", "fsdp2", "zero2", "zero3")
ATOL = 1e-6  # float32 round-off of another reduction order; the updates are ~1e-2
STEPS = {case: 1 if case == "val_not_divisible" else 2 for case in CASES}
SKIPPED = {"nonfinite": 1}


def max_diff(a: dict, b: dict) -> float:
    assert set(a) == set(b) and a
    return max(float((a[n] - b[n]).abs().max()) for n in a)


def test_the_comparison_names_the_first_differing_call():
    same = ["dist.all_reduce((1,))", "module m.layers.0 (Layer)"]
    assert first_difference([same, list(same)]) is None
    extra = [*same, "module m.layers.0.mlp.act_fn (SiLUActivation)"]
    line = first_difference([same, extra])
    assert line == (
        "call 2 differs (rank 0: (nothing: its record ends here); rank 1: module m.layers.0.mlp.act_fn "
        "(SiLUActivation)); calls per rank: 2, 3"
    )
    swapped = first_difference([["dist.broadcast((1,))"], ["dist.all_reduce((1,))"]])
    assert swapped is not None and "rank 0: dist.broadcast((1,)); rank 1: dist.all_reduce((1,))" in swapped


@pytest.mark.slow
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_rank_dependent_work_finishes_alike_on_every_rank_and_as_under_ddp(strategy, launches):
    if strategy.startswith("zero"):
        pytest.importorskip("deepspeed")
    ours = launches.cases(strategy)
    ddp = launches.cases("ddp")[0]
    for case in CASES:
        first, second = ours[0][case], ours[1][case]
        for r, res in enumerate((first, second)):
            assert res["error"] is None, f"{case}, rank {r}: {res['error']}"
        if strategy == "zero3" and case == "old_act":
            continue  # below: the recorder's own test
        assert first["divergence"] is None, f"{case}: {first['divergence']}"
        assert first["compared"] == STEPS[case] + (case == "val_not_divisible")
        assert (first["steps"], first["skipped"]) == (STEPS[case], SKIPPED.get(case, 0)), case
        for name, value in first["weights"].items():
            assert torch.equal(value, second["weights"][name]), f"{case}: the ranks disagree on {name}"
        diff = max_diff(first["weights"], ddp[case]["weights"])
        assert diff <= ATOL, f"{case}: adapters differ from DDP's by {diff:.2e}"
        assert [s for s, _ in first["history"]] == [s for s, _ in ddp[case]["history"]], case
        for (_, ours_m), (_, theirs) in zip(first["history"], ddp[case]["history"]):
            assert ours_m.keys() == theirs.keys()
            for k in (k for k in theirs if "wall_s" not in k):  # all but the timings
                assert abs(ours_m[k] - theirs[k]) <= 1e-6, f"{case}: {k} {ours_m[k]} vs DDP's {theirs[k]}"
        # The case trained something (nonfinite: its second step; old_act elsewhere: as lengths).
        assert max_diff(first["weights"], first["start"]) > 1e-3, f"{case}: the adapters did not move"
    assert len(ours[0]["val_not_divisible"]["history"]) == 1
    # The cases did what they say: rank 1's drafts left nothing to summarise, rank 0's did.
    assert ours[1]["no_answer"]["summaries"] and all(s == "" for s in ours[1]["no_answer"]["summaries"])
    assert any(s != "" for s in ours[0]["no_answer"]["summaries"])


@pytest.mark.slow
def test_the_recorder_catches_a_rank_dependent_module_call_under_zero3_and_names_it(launches):
    """The old decode loop called the activation module per decode step: the recorder stops it at step 1."""
    pytest.importorskip("deepspeed")
    ours = launches.cases("zero3")
    for rank in (0, 1):
        res = ours[rank]["old_act"]
        assert res["error"] is None  # stopped by the recorder, not by ZeRO-3's crash at the next forward
        line = res["divergence"]
        assert line is not None and line.startswith("training step 0: call "), line
        assert "rank 1: module policy.base_model.model.model.layers.0.mlp.act_fn (SiLUActivation)" in line
        assert res["steps"] == 1 and res["compared"] == 1
    # Rank 1 decoded 4 more steps: 2 layers × 2 rollouts (drafts, challenges) × 4 more act_fn calls.
    (_, hooked0), (_, hooked1) = ours[0]["old_act"]["counts"][0], ours[1]["old_act"]["counts"][0]
    assert hooked1 - hooked0 == 2 * 2 * 4
    # With the fix the same case records equal traces (the lengths case is old_act without the patch).
    assert ours[0]["lengths"]["divergence"] is None
    assert ours[0]["lengths"]["counts"] == ours[1]["lengths"]["counts"]

"""The measures behind the Countdown preconditions (agon_lightning/testbeds/countdown/preconditions.py)."""

from __future__ import annotations

import pytest
import torch

from agon_lightning.testbeds.countdown.preconditions import (
    blind_step,
    cap_share_of_failures,
    copy_candidates,
    load,
    mean,
    mean_cv,
    pass_at,
    table,
    verdict_accuracy,
)


def test_pass_at_and_length_spread() -> None:
    assert pass_at([[True, False, False, False], [False] * 4]) == (1 / 8, 0.5)
    assert mean_cv([[10, 10], [5, 15]]) == pytest.approx(0.25)  # (0 + 0.5) / 2
    assert cap_share_of_failures([True, False, False, False], [True, True, False, True]) == pytest.approx(
        2 / 3
    )
    assert cap_share_of_failures([True], [True]) == 0.0 and mean([]) == 0.0


def test_a_verdict_is_right_only_on_the_claim_it_redoes() -> None:
    summary = "9*3=28, 28+8=36, left 36 -> 36"  # one false claim, one true one (given 28)
    assert verdict_accuracy(summary, "<think>9*3=27 n|28+8=36 y\n9*3=27|27+8=35</think>") == (1, 1, 1, 1)
    assert verdict_accuracy(summary, "<think>9*3=27 y|28+8=36 y\n</think>") == (1, 1, 0, 1)
    assert verdict_accuracy(summary, "<think>9*3=27|27+8=35</think>") == (0, 1, 0, 1)  # no verdicts: wrong
    assert verdict_accuracy(summary, "<think>8*3=24 n|28+8=36 y</think>") == (1, 1, 0, 1)  # another claim


def test_leak_rules() -> None:
    assert copy_candidates("9*3=27, left 27 8 -> 35") == ["9*3=27, left 27 8 -> 35", "9*3"]
    assert blind_step("9*3=27, left 27 8 -> 35", [3, 8, 9], "+") == "9*3+8"
    assert blind_step("9*3=27, left 27 8 -> 35", [3, 8, 9], "-") == "9*3-8"
    assert blind_step("5*5=25, left 25 8", [3, 8, 9], "+") == "3+8+9"  # claims that do not apply are dropped
    assert blind_step("left 3", [3], "+") is None


def test_the_table_marks_each_precondition() -> None:
    values = {"greedy_pass@1_main": 0.45, "greedy_pass@1_hard": 0.05, "pass@k_over_pass@1_hard": 2.0,
              "length_cv": 0.31, "cap_share_of_failures": 0.1, "real_minus_other": 0.2, "real_minus_empty": 0.2,
              "judge_accuracy": 0.95, "leak_copy": 0.0, "leak_blind_step": 0.5, "converted": 5, "regressed": 7}  # fmt: skip
    text, rows = table(values)
    verdicts = {r["id"]: r["pass"] for r in rows}
    assert verdicts == {"1a": True, "1b": False, "1c": True, "2a": True, "2b": False, "3a": False, "3b": True,
                        "3c": True, "4": True, "5a": True, "5b": False}  # fmt: skip
    assert "| 3a | untrained cascade: converted vs regressed | converted > regressed | 5 vs 7 | NO |" in text


def test_the_oracle_sees_that_a_drafter_that_never_gives_up_leaves_failed_drafts_no_summary() -> None:
    # M2's generator (a search skips to the hit after five misses, never gives up) fails only at
    # the cap, so a failed draft has no summary for a challenger to read; the shipped one (A2,
    # A3) gives up, and its failed drafts' summaries name what they tried; with a habit, the
    # oracle also reports the base that always gives up there (mode/)
    from experiments.countdown.oracle import examples_of, oracle

    # 40 problems of each split: the share of failed drafts with a summary is 0.70 on all of them
    # (oracle_a3_format.json), and a handful of problems puts it anywhere (0.40 on 16)
    setup = load("configs/countdown.yaml", "agon:tiny-countdown", limit=40)
    m2_format = {"max_attempts": 6, "give_up": None, "give_up_habit": None, "rival_misses": (1, 4)}
    old = oracle(setup, examples_of("configs/sft_countdown.yaml", m2_format), samples=2)
    new = oracle(setup, examples_of("configs/sft_countdown.yaml", {}), samples=2)
    assert old["failed_drafts"] and old["failed_with_summary"] == 0 and old["cap_share_of_failures"] == 1
    assert old["same/real_minus_empty"] == 0
    assert new["failed_drafts"] > old["failed_drafts"] and new["failed_with_summary"] >= 0.5
    assert set(new) - set(old) == {k for k in new if k.startswith("mode/")} and new["mode/failed_drafts"]
    assert all(
        0 <= new[k] <= 1 for k in ("pass@1_main", "pass@1_hard", "length_cv", "mode/failed_with_summary")
    )


def test_a_trained_bundle_is_measured_with_its_drafter_drafting_and_its_answerer_reading(tmp_path) -> None:
    # The summary ablation on trained adapters (S3's diagnostics): the same measures, the bundle's
    # drafter drafting, its answerer reading the summaries (real, another problem's, empty).
    from agon_lightning.adapters.policy import LoraOptions
    from agon_lightning.deploy.bundle import save_bundle
    from agon_lightning.testbeds.countdown.preconditions import generate, measure
    from agon_lightning.training.module import AgonModule

    module = AgonModule(model_name_or_path="agon:tiny-countdown", lora=LoraOptions(r=4))
    module.configure_model()
    generator = torch.Generator().manual_seed(0)
    for name, param in module.policy.named_parameters():
        if "lora_B" in name and ".beta" in name:
            param.data.copy_(torch.randn(param.shape, generator=generator) * 0.5)  # beta: far from the base
    bundle = save_bundle(module, tmp_path / "bundle")
    setup = load("configs/countdown.yaml", "ignored", limit=3, bundle=str(bundle))
    assert (setup.drafter, setup.answerer) == ("alpha", "beta")
    prompts = [setup.prompts.draft_prompt(setup.tokenizer, p) for p in setup.problems]
    base, alpha, beta = (generate(setup, prompts, adapter=a)[0] for a in (None, "alpha", "beta"))
    assert alpha == base != beta  # alpha is zero-initialised: the base's drafts; beta's differ
    values = measure(setup, samples=1, log=lambda _: None)
    assert {"failed_real", "failed_other", "failed_empty", "real_minus_other"} <= set(
        values["by_split"]["main"]
    )
    with pytest.raises(ValueError, match="'gamma' is not an adapter"):
        load("configs/countdown.yaml", "ignored", limit=3, bundle=str(bundle), answerer="gamma")

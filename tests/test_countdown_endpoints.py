"""``experiments/countdown/endpoints.py``: the Countdown sweep's pre-registered endpoints and decision rule."""

import csv
import json
import random
from pathlib import Path

import pytest
import yaml

from agon_lightning.experiments.stats import PairedDifference
from agon_lightning.experiments.sweep import MARKER
from experiments.countdown.endpoints import decide
from experiments.countdown.endpoints import main as endpoints_main


@pytest.mark.parametrize(
    ("low", "high", "decision"),
    [
        (0.01, 0.2, "shown"),
        (-0.2, -0.001, "contradicted"),
        (-0.05, 0.1, "not resolved"),
        (0.0, 0.1, "not resolved"),
    ],
)
def test_the_decision_rule_reads_only_the_intervals_ends(low, high, decision):
    assert decide(PairedDifference((low + high) / 2, low, high, 5, 900)) == decision
    assert decide(None) == "not run"


DEPLOYED = {"grpo": "alpha", "agon": "cascade_ab", "other_summary": "cascade_ab", "tiebreak": "cascade_ab"}


def finished_run(
    out: Path, variant: str, seed: int, correct: list[bool], p50: list[float], conv: float = 0.1
):
    """A finished-looking sweep run: metrics.csv with evaluations at steps 0, 20 and 40 (answer
    stage p50 per step), outcomes.jsonl of the deployed policy, config.yaml and the marker."""
    run_dir = out / variant / f"seed_{seed}"
    log = run_dir / "lightning_logs" / "version_0"
    log.mkdir(parents=True)
    (log / "config.yaml").write_text(
        yaml.safe_dump({"model": {"grpo": {"num_generations": 8}}, "data": {"init_args": {"batch_size": 8}}})
    )
    final = {"val/deployed/length/p50": p50[-1]}
    if DEPLOYED[variant].startswith("cascade"):
        final |= {"val/deployed/conversions": conv, "val/deployed/regressions": conv / 2}
    rows = [
        {"step": step, "val/deployed/pass@1": 0.5, "val/deployed/length": 50.0, "val/base/pass@1": 0.4,
         "val/deployed/length/p50": length}
        for step, length in zip((0, 20, 40), p50)
    ]  # fmt: skip
    rows[-1].update(final)
    rows[1:1] = [
        {"step": s, "train/draft/length": 10, "time/generate_s": 1.0, "time/update_s": 1.0} for s in range(40)
    ]
    columns = list(dict.fromkeys(k for r in rows for k in r))
    with (log / "metrics.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    key = DEPLOYED[variant]
    (log / "outcomes.jsonl").write_text(
        "".join(
            json.dumps({"question": f"q{i}", "split": "", "deployed": key, key: c, f"{key}/length": 10})
            + "\n"
            for i, c in enumerate(correct)
        )
    )
    (run_dir / MARKER).write_text(json.dumps({"argv": [], "wall_s": 1.0}))


def test_endpoints_decide_each_difference_and_say_a_decision_is_interim_until_every_seed_ran(tmp_path):
    rng = random.Random(0)
    for seed in (0, 1):
        grpo = [rng.random() < 0.5 for _ in range(400)]
        better = [g or rng.random() < 0.4 for g in grpo]  # Agon solves all GRPO does and more
        finished_run(tmp_path, "grpo", seed, grpo, [115.0, 90.0, 64.0])
        finished_run(tmp_path, "agon", seed, better, [110.0, 100.0, 100.0])
        finished_run(
            tmp_path, "other_summary", seed, better, [110.0, 100.0, 100.0]
        )  # reads no rival's content
        finished_run(tmp_path, "tiebreak", seed, better, [110.0, 80.0, 70.0])
    endpoints_main([str(tmp_path)])
    record = json.loads((tmp_path / "endpoints.json").read_text())
    by = {(d["variant"], d["reference"], d["split"]): d for d in record["differences"]}
    primary = by["agon", "grpo", "main"]
    assert (
        primary["decision"] == "shown"
        and primary["low"] > 0
        and (primary["seeds"], primary["problems"]) == (2, 400)
    )
    assert not primary["final"]  # 2 of the 5 registered seeds
    assert by["agon", "other_summary", "main"]["decision"] == "not resolved"  # identical outcomes: 0 [0, 0]
    assert by["cooperative", "grpo", "main"]["decision"] == "not run"
    assert by["agon", "grpo", "hard"]["decision"] == "not run"  # no hard split in these runs
    text = (tmp_path / "endpoints.md").read_text()
    assert "cannot attribute to reading the rival" in text
    assert "`grpo` 2/5" in text and "`tiebreak` 2/3" in text
    lengths = record["lengths"]
    assert lengths["grpo"]["main"]["p50"] == {"0": 115.0, "20": 90.0, "40": 64.0}
    assert lengths["grpo"]["main"]["change"] == -51.0 and lengths["agon"]["main"]["change"] == -10.0
    assert record["tiebreak"]["length_p50_difference"] == -30.0
    assert record["tiebreak"]["equal_pass"]  # identical outcomes: an interval of exactly 0
    assert record["cascades"]["agon"] == {"seeds": 2, "conversions": 0.1, "regressions": 0.05}
    assert "grpo" not in record["cascades"]  # one policy: nothing to convert


def test_without_the_control_the_attribution_is_open_not_refused(tmp_path):
    rng = random.Random(1)
    grpo = [rng.random() < 0.5 for _ in range(400)]
    finished_run(tmp_path, "grpo", 0, grpo, [100.0, 100.0, 100.0])
    finished_run(tmp_path, "agon", 0, [g or rng.random() < 0.4 for g in grpo], [100.0, 100.0, 100.0])
    endpoints_main([str(tmp_path)])
    text = (tmp_path / "endpoints.md").read_text()
    assert "still open" in text and "cannot attribute" not in text


def test_an_empty_sweep_directory_says_so(tmp_path):
    with pytest.raises(SystemExit, match="no finished run"):
        endpoints_main([str(tmp_path)])

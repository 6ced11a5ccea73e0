"""``agon sweep --table paper``: the paper's rows, a derived row read from another run, the table itself."""

from __future__ import annotations

import csv
import json
import random
import re
from pathlib import Path

import pytest
from test_sweep import BASE, EXPERIMENTS, write_outcomes, write_run

from agon_lightning.experiments.paper_table import MAIN, PAPER_VARIANTS, pass_cell, pooled
from agon_lightning.experiments.stats import clopper_pearson, crossed_t
from agon_lightning.experiments.sweep import MARKER, plan, report, sweep, sweep_main


def test_the_papers_rows_are_shipped_variants_in_its_order():
    assert [r.variant for r in MAIN] == [
        "zero_shot", "grpo", "self_refine", "grpo_self_cascade", "moa_untrained", "shared_opponent",
        "cooperative", "agon",
    ]  # fmt: skip
    assert set(PAPER_VARIANTS) == {r.variant for r in MAIN} | {"margin", "fixed_roles", "tiebreak"}
    assert all((EXPERIMENTS / f"{v}.yaml").is_file() for v in PAPER_VARIANTS)


def add_key(run_dir: Path, key: str, evals: dict[int, tuple[float, float]]) -> None:
    """Add ``val/KEY/pass@1`` and ``…/length`` to the evaluation rows of a run's metrics.csv."""
    path = run_dir / "lightning_logs" / "version_0" / "metrics.csv"
    rows = list(csv.DictReader(path.open()))
    columns = [*rows[0], f"val/{key}/pass@1", f"val/{key}/length"]
    for row in rows:
        if row.get("val/deployed/pass@1"):
            row[f"val/{key}/pass@1"], row[f"val/{key}/length"] = evals[int(row["step"])]
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)


def test_a_derived_row_reads_its_source_run_and_is_never_run_itself(tmp_path):
    runs = plan(["grpo_self_cascade", "agon"], [0], tmp_path, EXPERIMENTS)
    assert [(r.variant, r.derived) for r in runs] == [
        ("grpo", False),
        ("grpo_self_cascade", True),
        ("agon", False),
    ]
    assert runs[1].directory == runs[0].directory == tmp_path / "grpo" / "seed_0"
    assert runs[1].metric_key == "cascade_aa" and runs[0].metric_key == "deployed"
    calls = []

    def runner(argv, log_path: Path) -> int:
        calls.append(log_path.parent.parent.name)
        write_run(log_path.parent, [(0, 0.25, 30.0), (2, 0.5, 20.0)], steps=2)
        if calls[-1] == "grpo":  # the grpo run evaluates alpha (deployed) and its self-cascade
            add_key(log_path.parent, "cascade_aa", {0: (0.25, 60.0), 2: (0.75, 40.0)})
        return 0

    assert sweep(runs, BASE, [], tmp_path, runner) == []
    assert sorted(calls) == ["agon", "grpo"]
    by_variant = {r.variant: r for r in report(runs, tmp_path)}
    assert (
        by_variant["grpo_self_cascade"].pass_at_1 == 0.75 and by_variant["grpo_self_cascade"].length == 40.0
    )


def test_table_paper_runs_the_papers_rows_by_default(tmp_path, capsys):
    sweep_main(["--table", "paper", "--seeds", "0", "1", "--out", str(tmp_path), "--base-config", str(BASE),
                "--experiments-dir", str(EXPERIMENTS), "--dry-run"])  # fmt: skip
    lines = capsys.readouterr().out.splitlines()
    ran = [re.search(r"experiments/(\w+)\.yaml", line).group(1) for line in lines]
    expected = [v for v in PAPER_VARIANTS if v != "grpo_self_cascade"]  # read from the grpo runs
    assert ran == expected + [v for v in expected if v not in ("zero_shot", "moa_untrained")]
    assert [line.split()[1] for line in lines[:2]] == ["validate", "fit"]  # zero_shot is evaluated only


def test_pooled_cells_give_an_interval_over_new_seeds_and_new_problems(tmp_path):
    runs = plan(["agon", "cooperative", "grpo"], [0, 1], tmp_path, EXPERIMENTS)
    rng = random.Random(3)
    for run in runs:
        write_run(run.directory, [(0, 0.25, 30.0), (4, 0.5, 20.0)], steps=4)
        (run.directory / MARKER).write_text(json.dumps({"argv": [], "wall_s": 10.0}))
        p = {"agon": 0.6, "cooperative": 0.45, "grpo": 0.3}[run.variant]
        write_outcomes(run.directory, "alpha" if run.variant == "grpo" else "cascade_ab",
                       [rng.random() < p for _ in range(100)])  # fmt: skip
    results = report(runs, tmp_path, table="paper")
    k, n, seeds = pooled(results, "agon")
    assert (n, seeds) == (200, 2)
    agon = [[ok for ok, _ in r.outcomes[""].values()] for r in results if r.variant == "agon"]
    d = crossed_t(agon)
    low, high = max(0.0, d.low), min(1.0, d.high)  # two seeds: a t with about one degree of freedom
    assert (low, high) != clopper_pearson(k, n)  # not the pooled binomial
    assert pass_cell(results, "agon").startswith(
        f"{100 * k / n:.1f} [{100 * low:.1f}, {100 * high:.1f}] (2 × 100)"
    )
    # The seeds' range counts the same problems as the pooled value (the logged pass@1 here is 0.5 for every run).
    per_seed = [sum(ok for ok, _ in r.outcomes[""].values()) / 100 for r in results if r.variant == "agon"]
    assert pass_cell(results, "agon").endswith(f"; seeds {100 * min(per_seed):.1f}–{100 * max(per_seed):.1f}")
    assert min(per_seed) <= k / n <= max(per_seed)
    assert pass_cell(results, "margin") == "—"
    table = (tmp_path / "paper_table.md").read_text()
    agon = next(line for line in table.splitlines() if line.startswith("| Agon (competition + exchange) |"))
    assert "| `agon` | 61 [55.2, 66.6] | 3.5 |" in agon and pass_cell(results, "agon") in agon
    exchange = next(line for line in table.splitlines() if line.startswith("| exchange |"))
    mean, low, high = (float(v) for v in re.findall(r"[+-]\d\.\d+", exchange)[:3])
    assert low < mean < high and "`cooperative` − `grpo` | +16 |" in exchange
    assert "Not run (yet): `zero_shot`, `self_refine`" in table


@pytest.mark.slow
def test_table_paper_end_to_end_on_a_tiny_model(tiny_model_dir, tmp_path):
    out = tmp_path / "sweep"
    overrides = [
        f"--model.model_name_or_path={tiny_model_dir}", "--trainer.limit_train_batches=1",
        "--trainer.enable_checkpointing=false", "--data.init_args.batch_size=2",
        "--data.init_args.train_size=20", "--data.init_args.val_size=4", "--data.init_args.hard_size=2",
        "--model.grpo.num_generations=2", "--model.rollout.init_args.max_new_tokens=6",
        "--trainer.callbacks=[{class_path: agon_lightning.callbacks.report.ValidationReport}]",
    ]  # fmt: skip
    sweep_main(["--table", "paper", "--variants", "grpo_self_cascade", "shared_opponent", "--seeds", "0",
                "--out", str(out), "--base-config", str(BASE), "--experiments-dir", str(EXPERIMENTS), "--", *overrides])  # fmt: skip
    table = (out / "paper_table.md").read_text()
    for variant in ("grpo", "grpo_self_cascade", "shared_opponent"):
        line = next(x for x in table.splitlines() if f"| `{variant}` |" in x)
        assert re.search(r"\| \d+\.\d \[\d+\.\d, \d+\.\d\] \(1 × 4\)", line), line
    diagnostics = next(x for x in table.splitlines() if x.startswith("| `shared_opponent` |") and "→" in x)
    assert re.search(r"\d\.\d\d → \d\.\d\d", diagnostics), diagnostics  # overlap at the start and the end
    # Length per role, measured at the last evaluation: a cascade has both stages, GRPO one.
    cascade = next(x for x in table.splitlines() if x.startswith("| shared_opponent |"))
    assert re.fullmatch(r"\| shared_opponent( \| \d+\.\d+){6} \|", cascade), cascade
    grpo = next(x for x in table.splitlines() if x.startswith("| grpo |"))
    assert re.fullmatch(r"\| grpo( \| \d+\.\d+){3}( \| —){3} \|", grpo), grpo
